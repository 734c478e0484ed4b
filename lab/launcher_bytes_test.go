package lab

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The launcher has its own version and is not stamped with the host's: `make launcher` (which
// `make build` and, with its flags, `make package` use) builds the same bytes whatever VERSION
// the host release is, with no commit stamped in, and those are the bytes the lab builds too.
// The binary says launcher.Version.
func TestAnUnchangedLauncherBuildsToTheSameBytesInEveryRelease(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		meshtest.SkipUnlessCI(t, "make is not installed; the Makefile's launcher build cannot be run")
	}
	// Builds only, with no deadline but go test's -timeout: a cold build takes what it takes.
	ctx := t.Context()
	dir := t.TempDir()
	var built []string
	for _, version := range []string{"v1.2.0", "v9.8.7-rc.1"} {
		out := filepath.Join(dir, "mesh-launcher-"+version)
		cmd := exec.CommandContext(ctx, "make", "-s", "-C", bins.Src, "launcher", "VERSION="+version, "LAUNCHEROUT="+out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make launcher VERSION=%s: %v\n%s", version, err, b)
		}
		built = append(built, out)
	}
	built = append(built, build(t, PkgLauncher, ToolVersion))

	first, err := os.ReadFile(built[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range built[1:] {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, b) {
			t.Errorf("%s and %s differ (%d and %d bytes): the launcher's bytes depend on more than its code", filepath.Base(built[0]), filepath.Base(p), len(first), len(b))
		}
	}

	info, err := exec.CommandContext(ctx, "go", "version", "-m", built[0]).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if strings.Contains(line, "vcs.") || strings.Contains(line, "-X ") {
			t.Errorf("the launcher carries %q: its bytes would differ per commit or per release", strings.TrimSpace(line))
		}
	}

	code, out, errOut := runBin(t, built[0], "--version")
	if code != 0 || out != launcher.Version+"\n" || errOut != "" {
		t.Errorf("mesh-launcher --version: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, launcher.Version)
	}
}

// A "newer launcher" for a test is the same code with launcher.Version stamped (BuildArgs).
func TestTheLabCanBuildANewerLauncher(t *testing.T) {
	p := build(t, PkgLauncher, "v9.0.0")
	for _, arg := range []string{"--version", "version"} {
		code, out, errOut := runBin(t, p, arg)
		if code != 0 || out != "v9.0.0\n" || errOut != "" {
			t.Errorf("mesh-launcher %s: exit %d, stdout %q, stderr %q; want v9.0.0", arg, code, out, errOut)
		}
	}
}
