package rollback

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
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

// parentMode is the mode of a missing parent of the root that MakeRoot creates: an ordinary
// directory (var/, var/lib/ of an image being built) that others must be able to pass through.
const parentMode os.FileMode = 0o755

// ErrNoRoot is what errors.Is finds in CheckRoot's error for a root that does not exist.
var ErrNoRoot = errors.New("no mesh-host root")

// CheckRoot refuses a root that does not exist or is not a directory, for the commands that
// only read one (status, owned, profile): a mistyped --root would otherwise read as a node
// with nothing on it.
func CheckRoot(root string) error {
	fi, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w at %s (--root or MESH_HOST_ROOT)", ErrNoRoot, root)
	case err != nil:
		return fmt.Errorf("the root %s: %w", root, err)
	case !fi.IsDir():
		return fmt.Errorf("the root %s is not a directory; point --root or MESH_HOST_ROOT at a directory", root)
	}
	return nil
}

// MakeRoot creates the root with rootMode if it is missing, and each missing parent with
// parentMode, whatever the umask: only the root is private. An existing root is left as it is.
func MakeRoot(root string) error {
	root = filepath.Clean(root)
	if _, err := os.Lstat(root); err == nil {
		return nil
	}
	if err := makeParents(filepath.Dir(root)); err != nil {
		return fmt.Errorf("create the root %s: %w", root, err)
	}
	if err := os.Mkdir(root, rootMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create the root %s: %w", root, err)
	}
	return nil
}

// makeParents is mkdir -p for dir, each directory it creates given parentMode.
func makeParents(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if up := filepath.Dir(dir); up != dir {
		if err := makeParents(up); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, parentMode); err != nil {
		if errors.Is(err, fs.ErrExist) { // made meanwhile by another process: not ours to change
			return nil
		}
		return err
	}
	return os.Chmod(dir, parentMode)
}

// prepareRoot creates the root (MakeRoot) or takes group and other access off an existing
// root. The launcher, which owns the root, calls it; a root it does not own and cannot change
// is left as it is (the files in it are private all the same).
func prepareRoot(root string) error {
	if err := MakeRoot(root); err != nil {
		return err
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
