package link

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// A node's user may create a consumer only filtered to one of its own keys
// ($JS.API.CONSUMER.CREATE.<stream>.*.<filter>, decision 0011), and may not delete one. So each
// key the link follows has its own watch, a push consumer filtered to exactly that key's subject,
// which the server removes consumerIdle after its subscription ends. nats.go's KV Watch creates
// the same consumer but deletes it when stopped, which a node may not do: every stop would wait
// for a refused request and log a permissions violation.
const (
	// consumerIdle is how long the server keeps a watch's consumer once nobody receives from it.
	consumerIdle = 30 * time.Second
	// watchHeartbeat is the consumer's idle heartbeat; two missed end the watch, which starts
	// again.
	watchHeartbeat = 5 * time.Second
)

// keyEntry is one value of a watched key: its stream sequence (the KV revision), its bytes, and
// whether it is a delete or purge marker (Value empty).
type keyEntry struct {
	Key      string
	Value    []byte
	Revision uint64
	Deleted  bool
}

// watchedKey is one key the link follows and what it does with each entry. A nil entry marks
// the end of the key's initial value (which may be none); handle returns false when the session
// is over. start is called before the first entry of every watch of the key.
type watchedKey struct {
	bucket, key string
	start       func()
	handle      func(ctx context.Context, e *keyEntry) bool
}

// watch keeps a watch on k open until ctx ends, retrying with backoff while the bucket is
// missing or the watch fails.
func (l *Link) watch(ctx context.Context, k watchedKey) {
	backoff := l.opts.RetryMin
	warned := false
	for ctx.Err() == nil {
		err := l.watchOnce(ctx, k, func() { backoff, warned = l.opts.RetryMin, false })
		if ctx.Err() != nil {
			return
		}
		if !warned {
			l.log.Warn("link: cannot watch; retrying", "bucket", k.bucket, "key", k.key, "err", err)
			warned = true
		} else {
			l.log.Debug("link: cannot watch; retrying", "bucket", k.bucket, "key", k.key, "err", err, "in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, l.opts.RetryMax)
	}
}

// kvStream and kvSubject are a KV bucket's stream and a key's subject in it.
func kvStream(bucket string) string       { return "KV_" + bucket }
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// watchOnce follows k on one consumer until ctx ends or the watch fails: the key's current value
// (none, a value, or a delete marker), the end-of-initial-values mark, then every change.
func (l *Link) watchOnce(ctx context.Context, k watchedKey, healthy func()) error {
	cons, err := l.js.CreatePushConsumer(ctx, kvStream(k.bucket), jetstream.ConsumerConfig{
		DeliverSubject:    l.nc.NewInbox(), // below the node's inbox prefix, the only place it may receive
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     kvSubject(k.bucket, k.key),
		AckPolicy:         jetstream.AckNonePolicy,
		FlowControl:       true,
		IdleHeartbeat:     watchHeartbeat,
		InactiveThreshold: consumerIdle,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("KV bucket %s does not exist yet (mesh-release init creates it): %w", k.bucket, err)
		}
		return fmt.Errorf("create a consumer on %s: %w", kvSubject(k.bucket, k.key), err)
	}
	done := make(chan struct{})
	defer close(done)
	msgs := make(chan jetstream.Msg, 16)
	failed := make(chan error, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-done:
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			select {
			case failed <- err:
			default:
			}
		}
	}))
	if err != nil {
		return fmt.Errorf("receive from the consumer on %s: %w", kvSubject(k.bucket, k.key), err)
	}
	defer cc.Stop() // unsubscribes only; the server removes the consumer consumerIdle later
	healthy()
	if k.start != nil {
		k.start()
	}
	initial := cons.CachedInfo().NumPending > 0
	if !initial && !k.handle(ctx, nil) {
		return ctx.Err()
	}
	var delivered uint64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return fmt.Errorf("the watch of %s ended: %w", kvSubject(k.bucket, k.key), err)
		case m := <-msgs:
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("a message on %s without JetStream metadata: %w", kvSubject(k.bucket, k.key), err)
			}
			if md.Sequence.Consumer != delivered+1 {
				// A slow consumer dropped a message: start again from the key's latest value.
				return fmt.Errorf("the watch of %s missed a change (delivery %d after %d); watching it again", kvSubject(k.bucket, k.key), md.Sequence.Consumer, delivered)
			}
			delivered = md.Sequence.Consumer
			e := &keyEntry{Key: k.key, Revision: md.Sequence.Stream, Deleted: isDeleteMarker(m)}
			if !e.Deleted {
				e.Value = m.Data()
			}
			if !k.handle(ctx, e) {
				return ctx.Err()
			}
			if initial && md.NumPending == 0 {
				initial = false
				if !k.handle(ctx, nil) {
					return ctx.Err()
				}
			}
		}
	}
}

// isDeleteMarker tells a KV delete or purge, or a marker the server left when the value aged
// out, from a value (as nats.go's KV watch does).
func isDeleteMarker(m jetstream.Msg) bool {
	h := m.Headers()
	if h == nil {
		return false
	}
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}

// revisionWatcher reports each new revision of one key once, across sessions: seen keeps the
// last revision reported.
func (l *Link) revisionWatcher(bucket, key string, seen *revSeen, event func(*keyEntry) Event) watchedKey {
	return watchedKey{bucket: bucket, key: key, handle: func(ctx context.Context, e *keyEntry) bool {
		if e == nil || (seen.ok && e.Revision == seen.rev) {
			return true
		}
		if !l.send(ctx, event(e)) {
			return false
		}
		seen.ok, seen.rev = true, e.Revision
		return true
	}}
}

// revSeen is the last revision of a key the link reported; owned by that key's watch.
type revSeen struct {
	ok  bool
	rev uint64
}

// targetFold folds the node and fleet target keys, each on its own watch, into the effective
// target, reported once both keys' initial values are in and whenever it changes.
type targetFold struct {
	l     *Link
	mu    sync.Mutex
	entry [2]*keyEntry // node, fleet; nil while absent or deleted
	ready [2]bool
}

func (l *Link) targetWatches(f *targetFold) []watchedKey {
	keys := [2]string{wire.NodeTargetKey(l.opts.Node), wire.FleetTargetKey}
	out := make([]watchedKey, 2)
	for i, key := range keys {
		out[i] = watchedKey{bucket: l.opts.Names.Targets(), key: key,
			// A watch started again forgets what the last one said: its key is unknown until
			// the initial value is in, and nothing is reported meanwhile.
			start: func() {
				f.mu.Lock()
				f.entry[i], f.ready[i] = nil, false
				f.mu.Unlock()
			},
			handle: func(ctx context.Context, e *keyEntry) bool {
				f.mu.Lock()
				defer f.mu.Unlock()
				if e == nil {
					f.ready[i] = true
				} else if e.Deleted {
					f.entry[i] = nil
				} else {
					f.entry[i] = e
				}
				if !f.ready[0] || !f.ready[1] {
					return true
				}
				return l.reportTarget(ctx, f.entry[0], f.entry[1])
			}}
	}
	return out
}

// reportTarget sends the effective target if it changed. Called with the fold's lock held, so
// the two target watches report one at a time.
func (l *Link) reportTarget(ctx context.Context, node, fleet *keyEntry) bool {
	eff := node
	if eff == nil {
		eff = fleet
	}
	var ev TargetChanged
	if eff != nil {
		ev.Key, ev.Revision = eff.Key, eff.Revision
	}
	if l.targetSeen && ev.Key == l.targetKey && ev.Revision == l.targetRev {
		return true
	}
	if eff != nil {
		t, err := wire.ParseTarget(eff.Value)
		if err != nil {
			ev.Err = fmt.Errorf("%s key %s revision %d: %w", l.opts.Names.Targets(), ev.Key, ev.Revision, err)
		} else {
			ev.Target = &t
		}
	}
	if !l.send(ctx, ev) {
		return false
	}
	l.targetSeen, l.targetKey, l.targetRev = true, ev.Key, ev.Revision
	return true
}

// WatchedSubjects are the KV subjects the link creates a consumer filtered to, one each, for a
// node: its declaration, its target, the fleet target and the withdrawal list. A node's
// permissions name each in $JS.API.CONSUMER.CREATE.<stream>.*.<subject>.
func WatchedSubjects(names wire.Names, node string) map[string]string {
	return map[string]string{
		kvSubject(names.Declarations(), node):                kvStream(names.Declarations()),
		kvSubject(names.Targets(), wire.NodeTargetKey(node)): kvStream(names.Targets()),
		kvSubject(names.Targets(), wire.FleetTargetKey):      kvStream(names.Targets()),
		kvSubject(names.Withdrawals(), wire.WithdrawalsKey):  kvStream(names.Withdrawals()),
	}
}
