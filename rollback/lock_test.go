package rollback

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSecondLauncherLockFailsNamingTheHoldersPID(t *testing.T) {
	root := t.TempDir()
	l, err := LockLauncher(root)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	l2, err := LockLauncher(root)
	if err == nil {
		l2.Unlock()
		t.Fatal("a second launcher lock on the same root succeeded")
	}
	if !errors.Is(err, ErrLocked) {
		t.Errorf("error %v does not wrap ErrLocked", err)
	}
	for _, want := range []string{"pid " + strconv.Itoa(os.Getpid()), "mesh-launcher", root} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLauncherRunningReportsHolderWhileHeldAndZeroAfterUnlock(t *testing.T) {
	root := t.TempDir()
	if pid := LauncherRunning(root); pid != 0 {
		t.Errorf("LauncherRunning with no lock file = %d, want 0", pid)
	}
	l, err := LockLauncher(root)
	if err != nil {
		t.Fatal(err)
	}
	if pid := LauncherRunning(root); pid != os.Getpid() {
		t.Errorf("LauncherRunning while held = %d, want %d", pid, os.Getpid())
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if pid := LauncherRunning(root); pid != 0 {
		t.Errorf("LauncherRunning after Unlock = %d, want 0 (the stale pid in the file does not count)", pid)
	}
	// Unlock twice, and of nil, is harmless.
	if err := l.Unlock(); err != nil {
		t.Errorf("second Unlock = %v", err)
	}
	if err := (*Lock)(nil).Unlock(); err != nil {
		t.Errorf("nil Unlock = %v", err)
	}
	// Released, it can be taken again.
	l2, err := LockLauncher(root)
	if err != nil {
		t.Fatalf("relock after Unlock: %v", err)
	}
	l2.Unlock()
}

func TestLauncherAndHostLocksAreIndependent(t *testing.T) {
	root := t.TempDir()
	l, err := LockLauncher(root)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	h, err := LockHost(context.Background(), root, 0)
	if err != nil {
		t.Fatalf("host lock while the launcher holds its own: %v", err)
	}
	defer h.Unlock()
}

func TestLockHostWaitsForReleaseWithinItsWait(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	first, err := LockHost(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := LockHost(ctx, root, time.Minute)
		got <- result{l, err}
	}()
	// Released only once the second LockHost has found it held: its goroutine then waits in
	// filelock.Wait's select, which it reaches only after a try was refused.
	deadline := time.Now().Add(time.Minute)
	for !waitingForLock() {
		select {
		case r := <-got:
			t.Fatalf("LockHost returned (error %v) while the first lock was held, without waiting for it", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the second LockHost never waited for the lock: no goroutine in filelock.Wait's select")
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.Unlock()
	r := <-got
	if r.err != nil {
		t.Fatalf("LockHost did not get the lock once released: %v", r.err)
	}
	r.l.Unlock()
}

// waitingForLock reports whether a goroutine of this process waits in filelock.Wait's select
// between two tries of a lock that was held.
func waitingForLock() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "internal/filelock.Wait(") {
			return true
		}
	}
	return false
}

func TestLockHostGivesUpAfterItsWaitNamingTheHolder(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	first, err := LockHost(ctx, root, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock()
	_, err = LockHost(ctx, root, 50*time.Millisecond)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "mesh-host") ||
		!strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Errorf("LockHost while held = %v; want ErrLocked naming mesh-host and the pid", err)
	}
}

func TestLockHostStopsWaitingWhenContextEnds(t *testing.T) {
	root := t.TempDir()
	first, err := LockHost(context.Background(), root, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := LockHost(ctx, root, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("LockHost with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestLockCreatesTheRoot(t *testing.T) {
	root := t.TempDir() + "/not/yet"
	l, err := LockLauncher(root)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	if !exists(t, root) {
		t.Error("root not created")
	}
}
