package lab

import (
	"bytes"
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

// installCmd runs the built `mesh-launcher install args…` and returns its exit status and output.
func installCmd(t *testing.T, cred *syscall.Credential, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(build(t, PkgLauncher, "v0.0.0-lab"), append([]string{"install"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, o.String(), e.String()
}

// The package's first step, by hand: the real mesh-host, stamped, installed with the real
// launcher; the launcher runs it to confirmation and status says it was installed by hand. The
// binary a newcomer gets wrong (unstamped) is refused at install, naming both versions, instead
// of failing three times under the launcher (misplaced_test.go).
func TestAHostInstalledByHandRunsAndStatusSaysWhereItCameFrom(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := newNode(t)
	code, _, stderr := installCmd(t, nil, build(t, PkgHost, "v0.0.0-dev"), "--version", "v1.0.0", "--root", n.Root)
	if code != 1 || !strings.Contains(stderr, "says it is v0.0.0-dev") || !strings.Contains(stderr, "not v1.0.0 as --version says") {
		t.Fatalf("installing an unstamped host as v1.0.0: exit %d, %s", code, stderr)
	}
	host := build(t, PkgHost, "v1.0.0")
	code, stdout, stderr := installCmd(t, nil, "--root", n.Root, host)
	if code != 0 || !strings.Contains(stdout, "installed v1.0.0 in "+rollback.VersionDir(n.Root, "v1.0.0")) {
		t.Fatalf("install: exit %d\n%s%s", code, stdout, stderr)
	}
	// Again, as the package's postinst does on every upgrade: nothing changes.
	if code, stdout, _ := installCmd(t, nil, "--root", n.Root, host); code != 0 || !strings.Contains(stdout, "nothing changed") {
		t.Fatalf("installing the same bytes again: exit %d\n%s", code, stdout)
	}
	start(t, n)
	rep, err := n.WaitStatus(ctx, "v1.0.0 running and confirmed", runningConfirmedReport("v1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := Version(rep, "v1.0.0")
	if v.Provenance != (rollback.Provenance{Source: rollback.SourceInstalled, From: host}) {
		t.Errorf("status --json provenance = %+v, want installed from %s", v.Provenance, host)
	}
	if out := n.StatusText(ctx); !strings.Contains(out, "installed by hand") {
		t.Errorf("status does not say installed by hand:\n%s", out)
	}
	// With the host running, an older version is only a directory: v1.0.0 stays chosen.
	code, stdout, stderr = installCmd(t, nil, "--root", n.Root, build(t, PkgHost, "v0.9.0"))
	if code != 0 || !strings.Contains(stdout, "v1.0.0 stays chosen: it is newer") {
		t.Errorf("installing an older version: exit %d\n%s%s", code, stdout, stderr)
	}
}

// A root the installing user cannot write is refused with the fix, and leaves nothing behind.
// Tests run as root here, so the refusal is run as nobody (uid 65534).
func TestInstallRefusesARootItCannotWrite(t *testing.T) {
	t.Parallel()
	var cred *syscall.Credential
	dir, err := os.MkdirTemp("", "mesh-lab-ro-") // not t.TempDir: nobody must reach it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o500); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "mesh-host")
	if err := copyFile(build(t, PkgHost, "v1.0.0"), file, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
		for _, p := range []string{dir, build(t, PkgLauncher, "v0.0.0-lab"), filepath.Dir(build(t, PkgLauncher, "v0.0.0-lab"))} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(root, 0o755); err != nil { // root's, and nobody may only look in
			t.Fatal(err)
		}
	}
	code, _, stderr := installCmd(t, cred, "--root", root, file)
	if code != 1 || !strings.Contains(stderr, "permission denied") || !strings.Contains(stderr, "is not writable by this user") {
		t.Fatalf("install into a root it cannot write: exit %d, %s", code, stderr)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("the root holds %d entries after the refusal", len(ents))
	}
}
