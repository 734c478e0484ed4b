package rollback

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// What lives under the root is the service's alone: the records keep the host's output, the
// store keeps what the host applied (file contents among it), host.json may name the bus's
// credentials, and the lock files name pids. So the root is 0700 and each state file 0600
// (the databases: sqlitefile.FileMode), whatever the umask, also on a node upgraded from a
// version that made them 0755 and 0644.
const (
	rootMode os.FileMode = 0o700
	fileMode os.FileMode = 0o600
)

// prepareRoot creates the root (and any missing parents) with rootMode, or takes group and other
// access off an existing root. The launcher, which owns the root, calls it; a root it does not
// own and cannot change is left as it is (the files in it are private all the same).
func prepareRoot(root string) error {
	if err := os.MkdirAll(root, rootMode); err != nil {
		return fmt.Errorf("create the root %s: %w", root, err)
	}
	fi, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("the root %s: %w", root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("the root %s is not a directory; point --root or MESH_HOST_ROOT at a directory", root)
	}
	if err := tighten(root, fi.Mode()); err != nil && !errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("make the root %s private (mode %#o): %w", root, rootMode, err)
	}
	return nil
}

// tighten takes group and other bits off path's mode, if it has any.
func tighten(path string, mode os.FileMode) error {
	if mode.Perm()&0o077 == 0 {
		return nil
	}
	return os.Chmod(path, mode.Perm()&^0o077)
}

// tightenFile is tighten for an open file.
func tightenFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	return f.Chmod(fi.Mode().Perm() &^ 0o077)
}
