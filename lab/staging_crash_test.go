package lab

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// SIGKILL of the real host at random points while it stages its target, 50 times: no half
// version is ever in versions/ (every version directory holds a binary matching its recorded
// digest, so Choose can never name a half version), and leftovers are cleaned at the next start.
func TestKillingTheHostWhileStagingNeverLeavesAHalfVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("50 kills")
	}
	t.Parallel()
	ctx := meshtest.Context(t, 5*time.Minute)
	b := meshtest.StartBus(t)
	rel := newRelease(t, b)
	pub, err := rel.Keygen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := rel.Ship(ctx, "v1.1.0", build(t, PkgHost, "v1.1.0")); err != nil {
		t.Fatal(err)
	}
	// The node has not started yet, so it has never heartbeated: pre-declare its target.
	if _, err := rel.Run(ctx, "target", "--force", "lab", "v1.1.0", "--key", rel.KeyPath(), "--nats", rel.NATS); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(rel.Out, "v1.1.0", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nativeBuild(manifest)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := fakeRoot(root, "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	hostBin := build(t, PkgHost, "v1.0.0")
	env := append(os.Environ(), "MESH_HOST_ROOT="+root, "MESH_HOST_VERSION=v1.0.0", "MESH_HOST_NODE=lab",
		"MESH_HOST_NATS_URL="+b.URL(), "MESH_HOST_TRUSTED_KEYS="+pub, "MESH_HOST_RECONCILE_INTERVAL=1h")
	run := func() *exec.Cmd {
		cmd := exec.Command(hostBin, "run")
		cmd.Env = env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}

	// One undisturbed run shows how long a start takes to stage the target: kills land within it.
	began := time.Now()
	cmd := run()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the host did not stand aside for its staged target: %v", err)
	}
	window := time.Since(began)
	checkVersions(t, root, m.BinaryDigest.String())
	staged, midway := 0, 0
	for i := 0; i < 50; i++ {
		os.RemoveAll(rollback.VersionDir(root, "v1.1.0")) // stage it again on this start
		before := leftovers(t, root)
		cmd := run()
		time.Sleep(time.Duration(rand.Int64N(int64(window))))
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if after := leftovers(t, root); len(after) > 0 && !sameNames(before, after) {
			midway++ // this kill landed mid-staging: it left a staging directory of its own
		}
		if _, err := os.Stat(rollback.VersionDir(root, "v1.1.0")); err == nil {
			staged++
		}
		checkVersions(t, root, m.BinaryDigest.String())
	}
	t.Logf("50 kills within %s of start: %d left a staging directory, %d after v1.1.0 was in place", window.Round(time.Millisecond), midway, staged)
	if midway == 0 {
		t.Errorf("no kill landed while staging; the test proved nothing")
	}
	// A clean start removes what the kills left, and stages the version whole.
	os.RemoveAll(rollback.VersionDir(root, "v1.1.0"))
	if err := run().Wait(); err != nil {
		t.Fatalf("after the kills the host did not stage and stand aside: %v", err)
	}
	if n := leftovers(t, root); len(n) != 0 {
		t.Errorf("staging directories left after a clean start: %v", n)
	}
	checkVersions(t, root, m.BinaryDigest.String())
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ch, err := r.Choose(context.Background(), root); err != nil || ch.Version != "v1.1.0" {
		t.Errorf("Choose names %q (%v), want the staged v1.1.0", ch.Version, err)
	}
}

// checkVersions asserts every version directory is whole: v1.1.0, if present, holds exactly the
// signed binary.
func checkVersions(t *testing.T, root, want string) {
	t.Helper()
	dir := rollback.VersionDir(root, "v1.1.0")
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 || entries[0].Name() != rollback.BinaryName {
		t.Fatalf("versions/v1.1.0 is not whole: %v %v", entries, err)
	}
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.BinaryDigest(rollback.BinaryPath(root, "v1.1.0"))
	if err != nil || got.String() != want {
		t.Fatalf("versions/v1.1.0/mesh-host is %s (%v), the signed binary is %s: a half version", got, err, want)
	}
}

// leftovers lists the staging directories under versions/.
func leftovers(t *testing.T, root string) []string {
	t.Helper()
	entries, _ := os.ReadDir(rollback.VersionsDir(root))
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), rollback.StagingPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

func sameNames(a, b []string) bool { return strings.Join(a, "/") == strings.Join(b, "/") }
