// Package filelock is the tree's one file lock: an exclusive advisory flock(2) held through an open
// file.
//
// The kernel drops it when the file is closed or the process dies, however it dies. One launcher
// and one host per root, a staging directory in progress, one server per JetStream store, one
// writer of the nodes account and one builder of a lab rootfs all rest on it.
//
// It is Linux's and the BSDs' (macOS included, where the release commands run): flock_unix.go.
// Elsewhere it builds, so that what imports it does, and every lock refuses with an error
// wrapping errors.ErrUnsupported (flock_other.go), as go-systemd does off Linux.
package filelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrBusy is wrapped when another open file holds the lock: another process, or another open
// of the same file in this one.
var ErrBusy = errors.New("locked by another process")

// Wait takes the exclusive lock on f, trying again every poll until it is free or ctx ends;
// it tries once even when ctx has already ended. When ctx ends first, the error wraps both
// ErrBusy and ctx's error.
func Wait(ctx context.Context, f *os.File, poll time.Duration) error {
	t := time.NewTimer(poll)
	defer t.Stop()
	for {
		err := TryLock(f)
		if !errors.Is(err, ErrBusy) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-t.C:
			t.Reset(poll)
		}
	}
}

// WritePID writes this process's pid into the lock file f, for messages and status; the lock
// is what counts, never the pid.
func WritePID(f *os.File) {
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
}

// ReadPID is the pid a lock file at path holds (WritePID), or 0 when it holds none.
func ReadPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid < 0 {
		return 0
	}
	return pid
}

// Holder is the pid written in the lock file at path while another open file holds its lock,
// else 0 (a pid left in a file nobody holds does not count). It never takes the lock for
// longer than a look, so it cannot get in a starting holder's way.
func Holder(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	if !HeldElsewhere(f) {
		return 0
	}
	return ReadPID(path)
}
