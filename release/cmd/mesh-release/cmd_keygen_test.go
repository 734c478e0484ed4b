package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// keygen writes the secret key wherever it is told, but says so on stderr when that is inside a
// git work tree (a checkout, a linked worktree whose .git is a file, or a submodule), where one
// `git add .` would commit it; outside any work tree it says nothing more.
func TestKeygenWarnsWhenTheSecretKeyLandsInAGitWorkTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(t *testing.T, top string) // what makes top a work tree, or not
		warn bool
	}{
		{"outside any work tree", func(*testing.T, string) {}, false},
		{"in a checkout (.git is a directory)", func(t *testing.T, top string) { mkdir(t, filepath.Join(top, ".git")) }, true},
		{"in a linked worktree or submodule (.git is a file)", func(t *testing.T, top string) {
			if err := os.WriteFile(filepath.Join(top, ".git"), []byte("gitdir: /elsewhere/.git/worktrees/x\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := t.TempDir()
			if enclosing, ok := gitWorkTree(top); ok && !tc.warn {
				t.Skipf("the temporary directory is itself inside the work tree %s", enclosing)
			}
			tc.make(t, top)
			keys := filepath.Join(top, "sub", "keys") // two levels down: the walk goes up
			code, out, errOut := runMain(t, nil, "keygen", "--out", keys)
			if code != 0 {
				t.Fatalf("keygen: exit %d: %s", code, errOut)
			}
			if _, err := os.Stat(filepath.Join(keys, "release.key")); err != nil {
				t.Fatalf("keygen wrote no key: %v", err)
			}
			if !strings.Contains(out, "wrote "+filepath.Join(keys, "release.key")) {
				t.Errorf("stdout does not say what was written:\n%s", out)
			}
			warned := strings.Contains(errOut, "warning:")
			if warned != tc.warn {
				t.Fatalf("warned %v, want %v; stderr:\n%s", warned, tc.warn, errOut)
			}
			if !tc.warn {
				return
			}
			for _, want := range []string{filepath.Join(keys, "release.key"), "inside the git work tree " + top, ".gitignore"} {
				if !strings.Contains(errOut, want) {
					t.Errorf("the warning does not say %q:\n%s", want, errOut)
				}
			}
		})
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
