package rollback

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/filelock"
)

// Staging is a version being put in place: a directory versions/.staging-* that only its
// owner writes, then one rename into versions/<v>. Delivery (the host) and install (the
// launcher) both stage through it, so a version appears the same way whoever brings it: whole,
// its digest recorded first, or not at all.
//
// The directory is flocked while it is open, so CleanStaging, which a host or launcher
// starting meanwhile runs, leaves a staging in progress alone and removes only what a crash
// left.
type Staging struct {
	root   string
	parent string // ROOT/versions, or ROOT/launchers for a launcher version
	binary string // the one file it holds: BinaryName or LauncherBinaryName
	dir    string
	lock   *os.File
}

// ErrVersionExists is wrapped by Commit's error when versions/<v> was already there: another
// process put the version in place first, or it was there all along. The caller judges
// whether what is there is what it staged.
var ErrVersionExists = errors.New("version directory already exists")

// NewStaging makes a staging directory under ROOT/versions (creating versions/ if needed) and
// holds its lock until Commit or Discard.
func NewStaging(root string) (*Staging, error) {
	return newStaging(root, VersionsDir(root), BinaryName)
}

// NewLauncherStaging makes a staging directory under ROOT/launchers, for a launcher version
// (CommitLauncher).
func NewLauncherStaging(root string) (*Staging, error) {
	return newStaging(root, LaunchersDir(root), LauncherBinaryName)
}

func newStaging(root, versions, binary string) (*Staging, error) {
	if err := os.MkdirAll(versions, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", versions, err)
	}
	dir, err := os.MkdirTemp(versions, StagingPrefix)
	if err != nil {
		return nil, fmt.Errorf("create a staging directory in %s: %w", versions, err)
	}
	lock, err := os.Open(dir)
	if err == nil {
		// Busy cannot happen to a directory made a moment ago; any error is the lock's.
		if err = filelock.TryLock(lock); err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lock staging directory %s: %w", dir, err)
	}
	return &Staging{root: root, parent: versions, binary: binary, dir: dir, lock: lock}, nil
}

// Dir is the staging directory, where the caller writes the version's one file.
func (s *Staging) Dir() string { return s.dir }

// BinaryPath is the binary's path in the staging directory.
func (s *Staging) BinaryPath() string { return filepath.Join(s.dir, s.binary) }

// VersionRecorder records a version's digest and where it came from (Records does).
type VersionRecorder interface {
	RecordVersion(ctx context.Context, version string, binary digest.Digest, p Provenance) error
}

// Commit puts the staging directory in place as versions/<version>: its entries are fsynced,
// the digest and provenance recorded, the directory renamed and versions/ fsynced. The digest
// is recorded before the directory appears, so Choose never sees the version without the digest
// it must match; a crash between the two leaves a record and a staging directory, and the next
// attempt records the same digest again. The binary itself must already be written and fsynced.
//
// When versions/<version> already exists the error wraps ErrVersionExists and the staging
// directory is kept for the caller to Discard.
func (s *Staging) Commit(ctx context.Context, r VersionRecorder, version string, binary digest.Digest, p Provenance) error {
	return s.commit(version, func() error {
		return r.RecordVersion(ctx, version, binary, p)
	})
}

// LauncherRecorder records a launcher version (Records does).
type LauncherRecorder interface {
	RecordLauncher(ctx context.Context, lv LauncherVersion) error
}

// CommitLauncher puts a launcher staging directory in place as launchers/<version>, as Commit
// does for a host version.
func (s *Staging) CommitLauncher(ctx context.Context, r LauncherRecorder, lv LauncherVersion) error {
	return s.commit(lv.Version, func() error { return r.RecordLauncher(ctx, lv) })
}

func (s *Staging) commit(version string, record func() error) error {
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("sync %s: %w", s.dir, err)
	}
	if err := record(); err != nil {
		return err
	}
	final := filepath.Join(s.parent, version)
	if fi, err := os.Lstat(final); err == nil {
		// rename(2) would replace an empty directory; nothing already there is ever replaced.
		return fmt.Errorf("%s (%s): %w", final, fi.Mode().Type(), ErrVersionExists)
	}
	if err := os.Rename(s.dir, final); err != nil {
		if _, serr := os.Lstat(final); serr == nil {
			return fmt.Errorf("%s: %w", final, ErrVersionExists)
		}
		return fmt.Errorf("rename %s into place as %s: %w", s.dir, final, err)
	}
	s.dir = ""
	s.unlock()
	if err := atomicfile.SyncDir(s.parent); err != nil {
		return fmt.Errorf("sync %s: %w", s.parent, err)
	}
	return nil
}

// Discard removes the staging directory, unless Commit put it in place. It is safe to call
// more than once and after Commit.
func (s *Staging) Discard() {
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
	s.unlock()
}

func (s *Staging) unlock() {
	if s.lock != nil {
		s.lock.Close() // closing the last descriptor drops the flock
		s.lock = nil
	}
}

// inUse reports whether the staging directory at path is held by a Staging in some process.
func inUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	return filelock.HeldElsewhere(f)
}
