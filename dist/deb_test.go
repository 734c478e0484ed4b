package dist

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

// needDpkgDeb skips a test that inspects the .deb the way an operator would, with dpkg-deb.
func needDpkgDeb(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		meshtest.SkipUnlessCI(t, "dpkg-deb is not installed (Debian's dpkg package): the .deb cannot be inspected here")
	}
}

func TestDebHoldsTheBinariesAndTheUnitAtTheirPathsAndModes(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	for _, p := range a.nodes {
		t.Run(p.name, func(t *testing.T) { wantNodeDebFiles(t, p.deb) })
	}
}

// wantNodeDebFiles fails unless deb holds exactly the node's files.
func wantNodeDebFiles(t *testing.T, deb string) {
	t.Helper()
	wantDebFiles(t, deb, map[string]string{
		"./usr/bin/mesh-launcher":                               "-rwxr-xr-x",
		"./usr/share/mesh-host/mesh-host":                       "-rwxr-xr-x",
		"./lib/systemd/system/mesh-launcher.service":            "-rw-r--r--",
		"./usr/share/man/man8/mesh-launcher.8.gz":               "-rw-r--r--",
		"./usr/share/man/man8/mesh-host.8.gz":                   "-rw-r--r--",
		"./usr/share/bash-completion/completions/mesh-launcher": "-rw-r--r--",
		"./usr/share/bash-completion/completions/mesh-host":     "-rw-r--r--",
		"./usr/share/zsh/vendor-completions/_mesh-launcher":     "-rw-r--r--",
		"./usr/share/zsh/vendor-completions/_mesh-host":         "-rw-r--r--",
		"./usr/share/doc/mesh-host/copyright":                   "-rw-r--r--",
		"./usr/share/doc/mesh-host/changelog.gz":                "-rw-r--r--",
		"./usr/share/lintian/overrides/mesh-host":               "-rw-r--r--",
	})
}

// wantDebFiles fails unless deb holds exactly the files in want (path → mode as dpkg-deb -c
// lists it), each owned by root.
func wantDebFiles(t *testing.T, deb string, want map[string]string) {
	t.Helper()
	// dpkg-deb -c lists like tar -tv: mode, owner/group, size, date, time, path.
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q: want mode, owner, size, date, time, path", line)
		}
		if f[1] != "root/root" {
			t.Errorf("%s is owned by %s, want root/root", f[5], f[1])
		}
		if !strings.HasPrefix(f[0], "d") {
			files[f[5]] = f[0]
		}
	}
	for path, mode := range want {
		if got, ok := files[path]; !ok {
			t.Errorf("%s has no %s", filepath.Base(deb), path)
		} else if got != mode {
			t.Errorf("%s has mode %s, want %s", path, got, mode)
		}
	}
	for path := range files {
		if _, ok := want[path]; !ok {
			t.Errorf("%s holds %s, which nothing asked for", filepath.Base(deb), path)
		}
	}
}

func TestDebControlNamesThePackageVersionAndArchitecture(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	for _, p := range a.nodes {
		t.Run(p.name, func(t *testing.T) {
			for _, tc := range []struct{ field, want string }{
				{"Package", "mesh-host"},
				{"Version", debVersion},
				{"Architecture", p.name},
			} {
				if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", p.deb, tc.field)); got != tc.want {
					t.Errorf("%s is %q, want %q", tc.field, got, tc.want)
				}
			}
			// Static binaries and POSIX sh: a floor that acquires no dependency starts with the package.
			if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", p.deb, "Depends", "Pre-Depends")); got != "" {
				t.Errorf("the .deb depends on %q; it must depend on nothing", got)
			}
		})
	}
}

func TestDebCarriesTheMaintainerScriptsAndTheUnitFromDist(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	control := filepath.Join(t.TempDir(), "control")
	run(t, "dpkg-deb", "-e", a.deb, control)
	tree := filepath.Join(t.TempDir(), "tree")
	run(t, "dpkg-deb", "-x", a.deb, tree)
	for _, tc := range []struct {
		name, inDeb, source string
		mode                os.FileMode
	}{
		{"postinst", filepath.Join(control, "postinst"), "dist/deb/postinst", 0o755},
		{"prerm", filepath.Join(control, "prerm"), "dist/deb/prerm", 0o755},
		{"postrm", filepath.Join(control, "postrm"), "dist/deb/postrm", 0o755},
		{"unit", filepath.Join(tree, "lib/systemd/system/mesh-launcher.service"), "dist/mesh-launcher.service", 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameFile(t, tc.inDeb, filepath.Join(a.repo, tc.source), tc.mode)
		})
	}
}

// The host is stamped with the package's version (the launcher's install refuses a host whose
// `version` differs from the version it is placed as); the launcher says its own version,
// whatever the package's is (launcher.Version; CHANGELOG's "Launcher versions").
func TestPackagedBinariesSayTheirVersions(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	tree := t.TempDir()
	run(t, "dpkg-deb", "-x", a.deb, tree)
	for _, tc := range []struct{ binary, arg, want string }{
		{"usr/share/mesh-host/mesh-host", "version", testVersion},
		{"usr/bin/mesh-launcher", "--version", launcher.Version},
		{"usr/bin/mesh-launcher", "version", launcher.Version},
	} {
		if got := strings.TrimSpace(run(t, filepath.Join(tree, tc.binary), tc.arg)); got != tc.want {
			t.Errorf("%s %s says %q, want %q", tc.binary, tc.arg, got, tc.want)
		}
	}
}

// sameFile fails unless got has mode and the same bytes as want.
func sameFile(t *testing.T, got, want string, mode os.FileMode) {
	t.Helper()
	g, err := os.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(g, w) {
		t.Errorf("%s differs from %s", got, want)
	}
	fi, err := os.Stat(got)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != mode {
		t.Errorf("%s has mode %v, want %v", got, fi.Mode().Perm(), mode)
	}
}
