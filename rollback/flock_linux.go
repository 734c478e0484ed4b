package rollback

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes the exclusive flock on f without waiting; busy is true when another process
// holds it. The kernel drops it when the process dies, however it dies.
func tryLock(f *os.File) (busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// heldElsewhere reports whether another process holds the exclusive flock on f: a shared lock
// succeeds only when nobody does, and is released at once.
func heldElsewhere(f *os.File) bool {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return true
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
