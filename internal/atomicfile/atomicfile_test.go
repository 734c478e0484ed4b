package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWholeWithTheModeAndLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "manifest.json")
	for _, content := range []string{"old", "new"} {
		if err := WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %#o, want 0600", fi.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left in the directory: %v", ents)
	}
}

func TestAnAbortedOrMisdirectedFileLeavesNothing(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	f, err := Create(dir, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	f.Abort()
	g, err := Create(dir, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Commit(filepath.Join(other, "x")); err == nil {
		t.Error("committed to another directory")
	}
	for _, d := range []string{dir, other} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("left in %s: %v", d, ents)
		}
	}
}

func TestRenameMovesAFinishedDirectoryIntoPlace(t *testing.T) {
	root := t.TempDir()
	staging, final := filepath.Join(root, ".staging-x"), filepath.Join(root, "v1.0.0")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(staging, "mesh-host"), []byte("bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Rename(staging, final); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(final, "mesh-host")); err != nil || string(b) != "bin" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("staging still there: %v", err)
	}
}
