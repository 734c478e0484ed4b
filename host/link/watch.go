package link

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// keyRef names one key of a bucket.
type keyRef struct{ bucket, key string }

func (r keyRef) subject() string { return kvSubject(r.bucket, r.key) }

// watchedKeys is what one watch follows — one key, or the two a keyFold folds — and what it does
// with their values. The keys of one watch are read in the order the server noticed their
// writes, by one goroutine: a fold sees the fleet key put before it sees the node key deleted
// after it (a rollout's completion), and never reports the gap between the two.
type watchedKeys struct {
	bucket string
	keys   []string
	// start is called before the first entry of every watch of the keys.
	start func()
	// handle takes each new value of a key. A nil entry says the values handed so far are all
	// the watch knows for now — the keys' initial values (which may be none), then each batch
	// of changes — so a fold reports then. It returns false when the session is over.
	handle func(ctx context.Context, e *keyEntry) bool
}

func (k watchedKeys) String() string { return kvSubject(k.bucket, strings.Join(k.keys, ",")) }

// watch keeps a watch on k open until ctx ends, retrying with backoff while the bucket is
// missing or the watch fails.
func (l *Link) watch(ctx context.Context, k watchedKeys) {
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
			l.log.Warn("link: cannot watch; retrying", "bucket", k.bucket, "key", strings.Join(k.keys, ","), "err", err)
			warned = true
		} else {
			l.log.Debug("link: cannot watch; retrying", "bucket", k.bucket, "key", strings.Join(k.keys, ","), "err", err, "in", backoff)
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

// watchOnce follows k until ctx ends or the watch fails: the keys' current values (none, a
// value, or a delete marker), the end-of-initial-values mark, then every change, a batch at a
// time.
func (l *Link) watchOnce(ctx context.Context, k watchedKeys, healthy func()) error {
	n, err := l.subscribeNotices(ctx, k)
	if err != nil {
		return err
	}
	defer n.stop()
	st, err := l.directStream(ctx, k.bucket)
	if err != nil {
		return err
	}
	if err := l.takeInitial(ctx, st, k, healthy); err != nil {
		return err
	}
	for {
		if err := n.wait(ctx); err != nil {
			return err
		}
		// Every key noticed is read before the batch is handed on, in k's order.
		for _, key := range n.take(k.keys) {
			if err := l.catchUp(ctx, st, k, key, n); err != nil {
				return err
			}
		}
		if !k.handle(ctx, nil) {
			return ctx.Err()
		}
	}
}

// notices are the write notices of one watch's keys, on one channel in the order the server
// sent them; pending are the keys noticed and not yet read.
type notices struct {
	ch      chan *nats.Msg
	subs    []*nats.Subscription
	prefix  string // the bucket's subjects' "$KV.<bucket>."
	pending map[string]bool
	dropped int
}

// subscribeNotices subscribes to each of k's keys, and waits until the server has the
// subscriptions: a write after the first get is noticed.
func (l *Link) subscribeNotices(ctx context.Context, k watchedKeys) (*notices, error) {
	n := &notices{ch: make(chan *nats.Msg, maxNotices), prefix: kvSubject(k.bucket, ""), pending: map[string]bool{}}
	for _, key := range k.keys {
		sub, err := l.nc.ChanSubscribe(kvSubject(k.bucket, key), n.ch)
		if err != nil {
			n.stop()
			return nil, fmt.Errorf("subscribe to %s: %w", kvSubject(k.bucket, key), err)
		}
		n.subs = append(n.subs, sub)
	}
	fctx, cancel := context.WithTimeout(ctx, l.opts.PublishTimeout)
	defer cancel()
	if err := l.nc.FlushWithContext(fctx); err != nil {
		n.stop()
		return nil, fmt.Errorf("subscribe to %s: %w", k, err)
	}
	return n, nil
}

func (n *notices) stop() {
	for _, s := range n.subs {
		s.Unsubscribe()
	}
}

func (n *notices) note(m *nats.Msg) { n.pending[strings.TrimPrefix(m.Subject, n.prefix)] = true }

// wait returns once a key is noticed (at once if one is pending), with every notice waiting
// taken in: one get answers them all.
func (n *notices) wait(ctx context.Context) error {
	if len(n.pending) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m := <-n.ch:
			n.note(m)
		}
	}
	for {
		select {
		case m := <-n.ch:
			n.note(m)
		default:
			// A notice dropped for a full channel may have been any key's: all are read.
			dropped := 0
			for _, s := range n.subs {
				d, _ := s.Dropped()
				dropped += d
			}
			if dropped != n.dropped {
				n.dropped = dropped
				for _, s := range n.subs {
					n.pending[strings.TrimPrefix(s.Subject, n.prefix)] = true
				}
			}
			return nil
		}
	}
}

// take returns the keys pending, in keys' order, and clears them.
func (n *notices) take(keys []string) []string {
	var out []string
	for _, k := range keys {
		if n.pending[k] {
			out = append(out, k)
			delete(n.pending, k)
		}
	}
	return out
}

// directStream is bucket's stream, which must allow direct gets.
func (l *Link) directStream(ctx context.Context, bucket string) (jetstream.Stream, error) {
	st, err := l.js.Stream(ctx, kvStream(bucket))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("KV bucket %s does not exist yet (mesh-release init creates it): %w", bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open KV bucket %s: %w", bucket, err)
	}
	if !st.CachedInfo().Config.AllowDirect {
		return nil, fmt.Errorf("KV bucket %s does not allow direct gets (its stream's allow_direct), which a node reads its keys with; recreate it with `mesh-release init`", bucket)
	}
	return st, nil
}

// takeInitial reads each of k's keys (never behind what the link has seen of it), hands on those
// that have a value, then the end-of-initial-values mark.
func (l *Link) takeInitial(ctx context.Context, st jetstream.Stream, k watchedKeys, healthy func()) error {
	entries := make([]*keyEntry, len(k.keys))
	for i, key := range k.keys {
		e, err := l.entryNotBehind(ctx, st, keyRef{k.bucket, key})
		if err != nil {
			return err
		}
		entries[i] = e
	}
	healthy()
	if k.start != nil {
		k.start()
	}
	for _, e := range entries {
		if e != nil && !l.take(ctx, k, e) {
			return ctx.Err()
		}
	}
	if !k.handle(ctx, nil) {
		return ctx.Err()
	}
	return nil
}

// catchUp reads key after a notice until the answer is past the revision the link has seen: on
// a cluster a direct get may be answered by a replica that has not stored the write yet. The
// pauses are staleRetries, cut short by a notice; after the last, the next write or reconnect
// catches up. A notice that the link had already read the write of is asked again the same
// way, holding the watch's other key up to the sum of the pauses: rare (two writes of one key
// within a get), and the price of never reading a fold's keys out of order.
func (l *Link) catchUp(ctx context.Context, st jetstream.Stream, k watchedKeys, key string, n *notices) error {
	r := keyRef{k.bucket, key}
	seen := l.floor(r)
	for try := 0; ; try++ {
		e, err := l.lastEntry(ctx, st, r)
		if err != nil {
			return err
		}
		if e != nil && e.Revision > seen {
			if !l.take(ctx, k, e) {
				return ctx.Err()
			}
			return nil
		}
		// The same revision (the write is not on the replica that answered yet), an older
		// one or none (a replica behind, a server catching up): asked again.
		if try == len(staleRetries) {
			if e == nil || e.Revision < seen {
				// Still behind: the watch starts again, which waits longer for the bus to
				// catch up, and takes what it then says (entryNotBehind).
				return fmt.Errorf("%s: the bus answers with %s, behind revision %d this node has seen", r.subject(), revisionText(e), seen)
			}
			return nil
		}
		t := time.NewTimer(staleRetries[try])
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case m := <-n.ch:
			t.Stop()
			n.note(m)
			delete(n.pending, key) // this get answers it
		case <-t.C:
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

// entryNotBehind is r's last value, asked again while it is behind the newest revision of r the
// link has seen (behindRetries).
func (l *Link) entryNotBehind(ctx context.Context, st jetstream.Stream, r keyRef) (*keyEntry, error) {
	floor := l.floor(r)
	for try := 0; ; try++ {
		e, err := l.lastEntry(ctx, st, r)
		if err != nil {
			return nil, err
		}
		if floor == 0 || (e != nil && e.Revision >= floor) {
			return e, nil
		}
		if try == len(behindRetries) {
			l.log.Warn("link: the bus still answers with an older value of a key than this node saw; taking it (was the bucket made again?)",
				"key", r.subject(), "answer", revisionText(e), "seen", floor)
			l.setFloor(r, 0)
			if e == nil {
				// Gone, as far as the bus now says.
				e = &keyEntry{Key: r.key, Deleted: true}
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

// take hands e to k and remembers its revision as the newest the link has seen of its key.
func (l *Link) take(ctx context.Context, k watchedKeys, e *keyEntry) bool {
	r := keyRef{k.bucket, e.Key}
	if e.Revision > l.floor(r) {
		l.setFloor(r, e.Revision)
	}
	return k.handle(ctx, e)
}

// floor is the newest revision of r the link has seen, in any session; 0 when none.
func (l *Link) floor(r keyRef) uint64 {
	l.floorsMu.Lock()
	defer l.floorsMu.Unlock()
	return l.floors[r.subject()]
}

func (l *Link) setFloor(r keyRef, rev uint64) {
	l.floorsMu.Lock()
	defer l.floorsMu.Unlock()
	if l.floors == nil {
		l.floors = map[string]uint64{}
	}
	l.floors[r.subject()] = rev
}

// lastEntry is r's last value on the bus, by a direct get of the last message on its subject;
// nil when the key was never written (or its history is gone).
func (l *Link) lastEntry(ctx context.Context, st jetstream.Stream, r keyRef) (*keyEntry, error) {
	m, err := st.GetLastMsgForSubject(ctx, r.subject())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		// The server drops a request the user may not make and answers nothing.
		return nil, fmt.Errorf("get %s: no answer; if the link is up, this node's user may not get its keys directly — a node enrolled while nodes followed their keys with consumers must enrol again (`mesh-host enrol --replace TOKEN`): %w", r.subject(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", r.subject(), err)
	}
	if m.Subject != r.subject() || m.Sequence == 0 {
		return nil, fmt.Errorf("get %s: the server answered with %s #%d", r.subject(), m.Subject, m.Sequence)
	}
	e := &keyEntry{Key: r.key, Revision: m.Sequence, Deleted: isDeleteMarker(m.Header)}
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
func (l *Link) revisionWatcher(bucket, key string, seen *revSeen, event func(*keyEntry) Event) watchedKeys {
	return watchedKeys{bucket: bucket, keys: []string{key}, handle: func(ctx context.Context, e *keyEntry) bool {
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

// keyFold folds a node's own key and the fleet's, followed by one watch, into the one in force
// (the node's while present): report is called once both keys' initial values are in and after
// every batch of changes, so a rollout's completion (the fleet key put, then the node's
// deleted) is reported as one change when both writes are in one batch, and as the node's value
// then the fleet's when they are not — never as the gap between them. The lock keeps a
// session's reports from overlapping a stopped one's.
type keyFold struct {
	mu    sync.Mutex
	keys  [2]string
	entry [2]*keyEntry // node, fleet; nil while absent or deleted
}

func (f *keyFold) watches(bucket string, keys [2]string, report func(ctx context.Context, node, fleet *keyEntry) bool) watchedKeys {
	f.keys = keys
	return watchedKeys{bucket: bucket, keys: keys[:],
		// A watch started again forgets what the last one said: the keys are unknown until
		// their initial values are in, and nothing is reported meanwhile.
		start: func() {
			f.mu.Lock()
			f.entry = [2]*keyEntry{}
			f.mu.Unlock()
		},
		handle: func(ctx context.Context, e *keyEntry) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			if e == nil {
				return report(ctx, f.entry[0], f.entry[1])
			}
			i := 0
			if e.Key == f.keys[1] {
				i = 1
			}
			if e.Deleted {
				f.entry[i] = nil
			} else {
				f.entry[i] = e
			}
			return true
		}}
}

// targetWatches follow the node's target key and the fleet's, folded into the effective target.
func (l *Link) targetWatches(f *keyFold) watchedKeys {
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
// declaration, its target, the fleet target, the withdrawal list, its window and the fleet's,
// the bus configuration and the rollout plan.
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
		kvSubject(names.Releases(), wire.BusKey):             kvStream(names.Releases()),
		kvSubject(names.Rollouts(), wire.PlanKey):            kvStream(names.Rollouts()),
	}
}
