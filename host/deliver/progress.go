package deliver

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/novox/mesh-host/wire"
)

// Progress states: the heartbeat's fetch states (wire.Fetch).
const (
	StateFetching  = "fetching"
	StateVerifying = "verifying" // extracting, checking the binary and running its preflight
	StateStaged    = "staged"
	StateFailed    = "failed"
)

// Progress is what the host reports while delivering a version.
type Progress struct {
	Version string
	State   string
	Bytes   int64   // fetched so far
	Total   int64   // the archive's size from the manifest
	Percent float64 // Bytes/Total·100
	RateBPS int64   // average bytes per second since the fetch started
	// Stalled is, while fetching, how long no byte has arrived when that is a second or more
	// (the fetch fails at Config.FetchStall).
	Stalled time.Duration
	Err     *Error // with StateFailed: what went wrong (RetryAt says when Run tries again)
	// Launcher is, with StateStaged, what became of the launcher the release carried, bounded:
	// "launcher v0.3.0 staged", or why it was not. Empty when it carried none or the node
	// has it already.
	Launcher string
	// Delta is the base version whose delta is fetched (Bytes and Total are then the delta's),
	// or "" for the archive.
	Delta string
	// Moved is every byte the delivery of the version fetched so far, over its attempts: a delta
	// it could not use, and a fetch that failed part way, count too.
	Moved int64
}

// Fetch returns the progress as the heartbeat carries it.
func (p Progress) Fetch() *wire.Fetch {
	f := &wire.Fetch{State: p.State, Version: p.Version, Bytes: p.Bytes, Total: p.Total, Percent: p.Percent, RateBPS: p.RateBPS,
		StalledS: int64(p.Stalled / time.Second), LauncherNote: p.Launcher, Delta: p.Delta, Moved: p.Moved}
	if p.Err != nil {
		f.Error = p.Err.Error()
		f.RetryAt = p.Err.RetryAt
	}
	return f
}

// meter is an io.Writer that counts what passes and reports progress at most every
// meterInterval, and once more when the last byte is written.
type meter struct {
	version  string
	delta    string // the base version when the object is a delta
	moved    *int64 // every byte the delivery of the version fetched: this object's are added
	total, n int64
	start    time.Time
	last     time.Time     // of the last report
	idle     time.Duration // while reporting a stall
	report   func(Progress)
}

const meterInterval = 250 * time.Millisecond

func newMeter(version string, total int64, delta string, moved *int64, report func(Progress)) *meter {
	now := time.Now()
	m := &meter{version: version, delta: delta, moved: moved, total: total, start: now, last: now, report: report}
	m.send()
	return m
}

func (m *meter) Write(p []byte) (int, error) {
	m.n += int64(len(p))
	*m.moved += int64(len(p))
	if now := time.Now(); now.Sub(m.last) >= meterInterval || m.n >= m.total {
		m.last = now
		m.send()
	}
	return len(p), nil
}

// stalled reports, at most once a second, that no byte has arrived for idle.
func (m *meter) stalled(idle time.Duration) {
	if now := time.Now(); now.Sub(m.last) >= time.Second {
		m.last = now
		m.idle = idle
		m.send()
		m.idle = 0
	}
}

func (m *meter) send() {
	p := Progress{Version: m.version, State: StateFetching, Bytes: m.n, Total: m.total, Stalled: m.idle, Delta: m.delta, Moved: *m.moved}
	if m.total > 0 {
		p.Percent = float64(m.n) * 100 / float64(m.total)
	}
	if el := time.Since(m.start).Seconds(); el > 0 {
		p.RateBPS = int64(float64(m.n) / el)
	}
	m.report(p)
}

// Run delivers version, retrying failures that may pass as the backoff allows, until it is
// staged (nil), refused (a permanent *Error), or ctx is done (ctx.Err()). It reports progress,
// and each failure as StateFailed with the error and its RetryAt. The host runs it in a
// goroutine per target and cancels ctx when the target changes.
func (d *Deliverer) Run(ctx context.Context, version string, progress func(Progress)) error {
	if progress == nil {
		progress = func(Progress) {}
	}
	for {
		err := d.Deliver(ctx, version, progress)
		var e *Error
		switch {
		case err == nil:
			return nil
		case !errors.As(err, &e):
			return err
		case e.Kind.Permanent():
			progress(Progress{Version: version, State: StateFailed, Err: e})
			return e
		}
		progress(Progress{Version: version, State: StateFailed, Err: e})
		t := time.NewTimer(time.Until(e.RetryAt))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Latest keeps the last progress reported, for the heartbeat to read from another goroutine:
// pass its Report method as the progress callback.
type Latest struct {
	mu sync.Mutex
	p  *Progress
}

// Report records p.
func (l *Latest) Report(p Progress) {
	l.mu.Lock()
	l.p = &p
	l.mu.Unlock()
}

// Fetch returns the last progress as the heartbeat carries it, or nil if there is none.
func (l *Latest) Fetch() *wire.Fetch {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p == nil {
		return nil
	}
	return l.p.Fetch()
}
