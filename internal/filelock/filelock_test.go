package filelock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// open opens path for locking until the test ends; two opens of one path are two holders, as
// two processes would be (flock belongs to the open file, not the process).
func open(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestASecondHolderIsRefusedUntilTheFirstCloses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	first, second := open(t, path), open(t, path)
	if err := TryLock(first); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := TryLock(second); !errors.Is(err, ErrBusy) {
		t.Fatalf("second lock while the first holds it = %v, want ErrBusy", err)
	}
	if !HeldElsewhere(second) {
		t.Error("HeldElsewhere is false while another open file holds the lock")
	}
	first.Close()
	if HeldElsewhere(second) {
		t.Error("HeldElsewhere is true after the holder closed its file")
	}
	if err := TryLock(second); err != nil {
		t.Fatalf("second lock after the first closed: %v", err)
	}
}

func TestWaitEndsWithItsContextSayingTheLockIsBusy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if err := TryLock(open(t, path)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		want error
	}{
		{"an ended context still tries once", func() context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, context.Canceled},
		{"a deadline", func() context.Context {
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Wait(tc.ctx(), open(t, path), time.Millisecond)
			if !errors.Is(err, ErrBusy) || !errors.Is(err, tc.want) {
				t.Errorf("Wait = %v, want ErrBusy and %v", err, tc.want)
			}
		})
	}
}

func TestWaitAndLockTakeTheLockOnceItIsLetGo(t *testing.T) {
	for _, tc := range []struct {
		name string
		take func(*os.File) error
	}{
		{"Wait", func(f *os.File) error { return Wait(t.Context(), f, time.Millisecond) }},
		{"Lock", Lock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.lock")
			first := open(t, path)
			if err := TryLock(first); err != nil {
				t.Fatal(err)
			}
			waiter := open(t, path)
			done := make(chan error, 1)
			go func() { done <- tc.take(waiter) }()
			select {
			case err := <-done:
				t.Fatalf("%s returned (%v) while another open file held the lock", tc.name, err)
			default:
			}
			first.Close()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("%s after the holder let go: %v", tc.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("%s did not take the lock within 30 s of its holder letting go", tc.name)
			}
			if !HeldElsewhere(open(t, path)) {
				t.Errorf("after %s, another open file does not see the lock held", tc.name)
			}
		})
	}
}

func TestHolderIsThePidWrittenOnlyWhileTheLockIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	if pid := Holder(path); pid != 0 {
		t.Errorf("Holder of a missing file = %d, want 0", pid)
	}
	f := open(t, path)
	if err := TryLock(f); err != nil {
		t.Fatal(err)
	}
	WritePID(f)
	if pid := Holder(path); pid != os.Getpid() {
		t.Errorf("Holder while held = %d, want %d", pid, os.Getpid())
	}
	f.Close()
	if pid := Holder(path); pid != 0 {
		t.Errorf("Holder after the lock was let go = %d, want 0 (a pid left behind does not count)", pid)
	}
	if pid := ReadPID(path); pid != os.Getpid() {
		t.Errorf("ReadPID = %d, want the pid left in the file, %d", pid, os.Getpid())
	}
}

func TestADirectoryCanBeLocked(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := TryLock(d); err != nil {
		t.Fatalf("lock a directory opened read-only: %v", err)
	}
	other, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if !HeldElsewhere(other) {
		t.Error("a locked directory is not seen held")
	}
}
