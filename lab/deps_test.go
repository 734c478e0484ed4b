package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/internal/meshtest"
)

// The launcher has no network code: nothing from NATS, the link, or net/http may be linked in.
// (go-systemd's sd_notify and journal use unix datagram sockets through package net; that is the
// one exception, and it never leaves the machine.)
func TestLauncherLinksNoNetworkCode(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", PkgLauncher)
	cmd.Dir = bins.Src
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/", "/host/link", "/host/deliver", "net/http", "crypto/tls"} {
			if strings.Contains(dep, banned) {
				t.Errorf("mesh-launcher depends on %s", dep)
			}
		}
	}
}

// Each top-level directory has one job and the arrows run one way: the bus contract lives in
// wire/, which both sides import, so the release side needs nothing of the host's; the host and
// the launcher talk only through disk (rollback/), which the release side never links: rollback/
// holds only what the launcher and the host share; internal/ holds the leaves every side shares.
func TestPackagesImportOnlyWhatTheirJobNeeds(t *testing.T) {
	for _, tc := range []struct {
		pkgs   string
		banned []string
	}{
		{"./release/...", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/rollback"}},
		{"./wire/...", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "github.com/nats-io/"}},
		// Prometheus's client is the release side's (mesh-release metrics): nodes listen on nothing.
		{"./host/...", []string{"/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "github.com/prometheus/"}},
		{"./launcher/...", []string{"/mesh-host/host", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/wire", "github.com/prometheus/"}},
		// chromedp drives the browser in lab/'s tests only: no package, so no binary
		// (mesh-release, mesh-host, mesh-launcher), links it.
		{"./release/... ./host/... ./launcher/... ./rollback/... ./wire/... ./internal/... ./lab", []string{"github.com/chromedp/"}},
		{"./rollback/...", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/wire"}},
		// The leaves everyone shares (the version rule, the SQLite and atomic-write plumbing,
		// the command-line rule, the file lock) carry no weight: nothing of the module above them, and no
		// network code. (internal/meshtest is test support, checked below.)
		// Test support is a leaf too: tests of every side import it, so it imports no side
		// (the bus it starts is made by internal/buslayout, as release's init makes it).
		{"./internal/meshtest ./internal/buslayout", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/rollback"}},
		{"./internal/layout ./internal/sqlitefile ./internal/atomicfile ./internal/cmdline ./internal/ctxio ./internal/filelock ./internal/text", []string{"/mesh-host/host", "/mesh-host/launcher", "/mesh-host/release", "/mesh-host/lab", "/mesh-host/wire", "/mesh-host/rollback", "github.com/nats-io/", "net/http"}},
	} {
		t.Run(tc.pkgs, func(t *testing.T) {
			cmd := exec.Command("go", append([]string{"list", "-deps"}, strings.Fields(tc.pkgs)...)...)
			cmd.Dir = bins.Src
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, banned := range tc.banned {
					if strings.Contains(dep, banned) {
						t.Errorf("%s depends on %s", tc.pkgs, dep)
					}
				}
			}
		})
	}
}

// internal/meshtest is test support: only _test.go files import it, so no package of the module,
// and no binary, depends on it. (`go list` without -test leaves test imports out.)
func TestTestSupportIsImportedOnlyByTests(t *testing.T) {
	const meshtest = "github.com/novox/mesh-host/internal/meshtest"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...")
	cmd.Dir = bins.Src
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	listed := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, " ")
		if pkg == meshtest {
			listed = true
			continue
		}
		for _, dep := range strings.Fields(deps) {
			if dep == meshtest {
				t.Errorf("%s depends on %s; only tests may import it", pkg, meshtest)
			}
		}
	}
	if !listed {
		t.Errorf("go list ./... did not list %s; this test checks nothing", meshtest)
	}
}

// No built binary is committed (a 3 MB mesh-release once was): binaries are made by `make build`
// into bin/, which .gitignore keeps out, as it does the lab's and the tests' outputs.
func TestNoBinaryIsCommitted(t *testing.T) {
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = bins.Src
	out, err := cmd.Output()
	if err != nil {
		meshtest.SkipUnlessCI(t, "not a git checkout: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(bins.Src, name))
		if err != nil {
			continue // deleted in the working tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		if string(head[:n]) == "\x7fELF" {
			t.Errorf("%s is a compiled binary; build it with make build instead of committing it", name)
		}
	}
}
