package apply

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardCheck(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	srv := filepath.Join(tmp, "srv")
	for _, d := range []string{filepath.Join(root, "versions"), srv, filepath.Join(srv, "real")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, at string) {
		t.Helper()
		if err := os.Symlink(target, at); err != nil {
			t.Fatal(err)
		}
	}
	link(root, filepath.Join(srv, "x"))                                     // absolute link into the root
	link("../root/versions", filepath.Join(srv, "rel"))                     // relative link into the root
	link(filepath.Join(srv, "x"), filepath.Join(srv, "chain"))              // a link to a link into the root
	link(filepath.Join(root, "host.json"), filepath.Join(srv, "hostjson"))  // dangling final link into the root
	link(filepath.Join(root, "nothing", "yet"), filepath.Join(srv, "dang")) // dangling middle link into the root
	link(filepath.Join(srv, "real"), filepath.Join(srv, "fine"))            // a link that stays outside
	link(filepath.Join(srv, "loop"), filepath.Join(srv, "loop"))            // a loop

	tests := []struct {
		name   string
		path   string
		refuse []string // substrings of the error; nil: accepted
	}{
		{"plain path outside the root is accepted", filepath.Join(srv, "real", "a.conf"), nil},
		{"path not yet existing outside the root is accepted", filepath.Join(srv, "new", "deeper", "a"), nil},
		{"symlink that stays outside the root is accepted", filepath.Join(srv, "fine", "a.conf"), nil},
		{"relative path is refused by its words", "srv/a", []string{"not absolute"}},
		{"the root itself is refused by its words", root, []string{"inside"}},
		{"a path under the root after cleaning is refused", filepath.Join(srv, "..", "root", "versions", "v9", "mesh-host"), []string{"inside"}},
		{"the default root is refused even when another is configured", "/var/lib/mesh-host/host.json", []string{"/var/lib/mesh-host"}},
		{"the launcher binary is refused", "/usr/bin/mesh-launcher", []string{"mesh-launcher"}},
		{"an absolute symlink into the root is refused naming both ends",
			filepath.Join(srv, "x", "versions", "v9", "mesh-host"),
			[]string{filepath.Join(srv, "x", "versions", "v9", "mesh-host"), filepath.Join(root, "versions", "v9", "mesh-host"), "symlink"}},
		{"a symlink that is the root itself is refused", filepath.Join(srv, "x"), []string{"symlink", root}},
		{"a relative symlink into the root is refused", filepath.Join(srv, "rel", "v9"), []string{filepath.Join(root, "versions", "v9")}},
		{"a chain of symlinks into the root is refused", filepath.Join(srv, "chain", "store.db"), []string{filepath.Join(root, "store.db")}},
		{"a dangling final symlink into the root is refused", filepath.Join(srv, "hostjson"), []string{filepath.Join(root, "host.json")}},
		{"a dangling symlink in the middle into the root is refused", filepath.Join(srv, "dang", "f"), []string{filepath.Join(root, "nothing", "yet", "f")}},
		{"a symlink loop is refused", filepath.Join(srv, "loop", "f"), []string{"loop"}},
	}
	for _, g := range []Guard{{Root: root}, NewGuard(root)} {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := g.Check(tt.path)
				if tt.refuse == nil {
					if err != nil {
						t.Fatalf("Check(%q) = %v, want accepted", tt.path, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("Check(%q) accepted, want refused", tt.path)
				}
				for _, s := range tt.refuse {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Check(%q) = %q, want it to mention %q", tt.path, err, s)
					}
				}
			})
		}
	}
}

// A root that is itself a symlink (a packaged root moved to a bigger disk) is protected where
// it really is, too.
func TestGuardRootThatIsASymlinkIsProtectedWhereItLeads(t *testing.T) {
	tmp := t.TempDir()
	real := filepath.Join(tmp, "disk", "mesh")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(tmp, "root")
	if err := os.Symlink(real, root); err != nil {
		t.Fatal(err)
	}
	for _, g := range []Guard{{Root: root}, NewGuard(root)} {
		if err := g.Check(filepath.Join(real, "versions", "v9", "mesh-host")); err == nil {
			t.Fatal("a path inside where the root really is was accepted")
		}
		if err := g.Check(filepath.Join(tmp, "disk", "other")); err != nil {
			t.Fatalf("a path beside the real root was refused: %v", err)
		}
	}
}
