//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package filelock

import (
	"errors"
	"fmt"
	"os"
	"runtime"
)

func unsupported() error {
	return fmt.Errorf("file locks (flock) are not available on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// TryLock, where there is no flock, refuses: what the lock guards cannot be ensured.
func TryLock(*os.File) error { return unsupported() }

// Lock, where there is no flock, refuses.
func Lock(*os.File) error { return unsupported() }

// HeldElsewhere, where no lock can be taken, is false.
func HeldElsewhere(*os.File) bool { return false }
