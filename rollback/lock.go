package rollback

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/novox/mesh-host/internal/filelock"
)

// Lock is an exclusive advisory lock on a file under the root (internal/filelock): one launcher
// and one host per root. The kernel drops it when the process dies, however it dies.
type Lock struct{ f *os.File }

// errLocked is returned when another process holds the lock.
var errLocked = errors.New("lock held by another process")

// LockLauncher takes ROOT/launcher.lock without waiting.
func LockLauncher(root string) (*Lock, error) {
	if err := prepareRoot(root); err != nil {
		return nil, err
	}
	// A short wait rides out `status` peeking at the lock at the same moment.
	return lock(context.Background(), filepath.Join(root, launcherLock), "mesh-launcher", time.Second)
}

// LockHost takes ROOT/host.lock, waiting up to wait for a predecessor that is still exiting
// (a host that stood aside, or one killed with its launcher) to let go of it.
func LockHost(ctx context.Context, root string, wait time.Duration) (*Lock, error) {
	return lock(ctx, filepath.Join(root, hostLock), "mesh-host", wait)
}

// LauncherRunning reports the pid holding ROOT/launcher.lock, or 0 when no launcher runs. It
// never takes the lock, so it cannot get in a starting launcher's way.
func LauncherRunning(root string) int {
	return filelock.Holder(filepath.Join(root, launcherLock))
}

func lock(ctx context.Context, path, who string, wait time.Duration) (*Lock, error) {
	if err := MakeRoot(filepath.Dir(path)); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := tightenFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("make lock %s private (mode %#o): %w", path, fileMode, err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	err = filelock.Wait(wctx, f, 20*time.Millisecond)
	cancel()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		f.Close()
		return nil, ctx.Err()
	case errors.Is(err, filelock.ErrBusy):
		pid := filelock.Holder(path)
		f.Close()
		return nil, fmt.Errorf("another %s (pid %d) already runs on this root (%s): %w", who, pid, path, errLocked)
	default:
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is written for people and status; the flock is what counts.
	filelock.WritePID(f)
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// File is the open file the lock is held through: a launcher handing over to another image by
// exec keeps it open across the exec, so the root is never unlocked in between.
func (l *Lock) File() *os.File { return l.f }

// AdoptLock takes over a lock held through f, a descriptor the image before this one held it
// through and kept open across exec.
func AdoptLock(f *os.File) (*Lock, error) {
	if err := filelock.TryLock(f); err != nil {
		return nil, fmt.Errorf("the launcher lock handed over as descriptor %d: %w", f.Fd(), err)
	}
	return &Lock{f: f}, nil
}
