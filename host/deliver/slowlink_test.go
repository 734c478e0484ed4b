package deliver

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// withTail returns bin followed by n incompressible bytes (an ELF program runs with data
// appended), so its archive is about n bytes larger than bin's.
func withTail(bin []byte, n int) []byte {
	out := append(make([]byte, 0, len(bin)+n), bin...)
	r := rand.New(rand.NewPCG(3, 4))
	for range n / 8 {
		x := r.Uint64()
		for range 8 {
			out = append(out, byte(x))
			x >>= 8
		}
	}
	return out
}

// bounded is a context cancelled after d, without a deadline: the host's delivery context has
// none, and a deadline would hide what nats.go does without one.
func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(d, cancel)
	t.Cleanup(func() { timer.Stop(); cancel() })
	return ctx
}

func TestFetchThroughA200KBpsLinkStagesTheVersion(t *testing.T) {
	h := newHarness(t, nil)
	h.release(v1, withTail(fakehost(t, v1, "ok", runtime.GOARCH), 2<<20))
	r := startRelay(t, h.url, 200_000)
	h.deliverVia(r.URL())

	ctx := bounded(t, 2*time.Minute)
	var log progressLog
	if err := h.d.Deliver(ctx, v1, log.report); err != nil {
		t.Fatal(err)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged")
	}
}

func TestFetchThatStallsFailsAsRetryableAndALaterAttemptStagesIt(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		// After the link comes back it first carries what the stalled fetch's consumer had
		// pushed into it before the retry's first byte. With a 2 s stall this test ran past its
		// bound twice on a machine loaded by other builds (the retries stalling in turn, as we
		// read it); 5 s leaves that backlog time to drain and still tests a stall.
		c.FetchStall = 5 * time.Second
		c.Backoff = Backoff{Initial: 100 * time.Millisecond, Max: 200 * time.Millisecond}
	})
	h.release(v1, withTail(fakehost(t, v1, "ok", runtime.GOARCH), 512<<10)) // a 1.3 MB archive
	r := startRelay(t, h.url, 200_000)
	h.deliverVia(r.URL())

	// A fetch that fails before the hold (a loaded machine's pause taken for a stall) is
	// retried like any other; what is checked is the first failure after the hold.
	var held sync.Once
	from := -1 // log.p's index of the report on which the link was held
	var log progressLog
	err := h.d.Run(bounded(t, 4*time.Minute), v1, func(p Progress) {
		log.report(p)
		switch {
		case p.State == StateFetching && p.Bytes > 0:
			held.Do(func() { // the link stops mid-download
				r.hold()
				log.mu.Lock()
				from = len(log.p) - 1
				log.mu.Unlock()
			})
		case p.State == StateFailed:
			r.release() // and comes back after the fetch gave up
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged after the link came back")
	}

	if from < 0 {
		t.Fatal("no fetch got far enough to hold the link")
	}
	var stalled, failed *Progress
	for i := from; i < len(log.p); i++ {
		p := &log.p[i]
		if p.State == StateFetching && p.Stalled > 0 && stalled == nil && failed == nil {
			stalled = p
		}
		if p.State == StateFailed && failed == nil {
			failed = p
		}
	}
	if failed == nil {
		t.Fatal("the stalled fetch did not fail")
	}
	if e := failed.Err; e.Kind != KindBus || e.Kind.Permanent() || !strings.Contains(e.Error(), "stalled") {
		t.Fatalf("the stalled fetch failed with %v, want a bus failure that says it stalled", e)
	}
	if f := failed.Fetch(); f.State != StateFailed || f.RetryAt.IsZero() || f.Error == "" {
		t.Fatalf("the heartbeat shows the failure as %+v, want the error and when it retries", f)
	}
	if stalled == nil {
		t.Fatal("no progress report showed the stall before the fetch failed")
	}
	if f := stalled.Fetch(); f.StalledS < 1 || f.Bytes == 0 || f.Bytes >= f.Total {
		t.Fatalf("the heartbeat shows the stall as %+v, want stalled_s ≥ 1 mid-download", f)
	}
}

func TestFetchSlowerThanTheMinimumRateFailsAsRetryable(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		// The stall limit is long enough that a loaded machine's pauses are not taken for a
		// stall: CI once saw no byte for 5 s, before the first chunk, while other packages'
		// tests ran podman and builds beside it. The total bound (20 s + ~5 MB at 4 MiB/s ≈
		// 21 s) ends a fetch the link needs ~50 s for, when less than half has arrived.
		c.FetchStall = 20 * time.Second
		c.FetchMinRate = 4 << 20 // the link gives 100 KB/s
	})
	h.release(v1, withTail(fakehost(t, v1, "ok", runtime.GOARCH), 4<<20))
	r := startRelay(t, h.url, 100_000)
	h.deliverVia(r.URL())
	err := h.d.Deliver(bounded(t, 2*time.Minute), v1, nil)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindBus || e.Kind.Permanent() || e.RetryAt.IsZero() || !strings.Contains(err.Error(), "too slow") {
		t.Fatalf("got %v, want a bus failure that says the link is too slow, retried later", err)
	}
	if ents := h.versionsEntries(); len(ents) != 0 {
		t.Fatalf("versions/ holds %v", ents)
	}
}
