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
	"github.com/novox/mesh-host/wire/meshtest"
)

// arm64Node is issue 28, section 5: a real arm64 node under real systemd, only its CPU emulated
// (qemu-user through binfmt_misc, whose F flag opens the emulator once, on this machine, so it
// serves the node's processes too). The arm64 .deb installs with dpkg on a node told to take
// arm64 packages; the host it seeds runs, confirms and says arm64 in its heartbeats; a release
// holding an arm64 build upgrades it by standing aside, and one that crashes on start there is
// rolled back — the launcher, systemd's main process, never restarted.
func arm64Node(t *testing.T, ctx context.Context, w *world) {
	const good, broken = "v1.3.0", "v1.4.0"
	host := w.buildFor(t, ctx, lab.PkgHost, good, "arm64")
	if out, err := exec.CommandContext(ctx, host, "version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != good {
		meshtest.SkipUnlessCI(t, "this machine does not run arm64 binaries (%v: %q): install qemu-user-static and binfmt-support (binfmt_misc mounted) to see an arm64 node", err, out)
	}
	deb := buildDebFor(t, ctx, w.builder.Src, packaged, t.TempDir(), "arm64")
	if !strings.HasSuffix(deb, "_arm64.deb") {
		t.Fatalf("make package ARCHS=arm64 wrote %s, want a .deb named for arm64", deb)
	}

	n := w.installDeb(t, ctx, "arm64", deb, "arm64", nil)
	root := filepath.Join(n.Root(), "var/lib/mesh-host")
	wantArm64(t, filepath.Join(n.Root(), "usr/bin/mesh-launcher"), rollback.BinaryPath(root, packaged))
	w.waitBeat(t, ctx, n, "a profile saying arm64", func(b lab.Beat) bool {
		return b.Profile != nil && b.Profile.Arch == "arm64"
	})

	ok := t.Run("a release's arm64 build upgrades it by standing aside", func(t *testing.T) {
		before := show(t, ctx, n)
		w.shipFor(t, ctx, host, good)
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

	t.Run("a release crashing on start there is rolled back", func(t *testing.T) {
		w.shipFor(t, ctx, w.buildFor(t, ctx, lab.PkgCrashRun, broken, "arm64"), broken)
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

// buildFor builds pkg as version for linux/goarch, as the lab builds for this machine
// (lab.BuildArgs), into the builder's directory.
func (w *world) buildFor(t *testing.T, ctx context.Context, pkg, version, goarch string) string {
	t.Helper()
	out := filepath.Join(w.builder.Out, filepath.Base(pkg)+"-"+version+"-"+goarch)
	cmd := exec.CommandContext(ctx, "go", append(lab.BuildArgs(pkg, version), "-o", out, pkg)...)
	cmd.Dir = w.builder.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (%s) for %s: %v\n%s", pkg, version, goarch, err, b)
	}
	return out
}

// shipFor builds (packs and signs) the host binary as version and publishes it.
func (w *world) shipFor(t *testing.T, ctx context.Context, binary, version string) {
	t.Helper()
	if err := w.rel.Ship(ctx, version, binary); err != nil {
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
