package build

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeFileAtomic writes data to path through a temporary file in the same directory: write,
// fsync, rename, fsync the directory. Readers see the old file or the new one, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	t, err := newAtomicFile(path, mode)
	if err != nil {
		return err
	}
	if _, err := t.f.Write(data); err != nil {
		t.abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return t.commit()
}

// atomicFile is a temporary file that becomes path on commit.
type atomicFile struct {
	f    *os.File
	path string
	mode os.FileMode
}

func newAtomicFile(path string, mode os.FileMode) (*atomicFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, err
	}
	return &atomicFile{f: f, path: path, mode: mode}, nil
}

func (t *atomicFile) abort() {
	t.f.Close()
	os.Remove(t.f.Name())
}

func (t *atomicFile) commit() error {
	if err := t.f.Chmod(t.mode); err != nil {
		t.abort()
		return fmt.Errorf("chmod %s: %w", t.path, err)
	}
	if err := t.f.Sync(); err != nil {
		t.abort()
		return fmt.Errorf("sync %s: %w", t.path, err)
	}
	if err := t.f.Close(); err != nil {
		os.Remove(t.f.Name())
		return fmt.Errorf("close %s: %w", t.path, err)
	}
	if err := os.Rename(t.f.Name(), t.path); err != nil {
		os.Remove(t.f.Name())
		return fmt.Errorf("rename into %s: %w", t.path, err)
	}
	return syncDir(filepath.Dir(t.path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
