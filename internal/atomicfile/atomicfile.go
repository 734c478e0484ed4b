// Package atomicfile puts files that matter in place so a crash leaves the old file or the new one,
// whole.
//
// Never a part, nor a name that points at nothing: the content is written to a temporary file
// beside the target and fsynced, renamed over the target, and the directory fsynced so the rename
// itself survives. Release archives, manifests and keys, and staged host versions all go through
// it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to path with mode, atomically.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	f, err := Create(filepath.Dir(path), mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	return f.Commit(path)
}

// File is a temporary file that becomes a named one on Commit; until then no reader sees it
// under any name it could mistake for the real one.
type File struct {
	f    *os.File
	mode os.FileMode
}

// Create starts a file in dir, which will get mode on Commit. The caller writes it, then
// either commits it to a name in dir or aborts it.
func Create(dir string, mode os.FileMode) (*File, error) {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return nil, err
	}
	return &File{f: f, mode: mode}, nil
}

// Write writes to the temporary file.
func (t *File) Write(p []byte) (int, error) {
	n, err := t.f.Write(p)
	if err != nil {
		err = fmt.Errorf("write %s: %w", t.f.Name(), err)
	}
	return n, err
}

// Name is the temporary file's path, where what was written can be read back before Commit.
func (t *File) Name() string { return t.f.Name() }

// Abort removes the temporary file. It is safe to call after Commit failed.
func (t *File) Abort() {
	t.f.Close()
	os.Remove(t.f.Name())
}

// Commit gives the file its mode, fsyncs it and renames it to path, which must be in the
// directory the file was created in, then fsyncs that directory. On error nothing is left
// under path that was not there before, and the temporary file is removed.
func (t *File) Commit(path string) error {
	if filepath.Dir(path) != filepath.Dir(t.f.Name()) {
		t.Abort()
		return fmt.Errorf("commit %s: not in %s, where the file was written (a rename across directories may cross file systems)", path, filepath.Dir(t.f.Name()))
	}
	if err := t.f.Chmod(t.mode); err != nil {
		t.Abort()
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := t.f.Sync(); err != nil {
		t.Abort()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := t.f.Close(); err != nil {
		t.Abort()
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Rename(t.f.Name(), path); err != nil {
		t.Abort()
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// Rename moves a finished file or directory from one name to another in the same file system,
// durably: from is fsynced first (for a directory, its entries), the rename made, and the
// directory now holding to fsynced, so after a crash to is either absent or whole.
func Rename(from, to string) error {
	if err := syncPath(from); err != nil {
		return err
	}
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(to))
}

// SyncDir fsyncs a directory: the names in it (a rename, a new file) survive a crash.
func SyncDir(dir string) error { return syncPath(dir) }

// syncPath fsyncs a file, or a directory's entries; the error names the path.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
