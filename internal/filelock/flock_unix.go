//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// TryLock takes the exclusive lock on f without waiting; the error is ErrBusy when another open
// file holds it. Errors do not name the file: the caller, who knows what it guards, does.
func TryLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return ErrBusy
	}
	if err != nil {
		return fmt.Errorf("flock: %w", err)
	}
	return nil
}

// Lock takes the exclusive lock on f, waiting as long as another open file holds it.
func Lock(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if errors.Is(err, syscall.EINTR) {
			continue // a signal arrived while waiting
		}
		if err != nil {
			return fmt.Errorf("flock: %w", err)
		}
		return nil
	}
}

// HeldElsewhere reports whether another open file holds the exclusive lock on f's file: a
// shared lock succeeds only when none does, and is let go at once.
func HeldElsewhere(f *os.File) bool {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
