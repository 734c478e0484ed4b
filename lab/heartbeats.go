package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/wire"
)

// Beat is one heartbeat and when the lab saw it.
type Beat struct {
	At time.Time
	wire.Heartbeat
}

// HeartbeatLog records every heartbeat of every node (a core subscription to the heartbeat
// wildcard), in the order the lab saw them: the history a test asserts order and timing from.
// It is the lab's observer, outside the system under test.
type HeartbeatLog struct {
	sub *nats.Subscription

	mu      sync.Mutex
	beats   []Beat
	changed chan struct{} // closed and replaced on every new beat
}

// RecordHeartbeats starts recording on nc; the subscription is in place when it returns.
func RecordHeartbeats(nc *nats.Conn, names wire.Names) (*HeartbeatLog, error) {
	l := &HeartbeatLog{changed: make(chan struct{})}
	sub, err := nc.Subscribe(names.HeartbeatWildcard(), func(m *nats.Msg) {
		hb, err := wire.ParseHeartbeat(m.Data)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.beats = append(l.beats, Beat{At: time.Now(), Heartbeat: hb})
		close(l.changed)
		l.changed = make(chan struct{})
		l.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to %s: %w", names.HeartbeatWildcard(), err)
	}
	// Heartbeats come in bursts when many nodes start; never drop one.
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	l.sub = sub
	return l, nil
}

// Stop ends the recording; what was recorded stays readable.
func (l *HeartbeatLog) Stop() { l.sub.Unsubscribe() }

// All is every heartbeat recorded so far, oldest first.
func (l *HeartbeatLog) All() []Beat {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Beat(nil), l.beats...)
}

// Of is node's heartbeats, oldest first.
func (l *HeartbeatLog) Of(node string) []Beat {
	var out []Beat
	for _, b := range l.All() {
		if b.Node == node {
			out = append(out, b)
		}
	}
	return out
}

// Last is node's newest heartbeat.
func (l *HeartbeatLog) Last(node string) (Beat, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.beats) - 1; i >= 0; i-- {
		if l.beats[i].Node == node {
			return l.beats[i], true
		}
	}
	return Beat{}, false
}

// First is the oldest recorded heartbeat that satisfies ok.
func (l *HeartbeatLog) First(ok func(Beat) bool) (Beat, bool) {
	for _, b := range l.All() {
		if ok(b) {
			return b, true
		}
	}
	return Beat{}, false
}

// Len is how many heartbeats were recorded: pass it to WaitAfter to wait only for newer ones.
func (l *HeartbeatLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.beats)
}

// Wait waits for a heartbeat, recorded at any time (already, or from now on), that satisfies ok.
func (l *HeartbeatLog) Wait(ctx context.Context, what string, ok func(Beat) bool) (Beat, error) {
	return l.WaitAfter(ctx, 0, what, ok)
}

// WaitAfter waits for a heartbeat satisfying ok among those recorded after the first from
// (a Len taken earlier).
func (l *HeartbeatLog) WaitAfter(ctx context.Context, from int, what string, ok func(Beat) bool) (Beat, error) {
	for {
		l.mu.Lock()
		beats, changed := l.beats[min(from, len(l.beats)):], l.changed
		from = len(l.beats)
		l.mu.Unlock()
		for _, b := range beats {
			if ok(b) {
				return b, nil
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Beat{}, fmt.Errorf("waiting for a heartbeat with %s: %w", what, ctx.Err())
		}
	}
}

// WaitAll waits until the newest heartbeat of every one of nodes satisfies ok. The error names
// the nodes that do not, with their last word.
func (l *HeartbeatLog) WaitAll(ctx context.Context, nodes []string, what string, ok func(Beat) bool) error {
	for {
		l.mu.Lock()
		changed := l.changed
		l.mu.Unlock()
		var missing []string
		for _, n := range nodes {
			b, heard := l.Last(n)
			switch {
			case !heard:
				missing = append(missing, n+" (never heard)")
			case !ok(b):
				missing = append(missing, fmt.Sprintf("%s (last: %s)", n, Describe(b.Heartbeat)))
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for every node to heartbeat %s: %w; not yet: %v", what, ctx.Err(), missing)
		}
	}
}

// Describe says a heartbeat in one line for a test's or the demo's message.
func Describe(hb wire.Heartbeat) string {
	s := fmt.Sprintf("%s running %s known-good %s target %s up %ds", hb.State, hb.Running, hb.KnownGood, hb.Target, hb.UptimeS)
	if hb.Fetch != nil {
		s += fmt.Sprintf(", fetch %s %s", hb.Fetch.Version, hb.Fetch.State)
	}
	if hb.Refused != nil {
		s += fmt.Sprintf(", refused %s: %.80s", hb.Refused.What, hb.Refused.Error)
	}
	if len(hb.Rollbacks) > 0 { // newest first
		s += fmt.Sprintf(", last rollback %s -> %s", hb.Rollbacks[0].From, hb.Rollbacks[0].To)
	}
	return s
}

// RunningConfirmed is true of a heartbeat that shows version running and confirmed (known-good):
// what a rollout waits for.
func RunningConfirmed(version string) func(Beat) bool {
	return func(b Beat) bool {
		return b.State == wire.StateRunning && b.Running == version && b.KnownGood == version
	}
}
