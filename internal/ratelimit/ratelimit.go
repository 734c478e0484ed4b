// Package ratelimit caps how fast a reader is read (or a writer written): a token bucket of bytes
// per second.
//
// So an upgrade's fetch never takes more of a node's link than host.json's max_fetch_rate allows.
//
// The bucket holds at most one Read's worth (Burst, a tenth of a second of the rate, between
// 1 KiB and 64 KiB), and a Read returns at most that much: bytes leave at the rate in small steps,
// so a watchdog that fails a fetch when no byte arrives for some seconds keeps seeing them. Over
// any span, the bytes read are at most rate × span + Burst.
package ratelimit

import (
	"context"
	"io"
	"time"
)

// Clock is the time the bucket is measured by: the real clock in production, an injected one
// in tests (Sleep then moves it).
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, returning ctx's error then.
	Sleep(ctx context.Context, d time.Duration) error
}

// Real is the machine's clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Burst is the most a Reader limited to rate bytes per second returns in one Read, and the most
// its bucket holds.
func Burst(rate int64) int {
	return int(min(max(rate/10, 1<<10), 64<<10))
}

// Reader returns r read at most rate bytes per second by clock (nil: Real); rate ≤ 0 returns r
// as it is. Reads wait under ctx.
func Reader(ctx context.Context, r io.Reader, rate int64, clock Clock) io.Reader {
	if rate <= 0 {
		return r
	}
	if clock == nil {
		clock = Real
	}
	burst := Burst(rate)
	return &reader{ctx: ctx, r: r, rate: rate, burst: burst, clock: clock, tokens: float64(burst), at: clock.Now()}
}

type reader struct {
	ctx    context.Context
	r      io.Reader
	rate   int64
	burst  int
	clock  Clock
	tokens float64   // bytes that may be read now
	at     time.Time // when tokens was last brought up to date
}

// refill adds the tokens earned since the last refill, up to the burst.
func (l *reader) refill() {
	now := l.clock.Now()
	if d := now.Sub(l.at); d > 0 {
		l.tokens = min(l.tokens+d.Seconds()*float64(l.rate), float64(l.burst))
	}
	l.at = now
}

func (l *reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return l.r.Read(p)
	}
	if len(p) > l.burst {
		p = p[:l.burst]
	}
	// Wait until the whole of p may be read, so what is read is never more than was earned.
	if err := l.wait(len(p)); err != nil {
		return 0, err
	}
	n, err := l.r.Read(p)
	l.tokens -= float64(n)
	return n, err
}

// wait waits until n bytes (at most the burst) are earned.
func (l *reader) wait(n int) error {
	l.refill()
	for l.tokens < float64(n) {
		need := float64(n) - l.tokens
		wait := time.Duration(need / float64(l.rate) * float64(time.Second))
		if err := l.clock.Sleep(l.ctx, max(wait, time.Millisecond)); err != nil {
			return err
		}
		l.refill()
	}
	return nil
}

// take waits for n bytes and spends them.
func (l *reader) take(n int) error {
	if err := l.wait(n); err != nil {
		return err
	}
	l.tokens -= float64(n)
	return nil
}

// Writer returns w written at most rate bytes per second by clock (nil: Real); rate ≤ 0 returns
// w as it is. For a source that pushes what it fetches into a writer (host/blobs): a write that
// waits holds the source back, so it fetches no faster.
func Writer(ctx context.Context, w io.Writer, rate int64, clock Clock) io.Writer {
	if rate <= 0 {
		return w
	}
	if clock == nil {
		clock = Real
	}
	burst := Burst(rate)
	return &writer{w: w, b: reader{ctx: ctx, rate: rate, burst: burst, clock: clock, tokens: float64(burst), at: clock.Now()}}
}

type writer struct {
	w io.Writer
	b reader // its bucket
}

func (l *writer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), l.b.burst)
		if err := l.b.take(n); err != nil {
			return written, err
		}
		m, err := l.w.Write(p[:n])
		written += m
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}
