package deliver

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/ratelimit"
)

// countingClock is an injected clock for the fetch cap: its time moves only when the cap waits.
type countingClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *countingClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *countingClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
	return nil
}

// A host with max_fetch_rate fetches an archive no faster: by the cap's clock the archive's
// bytes took at least (size − one burst) / rate; without a cap the clock never moves.
func TestAFetchKeepsToMaxFetchRate(t *testing.T) {
	const rate = 64 << 10
	start := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for _, capped := range []bool{true, false} {
		clock := &countingClock{now: start}
		h := newHarness(t, func(c *Config) {
			c.FetchClock = clock
			if capped {
				c.MaxFetchRate = rate
			}
		})
		h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
		var log progressLog
		if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, p := range log.p {
			size = max(size, p.Total)
		}
		took := clock.Now().Sub(start)
		if !capped {
			if took != 0 {
				t.Errorf("no cap: the cap's clock moved %s", took)
			}
			continue
		}
		want := time.Duration(float64(size-int64(ratelimit.Burst(rate))) / rate * float64(time.Second))
		if size == 0 || took < want {
			t.Errorf("%d bytes at most %d B/s took %s of the cap's clock, want at least %s", size, rate, took, want)
		}
		t.Logf("%d bytes, %s by the cap's clock at %d B/s", size, took, rate)
	}
}
