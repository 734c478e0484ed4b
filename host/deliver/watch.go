package deliver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Why a fetch's context ends early; a watch words them for the operator.
var (
	errStalled = errors.New("the fetch stalled")
	errTooSlow = errors.New("the fetch is too slow")
)

// watch bounds one fetch (direct gets of the archive's chunks, internal/objfetch, each under
// ctx): the fetch runs under ctx, whose deadline is the total bound (FetchStall +
// size/FetchMinRate), and a watchdog cancels ctx when no byte has arrived for FetchStall — the
// wait for the first byte included.
type watch struct {
	ctx      context.Context
	size     int64 // the archive's signed size
	stall    time.Duration
	rate     int64
	bound    time.Duration
	deadline time.Time // the fetch's start + bound

	stop   context.CancelCauseFunc
	cancel context.CancelFunc
	dog    *time.Timer
	n      int64 // bytes read through reader
}

func (d *Deliverer) watch(parent context.Context, size int64) *watch {
	w := &watch{size: size, stall: d.cfg.FetchStall, rate: d.cfg.FetchMinRate}
	w.bound = w.stall + time.Duration(float64(size)/float64(w.rate)*float64(time.Second))
	w.deadline = time.Now().Add(w.bound)
	ctx, cancel := context.WithDeadlineCause(parent, w.deadline, errTooSlow)
	w.ctx, w.stop = context.WithCancelCause(ctx)
	w.cancel = cancel
	w.dog = time.AfterFunc(w.stall, func() { w.stop(errStalled) })
	return w
}

// close ends the fetch's context, which also ends what nats.go still runs for it.
func (w *watch) close() {
	w.dog.Stop()
	w.stop(nil)
	w.cancel()
}

// failed says why the fetch ended early when the watch ended it, and nil otherwise (a
// cancelled parent is not a failure of the fetch).
func (w *watch) failed() error {
	cause := context.Cause(w.ctx)
	if cause == nil && !time.Now().Before(w.deadline) {
		// nats.go's reader times out at the deadline itself, possibly just before the
		// context says so.
		cause = errTooSlow
	}
	switch {
	case errors.Is(cause, errStalled):
		return fmt.Errorf("no bytes arrived for %s (%d of %d bytes fetched): the link to the bus stalled",
			w.stall, w.n, w.size)
	case errors.Is(cause, errTooSlow):
		return fmt.Errorf("it took longer than %s, the bound for %d bytes at the minimum rate of %d bytes/s (%d bytes fetched): the link to the bus is too slow",
			w.bound.Round(time.Second), w.size, w.rate, w.n)
	}
	return nil
}

// reader returns src read under the watch: each byte that arrives feeds the watchdog, and
// idle is called, at most every meterInterval, while none arrives for a second or more.
//
// src is read in its own goroutine so that Read returns as soon as the watch ends, whatever src
// is blocked in; the goroutine ends once src returns (a direct get ends with the watch's
// context) and closes src.
func (w *watch) reader(src io.ReadCloser, idle func(time.Duration)) io.Reader {
	r := &watched{w: w, idle: idle, chunks: make(chan chunk), free: make(chan []byte, 2), last: time.Now()}
	for range 2 {
		r.free <- make([]byte, 128<<10) // the object store's chunk size
	}
	go r.pump(src)
	return r
}

type chunk struct {
	buf []byte // to give back to free
	b   []byte // what was read
	err error
}

type watched struct {
	w      *watch
	idle   func(time.Duration)
	chunks chan chunk
	free   chan []byte
	cur    chunk
	err    error
	last   time.Time // when the last byte arrived
}

func (r *watched) pump(src io.ReadCloser) {
	defer src.Close()
	for {
		var buf []byte
		select {
		case buf = <-r.free:
		case <-r.w.ctx.Done():
			return
		}
		n, err := src.Read(buf)
		select {
		case r.chunks <- chunk{buf: buf, b: buf[:n], err: err}:
		case <-r.w.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (r *watched) Read(p []byte) (int, error) {
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for len(r.cur.b) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		select {
		case c := <-r.chunks:
			if r.cur.buf != nil {
				r.free <- r.cur.buf
			}
			r.cur = c
			if len(c.b) > 0 {
				r.last = time.Now()
				r.w.dog.Reset(r.w.stall)
			}
			// io.EOF is the end of a complete stream (objfetch checked its digest); any other
			// error once the watch ended (a timeout, a cancelled get) is the reader's view of
			// it, not the reason.
			if r.err = c.err; r.err != nil && !errors.Is(r.err, io.EOF) {
				if why := r.w.failed(); why != nil {
					r.err = why
				}
			}
		case <-r.w.ctx.Done():
			r.err = r.reason()
		case <-tickC(&tick):
			if idle := time.Since(r.last); idle >= time.Second {
				r.idle(idle)
			}
		}
	}
	n := copy(p, r.cur.b)
	r.cur.b = r.cur.b[n:]
	r.w.n += int64(n)
	return n, nil
}

// reason is the error a Read returns once the watch's context ended.
func (r *watched) reason() error {
	if err := r.w.failed(); err != nil {
		return err
	}
	return context.Cause(r.w.ctx)
}

// tickC starts *t on first use, so a Read served at once costs no ticker.
func tickC(t **time.Ticker) <-chan time.Time {
	if *t == nil {
		*t = time.NewTicker(meterInterval)
	}
	return (*t).C
}
