package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A controller outlives server restarts (JetStream keeps everything on disk): a bus operation
// that fails because the server is away is retried, with backoff, until it succeeds, fails for
// good, or the context ends. A bus outage is never a reason to halt a rollout.

// opTimeout bounds one attempt of one bus operation.
const opTimeout = 5 * time.Second

// maxBackoff is the longest wait between two attempts.
const maxBackoff = 2 * time.Second

// retry runs op until it succeeds or fails with an error that is not transient, each attempt
// bounded by opTimeout.
func retry(ctx context.Context, log *slog.Logger, what string, op func(context.Context) error) error {
	return retryAttempts(ctx, log, what, func(ctx context.Context) error {
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		return op(octx)
	})
}

// retryProgressing is retry for an operation whose length grows with the fleet (reading every
// node's heartbeat): an attempt is cut short only when op has not called alive for opTimeout,
// not after opTimeout in all — such a bound had each attempt at 100,000 nodes on a loaded
// machine begun again from the start, for minutes.
func retryProgressing(ctx context.Context, log *slog.Logger, what string, op func(ctx context.Context, alive func()) error) error {
	return retryAttempts(ctx, log, what, func(ctx context.Context) error {
		actx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		var last atomic.Int64
		alive := func() { last.Store(time.Now().UnixNano()) }
		alive()
		stalled := errors.New("no progress")
		done := make(chan struct{})
		defer close(done)
		go func() {
			t := time.NewTicker(opTimeout / 10)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				if time.Since(time.Unix(0, last.Load())) > opTimeout {
					cancel(stalled)
					return
				}
			}
		}()
		err := op(actx, alive)
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), stalled) {
			return fmt.Errorf("nothing came for %s: %w", opTimeout, context.DeadlineExceeded)
		}
		return err
	})
}

// retryAttempts runs attempt until it succeeds or fails with an error that is not transient,
// waiting with backoff between attempts.
func retryAttempts(ctx context.Context, log *slog.Logger, what string, attempt func(context.Context) error) error {
	backoff := 50 * time.Millisecond
	for {
		err := attempt(ctx)
		if err == nil || !transient(ctx, err) {
			return err
		}
		log.Warn("the bus did not answer; trying again", "op", what, "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (the bus last said: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// transient reports whether err says the bus is away for now (a server restarting, a reply
// lost, a connection reconnecting) rather than that the operation is wrong.
func transient(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	for _, t := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrStaleConnection,
		jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount} {
		if errors.Is(err, t) {
			return true
		}
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code == 503 // JetStream "temporarily unavailable"
}

// sleep waits d or until ctx ends; it reports whether the wait ran out.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// reconnected closes its channel once the connection has reconnected since the call: a KV
// watch (an ordered push consumer) does not always survive a server restart, and is then
// established again. It watches the connection's counters, so it needs no handler of the
// caller's connection.
func reconnected(ctx context.Context, nc *nats.Conn) <-chan struct{} {
	ch := make(chan struct{})
	base := nc.Stats().Reconnects
	go func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if nc.Stats().Reconnects != base && nc.IsConnected() {
				close(ch)
				return
			}
		}
	}()
	return ch
}
