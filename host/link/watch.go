package link

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// A node creates no JetStream consumer (docs/security.md, "A node creates no consumer"): a
// consumer's deliver subject is the creator's choice, and a push consumer delivering onto a
// heartbeat subject made the heartbeat stream store whatever the node could read. So each key
// the link follows is a plain subscription on the key's subject, which tells that the key was
// written, and a direct get of the key's last value, which says what it now holds and at which
// revision. The get runs once the subscription is in place (so no write falls between them),
// after every notice, and again in each new session, that is after every reconnect and when a
// heartbeat is answered after one was not (PublishHeartbeat: the server stayed, the bus behind
// it was out of reach).
const (
	// maxNotices is how many write notices wait to be acted on; more are dropped, harmlessly:
	// the ones waiting are each followed by a get of the key's latest value.
	maxNotices = 64
)

// staleRetries are the pauses before the link asks again when a notice came and the get still
// returned the revision already seen: on a cluster a direct get may be answered by a replica
// that has not stored the write yet. Bounded: after the last, the next write or reconnect
// catches up.
var staleRetries = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second, 4 * time.Second}

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
		healthy := func() { backoff, warned = l.opts.RetryMin, false }
		var err error
		if l.legacy.Load() {
			err = l.watchOnceByConsumer(ctx, k, healthy)
		} else {
			err = l.watchOnce(ctx, k, healthy)
		}
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

// watchOnce follows k until ctx ends or the watch fails: the key's current value (none, a value,
// or a delete marker), the end-of-initial-values mark, then every change.
func (l *Link) watchOnce(ctx context.Context, k watchedKey, healthy func()) error {
	subject := kvSubject(k.bucket, k.key)
	notices := make(chan *nats.Msg, maxNotices)
	sub, err := l.nc.ChanSubscribe(subject, notices)
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	defer sub.Unsubscribe()
	// The subscription is on the server before the first get: a write after the get is noticed.
	fctx, cancel := context.WithTimeout(ctx, l.opts.PublishTimeout)
	err = l.nc.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", subject, err)
	}
	st, err := l.js.Stream(ctx, kvStream(k.bucket))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("KV bucket %s does not exist yet (mesh-release init creates it): %w", k.bucket, err)
	}
	if err != nil {
		return fmt.Errorf("open KV bucket %s: %w", k.bucket, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return fmt.Errorf("KV bucket %s does not allow direct gets (its stream's allow_direct), which a node reads its keys with; recreate it with `mesh-release init`", k.bucket)
	}
	e, err := l.entryNotBehind(ctx, st, k)
	if err != nil {
		return err
	}
	healthy()
	if k.start != nil {
		k.start()
	}
	if e != nil && !l.take(ctx, k, e) {
		return ctx.Err()
	}
	if !k.handle(ctx, nil) {
		return ctx.Err()
	}
	seen := l.floor(k)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-notices:
		}
		// One get answers every notice waiting.
		for drained := false; !drained; {
			select {
			case <-notices:
			default:
				drained = true
			}
		}
		for try := 0; ; try++ {
			e, err := l.lastEntry(ctx, st, k)
			if err != nil {
				return err
			}
			if e != nil && e.Revision > seen {
				seen = e.Revision
				if !l.take(ctx, k, e) {
					return ctx.Err()
				}
				break
			}
			// The same revision (the write is not on the replica that answered yet), an older
			// one or none (a replica behind, a server catching up): asked again.
			if try == len(staleRetries) {
				if e == nil || e.Revision < seen {
					// Still behind: the watch starts again, which waits longer for the bus to
					// catch up, and takes what it then says (entryNotBehind).
					return fmt.Errorf("%s: the bus answers with %s, behind revision %d this node has seen", subject, revisionText(e), seen)
				}
				break
			}
			t := time.NewTimer(staleRetries[try])
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-notices:
				t.Stop()
			case <-t.C:
			}
		}
	}
}

// behindRetries are the pauses before a watch asks again when its first get answers with an
// older revision than the link has seen of the key, or none: a replica behind (a server back
// with an empty disk catches up in seconds). After the last, about a minute in all, the answer
// is taken: the bucket was made again, or the key's history purged.
var behindRetries = append(append([]time.Duration{}, staleRetries...),
	5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second,
	5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second)

// entryNotBehind is k's last value, asked again while it is behind the newest revision of k
// the link has seen (behindRetries).
func (l *Link) entryNotBehind(ctx context.Context, st jetstream.Stream, k watchedKey) (*keyEntry, error) {
	floor := l.floor(k)
	for try := 0; ; try++ {
		e, err := l.lastEntry(ctx, st, k)
		if err != nil {
			return nil, err
		}
		if floor == 0 || (e != nil && e.Revision >= floor) {
			return e, nil
		}
		if try == len(behindRetries) {
			l.log.Warn("link: the bus still answers with an older value of a key than this node saw; taking it (was the bucket made again?)",
				"key", kvSubject(k.bucket, k.key), "answer", revisionText(e), "seen", floor)
			l.setFloor(k, 0)
			if e == nil {
				// Gone, as far as the bus now says.
				e = &keyEntry{Key: k.key, Deleted: true}
			}
			return e, nil
		}
		t := time.NewTimer(behindRetries[try])
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func revisionText(e *keyEntry) string {
	if e == nil {
		return "no value"
	}
	return fmt.Sprintf("revision %d", e.Revision)
}

// take hands e to k and remembers its revision as the newest the link has seen of k.
func (l *Link) take(ctx context.Context, k watchedKey, e *keyEntry) bool {
	if e.Revision > l.floor(k) {
		l.setFloor(k, e.Revision)
	}
	return k.handle(ctx, e)
}

// floor is the newest revision of k the link has seen, in any session; 0 when none.
func (l *Link) floor(k watchedKey) uint64 {
	l.floorsMu.Lock()
	defer l.floorsMu.Unlock()
	return l.floors[kvSubject(k.bucket, k.key)]
}

func (l *Link) setFloor(k watchedKey, rev uint64) {
	l.floorsMu.Lock()
	defer l.floorsMu.Unlock()
	if l.floors == nil {
		l.floors = map[string]uint64{}
	}
	l.floors[kvSubject(k.bucket, k.key)] = rev
}

// lastEntry is k's last value on the bus, by a direct get of the last message on its subject;
// nil when the key was never written (or its history is gone).
func (l *Link) lastEntry(ctx context.Context, st jetstream.Stream, k watchedKey) (*keyEntry, error) {
	m, err := st.GetLastMsgForSubject(ctx, kvSubject(k.bucket, k.key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		// The server drops a request the user may not make and answers nothing.
		return nil, fmt.Errorf("get %s: no answer; if the link is up, this node's user may not get its keys directly — a node enrolled while nodes followed their keys with consumers must enrol again (`mesh-host enrol --replace TOKEN`): %w", kvSubject(k.bucket, k.key), err)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", kvSubject(k.bucket, k.key), err)
	}
	if m.Subject != kvSubject(k.bucket, k.key) || m.Sequence == 0 {
		return nil, fmt.Errorf("get %s: the server answered with %s #%d", kvSubject(k.bucket, k.key), m.Subject, m.Sequence)
	}
	e := &keyEntry{Key: k.key, Revision: m.Sequence, Deleted: isDeleteMarker(m.Header)}
	if !e.Deleted {
		e.Value = m.Data
	}
	return e, nil
}

// isDeleteMarker tells a KV delete or purge, or a marker the server left when the value aged
// out, from a value (as nats.go's KV watch does).
func isDeleteMarker(h nats.Header) bool {
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

// keyFold folds a node's own key and the fleet's, each on its own watch, into the one in force
// (the node's while present): report is called once both keys' initial values are in and on
// every change after, with the fold's lock held, so the two watches report one at a time.
type keyFold struct {
	mu    sync.Mutex
	entry [2]*keyEntry // node, fleet; nil while absent or deleted
	ready [2]bool
}

func (f *keyFold) watches(bucket string, keys [2]string, report func(ctx context.Context, node, fleet *keyEntry) bool) []watchedKey {
	out := make([]watchedKey, 2)
	for i, key := range keys {
		out[i] = watchedKey{bucket: bucket, key: key,
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
				switch {
				case e == nil:
					f.ready[i] = true
				case e.Deleted:
					f.entry[i] = nil
				default:
					f.entry[i] = e
				}
				if !f.ready[0] || !f.ready[1] {
					return true
				}
				return report(ctx, f.entry[0], f.entry[1])
			}}
	}
	return out
}

// targetWatches follow the node's target key and the fleet's, folded into the effective target.
func (l *Link) targetWatches(f *keyFold) []watchedKey {
	return f.watches(l.opts.Names.Targets(), [2]string{wire.NodeTargetKey(l.opts.Node), wire.FleetTargetKey}, l.reportTarget)
}

// reportTarget sends the effective target if it changed (keyFold's report).
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

// WatchedSubjects are the KV subjects the link follows for a node, each with its stream: its
// declaration, its target, the fleet target, the withdrawal list, and its window and the fleet's.
// A node's permissions let it subscribe to each and get its last value directly
// ($JS.API.DIRECT.GET.<stream>.<subject>).
func WatchedSubjects(names wire.Names, node string) map[string]string {
	return map[string]string{
		kvSubject(names.Declarations(), node):                kvStream(names.Declarations()),
		kvSubject(names.Targets(), wire.NodeTargetKey(node)): kvStream(names.Targets()),
		kvSubject(names.Targets(), wire.FleetTargetKey):      kvStream(names.Targets()),
		kvSubject(names.Withdrawals(), wire.WithdrawalsKey):  kvStream(names.Withdrawals()),
		kvSubject(names.Targets(), wire.NodeWindowKey(node)): kvStream(names.Targets()),
		kvSubject(names.Targets(), wire.FleetWindowKey):      kvStream(names.Targets()),
	}
}
