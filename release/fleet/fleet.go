// Package fleet is the control side's view of the fleet: every node's last heartbeat, as rows to
// scan.
//
// The heartbeats are read from the heartbeat stream. In the rows, nodes gone silent stand out, and
// each node's STATE says what it is doing (rolled back, refused, fetching, on trial, …), judged
// from its last heartbeat by the rules in status.go, the first match winning.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// DefaultSilentAfter is how long a node may go unheard before it is marked silent: three of the
// host's default 30 s heartbeat intervals.
const DefaultSilentAfter = 90 * time.Second

// Entry is one node's last heartbeat as the stream holds it.
type Entry struct {
	Node      string         // from the subject the heartbeat was published on
	Heard     time.Time      // when the server stored it (not the node's clock)
	Heartbeat wire.Heartbeat // zero when Err is set
	Err       error          // the heartbeat could not be read
}

// Read returns every node's last heartbeat, in stream order.
func Read(ctx context.Context, js jetstream.JetStream, n wire.Names) ([]Entry, error) {
	var out []Entry
	// A heartbeat stored while the snapshot is read is delivered too: keep one entry per
	// node, the newest, where its first one was.
	at := map[string]int{}
	err := follow(ctx, js, n, n.HeartbeatWildcard(), false, func(e Entry) {
		if i, ok := at[e.Node]; ok {
			out[i] = e
			return
		}
		at[e.Node] = len(out)
		out = append(out, e)
	}, nil)
	return out, err
}

// Watch calls fn with every node's last heartbeat, then calls ready once, then keeps calling fn
// for each heartbeat as it arrives (pushed by the server) until ctx ends. fn and ready are
// called from one goroutine at a time. It returns ctx's error or why the stream could not be
// read.
func Watch(ctx context.Context, js jetstream.JetStream, n wire.Names, fn func(Entry), ready func()) error {
	return follow(ctx, js, n, n.HeartbeatWildcard(), true, fn, ready)
}

// WatchNode is Watch for one node: its last heartbeat (when the stream holds one), then ready,
// then each of its heartbeats as it arrives. The server sends this node's only.
func WatchNode(ctx context.Context, js jetstream.JetStream, n wire.Names, node string, fn func(Entry), ready func()) error {
	return follow(ctx, js, n, n.Heartbeat(node), true, fn, ready)
}

// follow reads the last heartbeat of each subject filter matches, then, when live, each new one.
// Its phases: whether there is anything to read, the consumer opened, a check that its server is
// still there (live), then the read (readHeartbeats).
func follow(ctx context.Context, js jetstream.JetStream, n wire.Names, filter string, live bool, fn func(Entry), ready func()) error {
	if ready == nil {
		ready = func() {}
	}
	st, err := heartbeatStream(ctx, js, n)
	if err != nil {
		return err
	}
	empty, err := holdsNone(ctx, st, n, filter)
	if err != nil || (empty && !live) {
		return err
	}
	cons, err := js.OrderedConsumer(ctx, n.HeartbeatStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return fmt.Errorf("fleet: read %s: %w", n.HeartbeatStream(), err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("fleet: read %s: %w", n.HeartbeatStream(), err)
	}
	defer msgs.Stop()
	// Next is also given a context: Stop alone did not always end it when the consumer's server
	// had just restarted (the ordered consumer's reset made a new subscription after the stop,
	// and Next waited on it for ever, holding a rollout's end).
	nctx, ncancel := context.WithCancel(ctx)
	defer ncancel()
	stop := context.AfterFunc(ctx, msgs.Stop)
	defer stop()
	var lost lostConsumer
	if live {
		checkCtx, cancelCheck := context.WithCancel(ctx)
		defer cancelCheck()
		go lost.watch(checkCtx, cons, func() { ncancel(); msgs.Stop() })
	}
	h := heartbeatRead{st: st, n: n, filter: filter, live: live, fn: fn, ready: ready, lost: &lost}
	return h.read(ctx, nctx, msgs, empty)
}

// holdsNone reports whether the stream holds no heartbeat filter matches. The whole fleet: the
// stream's count says (listing its subjects would name every node). One node: whether its
// subject holds a message.
func holdsNone(ctx context.Context, st jetstream.Stream, n wire.Names, filter string) (bool, error) {
	var opts []jetstream.StreamInfoOpt
	if filter != n.HeartbeatWildcard() {
		opts = append(opts, jetstream.WithSubjectFilter(filter))
	}
	info, err := st.Info(ctx, opts...)
	if err != nil {
		return false, fmt.Errorf("fleet: stream %s: %w", n.HeartbeatStream(), err)
	}
	return info.State.Msgs == 0 || (len(opts) > 0 && len(info.State.Subjects) == 0), nil
}

// lostConsumer is a live watch's check on its consumer. The consumer lives on one server. When
// that server dies with no word (SIGKILL, a machine lost), the client is not told: the watch
// waited, deaf, long past a rollout's window. Its consumer is asked after every ConsumerCheck;
// when two asks in a row go unanswered the watch ends, so the caller makes a new one, on a
// server that is there.
type lostConsumer struct {
	mu  sync.Mutex
	err error
}

// watch checks cons until ctx ends; when it finds it gone it records why and calls end.
func (l *lostConsumer) watch(ctx context.Context, cons jetstream.Consumer, end func()) {
	if err := checkConsumer(ctx, cons); err != nil {
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		end()
	}
}

// why is why the consumer was found gone, or nil.
func (l *lostConsumer) why() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// heartbeatRead is follow's read of its consumer's messages.
type heartbeatRead struct {
	st        jetstream.Stream
	n         wire.Names
	filter    string
	live      bool
	fn        func(Entry)
	ready     func()
	lost      *lostConsumer
	caughtUp  bool
	delivered map[string]bool // subjects delivered before catching up
}

// read calls fn with each message until it has caught up with the last heartbeat of every
// subject (then ready; and, unless live, it returns), then with each new one until ctx ends.
// empty: the stream held nothing to catch up with.
func (h *heartbeatRead) read(ctx, nctx context.Context, msgs jetstream.MessagesContext, empty bool) error {
	h.delivered = make(map[string]bool)
	if empty {
		h.caughtUp = true
		h.ready()
	}
	for {
		m, err := msgs.Next(jetstream.NextContext(nctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if lost := h.lost.why(); lost != nil {
				err = lost
			}
			return fmt.Errorf("fleet: read %s: %w", h.n.HeartbeatStream(), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("fleet: read %s: %w", h.n.HeartbeatStream(), err)
		}
		h.fn(entryOf(h.n, m.Subject(), md.Timestamp, m.Data()))
		if h.caughtUp {
			continue
		}
		h.delivered[m.Subject()] = true
		if md.NumPending == 0 {
			h.caughtUp = true
			if err := fillMissed(ctx, h.st, h.n, h.filter, h.delivered, h.fn); err != nil {
				return err
			}
			h.ready()
			if !h.live {
				return nil
			}
		}
	}
}

// ConsumerCheck is how often a live watch asks after its consumer, each ask waiting as long.
const ConsumerCheck = 2 * time.Second

// checkConsumer asks after cons every ConsumerCheck until ctx ends; it returns an error once two
// asks in a row went unanswered or were refused (the consumer, or its server, is gone).
func checkConsumer(ctx context.Context, cons jetstream.Consumer) error {
	t := time.NewTicker(ConsumerCheck)
	defer t.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// An ordered consumer's Info waits for the consumer's lock, which a reset (nats.go's own
		// recovery) holds while it retries: the ask is bounded here, not by its context alone.
		answer := make(chan error, 1)
		actx, cancel := context.WithTimeout(ctx, ConsumerCheck)
		go func() { _, err := cons.Info(actx); answer <- err }()
		var err error
		select {
		case err = <-answer:
		case <-actx.Done():
			err = actx.Err()
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			failed = 0
			continue
		}
		if failed++; failed == 2 {
			return fmt.Errorf("its consumer does not answer (%w): its server may be gone", err)
		}
	}
}

func entryOf(n wire.Names, subject string, heard time.Time, data []byte) Entry {
	node := nodeOf(n, subject)
	e := Entry{Node: node, Heard: heard}
	hb, err := wire.ParseHeartbeat(data)
	switch {
	case err != nil:
		e.Err = err
	case hb.Node != node:
		e.Err = fmt.Errorf("heartbeat on %s names node %q", subject, hb.Node)
	default:
		e.Heartbeat = hb
	}
	return e
}

// View holds the latest entry per node, and remembers the nodes it saw restart; safe for
// concurrent use.
type View struct {
	mu       sync.Mutex
	entries  map[string]Entry
	restarts map[string]restart
}

// restart is a View seeing a node start its running version again: a heartbeat of the same
// version as the one before it, with a smaller uptime.
type restart struct {
	seen    time.Time // when the server stored the heartbeat that showed it
	running string
}

// NewView returns an empty view.
func NewView() *View {
	return &View{entries: make(map[string]Entry), restarts: make(map[string]restart)}
}

// Update records e as its node's latest word, unless the view already has a newer one. A
// heartbeat that runs the same version as the one before it with a smaller uptime_s is a
// restart, said in the node's status for RestartShownFor; one running another version ends it.
func (v *View) Update(e Entry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.entries[e.Node]
	if ok && old.Heard.After(e.Heard) {
		return
	}
	v.entries[e.Node] = e
	if !ok || old.Err != nil || e.Err != nil {
		return
	}
	prev, hb := old.Heartbeat, e.Heartbeat
	switch {
	case hb.Running == prev.Running && hb.UptimeS < prev.UptimeS:
		v.restarts[e.Node] = restart{seen: e.Heard, running: hb.Running}
	case hb.Running != v.restarts[e.Node].running:
		delete(v.restarts, e.Node)
	}
}

// Len is the number of nodes in the view.
func (v *View) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.entries)
}

// Rows returns the view's rows as of now (see Rows); a node the view saw restart within
// RestartShownFor, still on the version it restarted, reads "restarting".
func (v *View) Rows(now time.Time, silentAfter time.Duration) []Row {
	return v.RowsWith(now, RowOptions{SilentAfter: silentAfter})
}

// RowsWith is Rows judged with o (see RowsWith).
func (v *View) RowsWith(now time.Time, o RowOptions) []Row {
	v.mu.Lock()
	es := make([]Entry, 0, len(v.entries))
	restarted := make(map[string]bool)
	for node, e := range v.entries {
		es = append(es, e)
		if r, ok := v.restarts[node]; ok && e.Err == nil && e.Heartbeat.Running == r.running && now.Sub(r.seen) < RestartShownFor {
			restarted[node] = true
		}
	}
	v.mu.Unlock()
	return rows(es, now, o, restarted)
}

// fillMissed reads, one by one, the last heartbeat of every node the stream holds but the
// consumer did not deliver before it caught up. A node that heartbeats while the stream is read
// has its last message replaced (one per subject); the consumer can report nothing pending
// before it reaches the replacement, and the node would be missing from the snapshot.
func fillMissed(ctx context.Context, st jetstream.Stream, n wire.Names, filter string, seen map[string]bool, fn func(Entry)) error {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("fleet: list the nodes in %s: %w", n.HeartbeatStream(), err)
	}
	for subject := range info.State.Subjects {
		if seen[subject] {
			continue
		}
		m, err := st.GetLastMsgForSubject(ctx, subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // gone since (max age)
		}
		if err != nil {
			return fmt.Errorf("fleet: read %s's last heartbeat in %s: %w", nodeOf(n, subject), n.HeartbeatStream(), err)
		}
		fn(entryOf(n, subject, m.Time, m.Data))
	}
	return nil
}
