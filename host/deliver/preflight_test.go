package deliver

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The fixture's held mode exits 0 but leaves a child holding its stdout open past exec's
// WaitDelay, which is what a copying goroutine starved of CPU looks like to exec.Cmd.Wait:
// it returns exec.ErrWaitDelay. Neither is the release's fault (docs/decisions/0003).

func TestPreflightThatPrintsTheVersionButLeavesStdoutOpenPasses(t *testing.T) {
	h := newHarness(t, nil)
	h.release(v1, fakehost(t, v1, "held", runtime.GOARCH))
	if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
		t.Fatalf("a binary that printed its version and exited 0 was not staged: %v", err)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged")
	}
}

func TestPreflightWhoseOutputCannotBeReadInTimeIsRetriedNotRefused(t *testing.T) {
	mute := filepath.Join(t.TempDir(), "mute")
	if err := os.WriteFile(mute, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *Config) {
		c.Backoff = Backoff{Initial: time.Millisecond, Max: time.Millisecond}
		c.PreflightEnv = []string{"FAKEHOST_MUTE=" + mute}
	})
	h.release(v1, fakehost(t, v1, "held", runtime.GOARCH))
	var failures []*Error // appended to by Run's own goroutine only
	err := h.d.Run(context.Background(), v1, func(p Progress) {
		if p.State != StateFailed {
			return
		}
		failures = append(failures, p.Err)
		// The machine recovers: the next attempt at the same release reads the version.
		if err := os.Remove(mute); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatalf("Run gave up: %v (failures %v)", err, failures)
	}
	if len(failures) != 1 {
		t.Fatalf("failures %v, want exactly one", failures)
	}
	e := failures[0]
	if e.Kind.Permanent() || e.RetryAt.IsZero() || !strings.Contains(e.Error(), "could not be read in time") {
		t.Fatalf("got %v (kind %s), want a retried failure saying the output could not be read in time", e, e.Kind)
	}
	if !errors.Is(e, exec.ErrWaitDelay) {
		t.Fatalf("%v does not wrap exec.ErrWaitDelay", e)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged after the retry")
	}
}
