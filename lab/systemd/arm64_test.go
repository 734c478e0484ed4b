package systemd

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/lab"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// arm64Node is issue 28, section 5: a real arm64 node under real systemd, only its CPU emulated
// (qemu-user through binfmt_misc, whose F flag opens the emulator once, on this machine, so it
// serves the node's processes too). The arm64 .deb installs with dpkg on a node told to take
// arm64 packages; the host it seeds runs, confirms and says arm64 in its heartbeats. Releases are
// one version for linux/amd64 and linux/arm64 under one signed manifest (schema 4): the node takes
// its platform's build of a good one by standing aside, and is rolled back from a broken one —
// the launcher, systemd's main process, never restarted.
func arm64Node(t *testing.T, ctx context.Context, w *world) {
	const good, broken = "v1.3.0", "v1.4.0"
	deb := buildDebFor(t, ctx, w.builder.Src, packaged, t.TempDir(), "arm64")
	if !strings.HasSuffix(deb, "_arm64.deb") {
		t.Fatalf("make package ARCHS=arm64 wrote %s, want a .deb named for arm64", deb)
	}
	requireArm64(t, ctx, deb)

	n := w.installDeb(t, ctx, "arm64", deb, "arm64", nil)
	root := filepath.Join(n.Root(), "var/lib/mesh-host")
	wantArm64(t, filepath.Join(n.Root(), "usr/bin/mesh-launcher"), rollback.BinaryPath(root, packaged))
	w.waitBeat(t, ctx, n, "a profile saying linux/arm64", func(b lab.Beat) bool {
		return b.Profile != nil && b.Profile.Arch == "arm64" && b.Profile.Platform == "linux/arm64"
	})

	ok := t.Run("it takes its platform's build of a release by standing aside", func(t *testing.T) {
		before := show(t, ctx, n)
		w.shipPlatforms(t, ctx, lab.PkgHost, good)
		if err := w.rel.Target(ctx, good, n.Name); err != nil {
			t.Fatal(err)
		}
		w.waitBeat(t, ctx, n, good+" running and confirmed", lab.RunningConfirmed(good))
		after := waitShow(t, ctx, n, "STATUS= running "+good+" (confirmed)", func(p map[string]string) bool {
			return p["StatusText"] == "running "+good+" (confirmed)"
		})
		if after["NRestarts"] != "0" || after["MainPID"] != before["MainPID"] || after["ActiveState"] != "active" {
			t.Errorf("after the upgrade %v, want active, NRestarts=0 and MainPID %s as before", after, before["MainPID"])
		}
		wantArm64(t, rollback.BinaryPath(root, good))
	})
	if !ok {
		return
	}

	t.Run("a release crashing on start is rolled back", func(t *testing.T) {
		w.shipPlatforms(t, ctx, lab.PkgCrashRun, broken)
		if err := w.rel.Target(ctx, broken, n.Name); err != nil {
			t.Fatal(err)
		}
		line := "running " + good + " (confirmed); rolled back from " + broken + " at "
		p := waitShow(t, ctx, n, "STATUS= "+line+"…", func(p map[string]string) bool {
			return strings.HasPrefix(p["StatusText"], line)
		})
		if p["ActiveState"] != "active" || p["NRestarts"] != "0" {
			t.Errorf("after the rollback %v, want active with NRestarts=0 (the launcher rolled back, not systemd)", p)
		}
		w.waitBeat(t, ctx, n, good+" running after the rollback", func(b lab.Beat) bool {
			return lab.RunningConfirmed(good)(b) && len(b.Rollbacks) > 0 && b.Rollbacks[0].From == broken
		})
	})
}

// requireArm64 skips t, saying what to install, unless this machine runs the arm64 launcher in
// deb (under CI it fails: .ci/run installs the emulator).
func requireArm64(t *testing.T, ctx context.Context, deb string) {
	t.Helper()
	tree := t.TempDir()
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, tree).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(tree, "usr/bin/mesh-launcher"), "version").CombinedOutput(); err != nil {
		meshtest.SkipUnlessCI(t, "this machine does not run arm64 binaries (%v: %q): install qemu-user-static and binfmt-support (binfmt_misc mounted) to see an arm64 node", err, out)
	}
}

// platforms is what the lab's releases here are built for: one version for both.
const platforms = "linux/amd64,linux/arm64"

// shipPlatforms builds pkg as version for both platforms from this tree (lab.Release.BuildTree:
// the host by `mesh-release build --platforms`, a fixture by the same code), one manifest signed
// with the key the nodes trust, and publishes it.
func (w *world) shipPlatforms(t *testing.T, ctx context.Context, pkg, version string) {
	t.Helper()
	dir, err := w.rel.BuildTree(ctx, w.builder.Src, version, pkg, []string{"amd64", "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Schema != wire.ManifestSchemaPlatforms || len(m.PlatformList()) != 2 {
		t.Fatalf("%s's manifest is schema %d for %v, want schema %d for %s", version, m.Schema, m.PlatformList(), wire.ManifestSchemaPlatforms, platforms)
	}
	if err := w.rel.Publish(ctx, dir); err != nil {
		t.Fatal(err)
	}
}

// wantArm64 fails unless each file is an arm64 ELF executable.
func wantArm64(t *testing.T, files ...string) {
	t.Helper()
	for _, file := range files {
		f, err := elf.Open(file)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		if f.Machine != elf.EM_AARCH64 {
			t.Errorf("%s is an ELF file for %v, want arm64 (%v)", file, f.Machine, elf.EM_AARCH64)
		}
		f.Close()
	}
}
