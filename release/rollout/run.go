package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// Run drives rollout id — held by this controller, or taken over as 0006 allows — until its
// status is final, and returns the final state: err is nil for completed, halted, aborted and
// superseded. It returns a *HeldError when another live controller holds it. If ctx ends first,
// it releases its lease (best effort) and returns the state and ctx.Err(): the rollout stays
// running, and Resume continues it.
func (c *Controller) Run(ctx context.Context, id string) (State, error) {
	s, err := openStore(ctx, c.cfg.JS, c.cfg.Names, c.signer, c.log)
	if err != nil {
		return State{}, err
	}
	st, rev, err := s.get(ctx, id)
	if err != nil {
		return State{}, err
	}
	if st.Status.Final() {
		return restore(ctx, s, st, rev, c.cfg.Workers)
	}
	// The targets of an urgent rollout are signed urgent, also by a controller that resumes it.
	s.w.Signer.Urgent = st.Urgent
	r := c.newRunner(s, st, rev)
	if err := r.acquire(ctx); errors.Is(err, errFinal) {
		return restore(ctx, s, r.st, r.rev, c.cfg.Workers)
	} else if err != nil {
		return r.st, err
	}
	defer c.keeping()()
	return r.drive(ctx)
}

// errFinal: the rollout ended while this controller tried to take it.
var errFinal = errors.New("the rollout has ended")

// runner is one controller acting on one rollout.
type runner struct {
	c *Controller
	s *store

	// mu guards st, rev and stop against a renewal running beside a long bus operation (see
	// renewing); otherwise only the main loop touches them.
	mu   sync.Mutex
	st   State
	rev  uint64
	stop error // someone else changed the rollout: see conflict

	version     string
	window      time.Duration
	soak        time.Duration
	silentAfter time.Duration
	tracks      map[string]*track

	// The view of the heartbeats: judged only while up — the connection there and the watch
	// caught up with every node's last heartbeat, which a rebuilt watch reads from the stream at
	// once. The time the bus was away is not silence: a node could not be heard then (aways).
	watchReady, connected, wasUp, everUp bool
	downSince                            time.Time
	aways                                []span        // the bus's outages during this run, the newest maxAways
	paused                               time.Duration // the bus was away during this batch

	// The batch in progress.
	judging                                 bool
	judgedN, confirmedN, soakedN, troubledN int
	lastProgress                            time.Time // when progress was last looked at
	said                                    progressSaid
}

func (c *Controller) newRunner(s *store, st State, rev uint64) *runner {
	r := &runner{c: c, s: s, st: st, rev: rev, version: st.Version,
		window: secsDur(st.WindowS), soak: secsDur(st.SoakS), silentAfter: secsDur(st.SilentAfterS),
		tracks: make(map[string]*track, len(st.Nodes))}
	for _, n := range st.Nodes {
		r.tracks[n] = &track{}
	}
	return r
}

// acquire makes this controller the holder, or says who holds it.
func (r *runner) acquire(ctx context.Context) error {
	for range 10 {
		now := time.Now().UTC()
		ok, why := r.c.mayTake(r.st.Holder, now)
		if !ok {
			return &HeldError{ID: r.st.ID, Holder: *r.st.Holder}
		}
		since := now
		if r.c.mine(r.st.Holder) {
			since = r.st.Holder.Since
		}
		next := r.st
		next.Holder, next.Updated = r.c.holder(since, now), now
		rev, err := r.s.saveState(ctx, next, r.rev)
		if errors.Is(err, errConflict) {
			if r.st, r.rev, err = r.s.get(ctx, r.st.ID); err != nil {
				return err
			}
			if r.st.Status.Final() {
				return errFinal
			}
			continue
		}
		if err != nil {
			return err
		}
		r.st, r.rev = next, rev
		if why != "" {
			msg := fmt.Sprintf("resumed rollout %s of %s at batch %d of %d; %s", r.st.ID, r.version, min(r.st.Current+1, len(r.st.Batches)), len(r.st.Batches), why)
			r.c.emit(&r.st, Event{Kind: EventResumed, Batch: min(r.st.Current+1, len(r.st.Batches)), Batches: len(r.st.Batches), Message: msg})
		}
		return nil
	}
	return fmt.Errorf("rollout %s kept changing while this controller tried to take it", r.st.ID)
}

// write applies change to the state and stores it by compare-and-set, renewing the lease. A
// write that loses the race reads the rollout again and stops the run (see conflict).
func (r *runner) write(ctx context.Context, change func(st *State)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writeLocked(ctx, change)
}

func (r *runner) writeLocked(ctx context.Context, change func(st *State)) error {
	if r.stop != nil {
		return r.stop
	}
	now := time.Now().UTC()
	next := r.st
	next.Batches = append([]Batch(nil), r.st.Batches...)
	change(&next)
	since := now
	if r.st.Holder != nil {
		since = r.st.Holder.Since
	}
	next.Holder, next.Updated = r.c.holder(since, now), now
	rev, err := r.s.saveState(ctx, next, r.rev)
	if errors.Is(err, errConflict) {
		r.stop = r.conflict(ctx)
		return r.stop
	}
	if err != nil {
		return err
	}
	r.st, r.rev = next, rev
	return nil
}

// conflict reads the rollout that changed under this controller and says why it must stop.
func (r *runner) conflict(ctx context.Context) error {
	st, rev, err := r.s.get(ctx, r.st.ID)
	if err != nil {
		return err
	}
	switch {
	case st.Status == StatusAborted || st.Status == StatusSuperseded:
		r.st, r.rev = st, rev
		return &errStopped{State: st}
	case st.Holder != nil && !r.c.mine(st.Holder):
		return &HeldError{ID: st.ID, Holder: *st.Holder}
	}
	return fmt.Errorf("rollout %s was changed by another writer while this controller held it (now %s); run `mesh-release rollout resume`", st.ID, st.Status)
}

// drive runs the rollout to its end, or until ctx ends or someone else takes it.
func (r *runner) drive(ctx context.Context) (State, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan heartbeatMsg, 1024)
	keys := make(chan uint64, 64)
	var wg sync.WaitGroup
	wg.Add(2)
	id := r.st.ID
	go func() { defer wg.Done(); r.followHeartbeats(rctx, msgs) }()
	go func() { defer wg.Done(); r.followKey(rctx, id, keys) }()
	st, err := r.loop(rctx, msgs, keys)
	cancel()
	wg.Wait()

	r.mu.Lock()
	stop := r.stop
	r.mu.Unlock()
	var stopped *errStopped
	switch {
	case errors.As(stop, &stopped):
		return r.stopped(ctx, stopped.State)
	case stop != nil:
		return r.st, stop
	case err == nil:
		return st, nil
	case ctx.Err() != nil:
		r.release()
		return r.st, ctx.Err()
	}
	return r.st, err
}

// stopped ends a run whose rollout someone else ended: an abort (the batch is set back again
// here too: targets this controller set after the abort's own restore must not stay) or a
// supersede.
func (r *runner) stopped(ctx context.Context, st State) (State, error) {
	switch st.Status {
	case StatusAborted:
		r.c.emit(&st, Event{Kind: EventAborted, Batch: min(st.Current+1, len(st.Batches)), Batches: len(st.Batches), Message: abortedMessage(st)})
		st.Restored = false
		return restore(ctx, r.s, st, r.rev, r.c.cfg.Workers)
	case StatusSuperseded:
		r.c.emit(&st, Event{Kind: EventSuperseded, Message: supersededMessage(st)})
	}
	return st, nil
}

// release gives the lease up, so that another controller may resume at once. It reads the
// rollout first: a write cut short by the ending context may have landed all the same.
func (r *runner) release() {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stop != nil || r.st.Status.Final() {
		return
	}
	for range 3 {
		st, rev, err := r.s.get(ctx, r.st.ID)
		if err != nil || st.Status.Final() || !r.c.mine(st.Holder) {
			return
		}
		st.Holder, st.Updated = nil, time.Now().UTC()
		if rev, err = r.s.saveState(ctx, st, rev); err == nil {
			r.st, r.rev = st, rev
			return
		}
		r.c.log.Warn("could not release the lease; it lapses by itself", "rollout", st.ID, "err", err)
	}
}

// renewing runs op — a long bus operation of the main loop, such as setting a batch's targets —
// while renewing the lease every third of it. If a renewal finds that someone else changed the
// rollout, op's context is cancelled and the reason returned. A renewal under way when op ends
// is let finish on ctx, not cut short with op's context: cut short, its write may land all the
// same (a loaded server answers late), and the controller, not knowing the revision it made,
// would take its own next write's conflict for another writer.
func (r *runner) renewing(ctx context.Context, op func(ctx context.Context) error) error {
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	opDone, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.c.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-opDone:
				return
			case <-octx.Done():
				return
			case <-t.C:
			}
			if err := r.write(ctx, func(*State) {}); err != nil && r.stopErr() != nil {
				cancel()
				return
			}
		}
	}()
	err := op(octx)
	close(opDone)
	<-done
	if stop := r.stopErr(); stop != nil {
		return stop
	}
	return err
}

func (r *runner) stopErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stop
}

// followKey reports each revision of the rollout's key, so that an abort, a supersede or a
// takeover is noticed at once rather than at the next write.
func (r *runner) followKey(ctx context.Context, id string, revs chan<- uint64) {
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		back := reconnected(wctx, r.c.cfg.JS.Conn())
		w, err := r.s.rollouts.Watch(wctx, stateKey(id), jetstream.MetaOnly())
		if err != nil {
			cancel()
			sleep(ctx, time.Second)
			continue
		}
	read:
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok {
					break read
				}
				if e == nil {
					continue
				}
				select {
				case revs <- e.Revision():
				case <-ctx.Done():
				}
			case <-back:
				break read
			case <-ctx.Done():
				break read
			}
		}
		_ = w.Stop()
		cancel()
		sleep(ctx, 100*time.Millisecond)
	}
}

type heartbeatMsg struct {
	entry fleet.Entry
	ready bool // the watch has caught up with every node's last word
	down  bool // the watch stopped; it is being re-established
}

// followHeartbeats pushes every heartbeat, re-establishing the watch whenever it dies (a server
// restart takes the consumer with it).
func (r *runner) followHeartbeats(ctx context.Context, msgs chan<- heartbeatMsg) {
	send := func(m heartbeatMsg) {
		select {
		case msgs <- m:
		case <-ctx.Done():
		}
	}
	backoff := 100 * time.Millisecond
	for {
		err := fleet.Watch(ctx, r.c.cfg.JS, r.c.cfg.Names, func(e fleet.Entry) { send(heartbeatMsg{entry: e}) },
			func() { backoff = 100 * time.Millisecond; send(heartbeatMsg{ready: true}) })
		if ctx.Err() != nil {
			return
		}
		r.c.log.Warn("the heartbeat watch stopped; re-establishing it", "err", err)
		send(heartbeatMsg{down: true})
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// loop judges the batches one after the other until the rollout ends.
func (r *runner) loop(ctx context.Context, msgs <-chan heartbeatMsg, keys <-chan uint64) (State, error) {
	tick := time.NewTicker(r.c.cfg.Tick)
	defer tick.Stop()
	lease := time.NewTicker(r.c.cfg.Lease / 3)
	defer lease.Stop()
	r.connected = r.c.cfg.JS.Conn().IsConnected()
	timeCheck := false
	for {
		if r.st.Current >= len(r.st.Batches) {
			return r.complete(ctx)
		}
		now := time.Now()
		if !r.judging && r.wasUp {
			if err := r.begin(ctx); err != nil {
				return r.st, err
			}
			timeCheck = true
		}
		if r.judging {
			if trouble := r.troubles(now, timeCheck); len(trouble) > 0 {
				return r.halt(ctx, trouble)
			}
			if r.soakedN == r.judgedN {
				if err := r.batchDone(ctx); err != nil {
					return r.st, err
				}
				continue
			}
			if p := r.c.cfg.Progress; p > 0 && now.Sub(r.lastProgress) >= p {
				r.progress(now, p)
			}
		}
		timeCheck = false
		select {
		case m := <-msgs:
			r.heard(m)
		case <-tick.C:
			r.connected = r.c.cfg.JS.Conn().IsConnected()
			r.updateUp(time.Now())
			timeCheck = true
		case <-lease.C:
			if err := r.write(ctx, func(*State) {}); err != nil {
				if stop := r.stopErr(); stop != nil {
					return r.st, stop
				}
				r.c.log.Warn("could not renew the lease", "rollout", r.st.ID, "err", err)
			}
		case rev := <-keys:
			r.mu.Lock()
			if rev > r.rev && r.stop == nil {
				r.stop = r.conflict(ctx)
			}
			stop := r.stop
			r.mu.Unlock()
			if stop != nil {
				return r.st, stop
			}
		case <-ctx.Done():
			return r.st, ctx.Err()
		}
	}
}

// updateUp follows whether the heartbeats can be trusted: the watch caught up and the
// connection there.
func (r *runner) updateUp(now time.Time) {
	up := r.watchReady && r.connected
	if up == r.wasUp {
		return
	}
	r.wasUp = up
	if !up {
		r.downSince = now
		r.c.log.Warn("the bus is away; judging paused", "rollout", r.st.ID)
		return
	}
	if r.everUp {
		r.paused += now.Sub(r.downSince)
		if len(r.aways) == maxAways {
			r.aways = r.aways[1:]
		}
		r.aways = append(r.aways, span{r.downSince, now})
		r.c.log.Info("the bus is back; judging resumes", "rollout", r.st.ID, "away", now.Sub(r.downSince).Round(time.Millisecond))
	}
	r.everUp = true
}

// span is a time the bus was away.
type span struct{ from, to time.Time }

// maxAways bounds the outages a runner remembers: a node unheard since before the oldest is
// judged on its plain silence, which an outage older than 64 others hardly changes.
const maxAways = 64

// unheard is how long a node last heard at heard has been unheard by now while the bus was up:
// the time since, less the outages within it. The grace of --silent-after after every outage
// that this replaces held a rollout up to 90 s after a server was lost (issue 27 §1.3).
func (r *runner) unheard(heard, now time.Time) time.Duration {
	d := now.Sub(heard)
	for _, a := range r.aways {
		from, to := a.from, a.to
		if from.Before(heard) {
			from = heard
		}
		if to.After(now) {
			to = now
		}
		if to.After(from) {
			d -= to.Sub(from)
		}
	}
	return d
}

func (r *runner) heard(m heartbeatMsg) {
	switch {
	case m.down:
		r.watchReady = false
		r.updateUp(time.Now())
		return
	case m.ready:
		r.watchReady = true
		r.updateUp(time.Now())
		return
	}
	t := r.tracks[m.entry.Node]
	if t == nil {
		return
	}
	r.note(m.entry.Node, t, t.observe(m.entry, r.version, r.soak))
}

// note counts a node's change and says it.
func (r *runner) note(node string, t *track, ch change) {
	i := r.st.Current
	switch ch {
	case changeTrouble:
		r.troubledN++
	case changeConfirmed:
		r.confirmedN++
		r.c.emit(&r.st, Event{Kind: EventConfirmed, Batch: i + 1, Batches: len(r.st.Batches), BatchName: r.st.Batches[i].Name, Node: node,
			Nodes: r.judgedN, Confirmed: r.confirmedN, Soaked: r.soakedN,
			Message: fmt.Sprintf("%s confirmed %s (%s: %d/%d confirmed)", node, r.version, batchLabel(r.st, i), r.confirmedN, r.judgedN)})
	case changeSoaked:
		r.soakedN++
		r.c.emit(&r.st, Event{Kind: EventSoaked, Batch: i + 1, Batches: len(r.st.Batches), BatchName: r.st.Batches[i].Name, Node: node,
			Nodes: r.judgedN, Confirmed: r.confirmedN, Soaked: r.soakedN,
			Message: fmt.Sprintf("%s soaked: up %s on %s without a restart (%s: %d/%d soaked)", node, secs(t.lastUptime-t.firstUptime), r.version, batchLabel(r.st, i), r.soakedN, r.judgedN)})
	}
}

// begin starts the batch in progress: on a fresh batch it leaves out silent nodes and records
// the batch as started before any target is set; then (fresh or resumed) it raises the plan to
// hold the batch (a rollout with a plan, decision 0047) and sets the targets of its nodes that do
// not take the plan, leaving keys that already name the version as they are. Its phases: read
// the targets of the nodes that do not take the plan, and the plan; ask the stream about nodes
// that look silent; sort the nodes; record the batch started; write the plan; set the targets;
// start judging.
func (r *runner) begin(ctx context.Context) error {
	i := r.st.Current
	nodes := r.st.BatchNodes(i)
	start := r.st.batchStart(i)
	reader := func(k int) bool { return r.st.reads(start + k) }
	now := time.Now().UTC()
	fresh := r.st.Batches[i].Started.IsZero()
	cur, err := r.targetsOf(ctx, nodes, reader)
	if err != nil {
		return err
	}
	held, err := r.planHeld(ctx, i)
	if err != nil {
		return err
	}
	if fresh || r.st.LeftOutMore > 0 {
		if err := r.askSilent(ctx, nodes, now); err != nil {
			return err
		}
	}
	s := r.sortBatch(i, nodes, cur, now, fresh, reader, held)
	if fresh {
		if err := r.recordStarted(ctx, i, now, s.leftOut, s.perNode); err != nil {
			return err
		}
	}
	if err := r.raisePlan(ctx, i, s.targeted); err != nil {
		return err
	}
	if err := r.setBatchTargets(ctx, nodes, cur, s.toSet); err != nil {
		return err
	}
	r.startJudging(i, s, len(nodes))
	return nil
}

// reads reports whether node i of Nodes takes the plan (State.Readers).
func (st State) reads(i int) bool {
	return st.Plan != nil && i >= 0 && i < len(st.Readers) && st.Readers[i]
}

// planHeld reports whether the plan on the bus holds batch i of the rollout already (a batch
// resumed): its nodes that read plans were told the version.
func (r *runner) planHeld(ctx context.Context, i int) (bool, error) {
	if r.st.Plan == nil {
		return false, nil
	}
	p, ok, _, err := r.s.readPlan(ctx)
	return planHolds(p, ok, r.st, r.st.Batches[i].In), err
}

// raisePlan writes the plan holding batch i — one write for all of the batch's nodes that read
// plans — and notes its revision as their target's.
func (r *runner) raisePlan(ctx context.Context, i int, targeted []string) error {
	if r.st.Plan == nil {
		return nil
	}
	var rev uint64
	err := r.renewing(ctx, func(ctx context.Context) (err error) {
		rev, err = r.s.writePlan(ctx, r.st, r.st.Batches[i].In, wire.PlanRunning, "")
		return err
	})
	if errors.Is(err, errPlanTaken) {
		return fmt.Errorf("rollout %s: %w; it was superseded", r.st.ID, err)
	}
	if err != nil {
		return fmt.Errorf("raise the rollout plan to batch %d: %w", i+1, err)
	}
	for _, n := range targeted {
		if t := r.tracks[n]; t.reader {
			t.targetRev = rev
		}
	}
	return nil
}

// targetsOf reads the target key of each node that does not read plans (reader); the others'
// are left empty: the plan is theirs.
func (r *runner) targetsOf(ctx context.Context, nodes []string, reader func(k int) bool) ([]targets.Current, error) {
	cur := make([]targets.Current, len(nodes))
	err := r.renewing(ctx, func(ctx context.Context) error {
		return each(ctx, r.c.cfg.Workers, len(nodes), func(ctx context.Context, k int) (err error) {
			if reader(k) {
				return nil
			}
			cur[k], err = r.s.targetOf(ctx, nodes[k])
			return err
		})
	})
	return cur, err
}

// askSilent asks the stream itself about each node that looks silent before it is left out:
// the watch may lag behind what the server stored (just established, or re-established).
func (r *runner) askSilent(ctx context.Context, nodes []string, now time.Time) error {
	latest := make([]*fleet.Entry, len(nodes))
	err := r.renewing(ctx, func(ctx context.Context) error {
		return each(ctx, r.c.cfg.Workers, len(nodes), func(ctx context.Context, k int) error {
			t := r.tracks[nodes[k]]
			if t.heard && r.unheard(t.last.Heard, now) <= r.silentAfter {
				return nil
			}
			var e fleet.Entry
			var ok bool
			err := retry(ctx, r.c.log, "read a heartbeat", func(ctx context.Context) (err error) {
				e, ok, err = fleet.Last(ctx, r.c.cfg.JS, r.c.cfg.Names, nodes[k])
				return err
			})
			if ok {
				latest[k] = &e
			}
			return err
		})
	})
	if err != nil {
		return err
	}
	for k, e := range latest {
		if t := r.tracks[nodes[k]]; e != nil && (!t.heard || e.Heard.After(t.last.Heard)) {
			t.last, t.heard = *e, true
			if _, p := platformOf(e.Heartbeat); e.Err == nil && p != "" {
				t.platform = p
			}
		}
	}
	return nil
}

// batchSort is what begin makes of a batch's nodes: left out (silent; listed only on a fresh
// batch), targeted (toSet: the indexes of those whose key does not name the version yet), and
// those that already have it.
type batchSort struct {
	leftOut           []LeftOut
	targeted, already []string
	toSet             []int
	perNode           int // targeted nodes that do not read plans
}

// sortBatch resets each node's track for batch i and sorts the nodes (see batchSort).
// A node that reads plans (reader) is told the version by the plan, which names it for the
// batch when held.
func (r *runner) sortBatch(i int, nodes []string, cur []targets.Current, now time.Time, fresh bool, reader func(k int) bool, held bool) batchSort {
	b := r.st.Batches[i]
	listed := make(map[string]bool)
	for _, lo := range r.st.LeftOut {
		if lo.Batch == i {
			listed[lo.Node] = true
		}
	}
	var s batchSort
	for k, n := range nodes {
		t := r.tracks[n]
		t.reset()
		t.inBatch, t.reader = true, reader(k)
		names := cur[k].Names(r.version)
		if t.reader {
			names = held
		}
		switch {
		case fresh && (!t.heard || r.unheard(t.last.Heard, now) > r.silentAfter),
			!fresh && listed[n],
			!fresh && r.st.LeftOutMore > 0 && (!t.heard || t.last.Heard.Before(b.Started.Add(-r.silentAfter))):
			t.leftOut = true
			if fresh {
				lo := LeftOut{Node: n, Batch: i}
				if t.heard {
					lo.SilentSince = t.last.Heard.UTC()
				}
				s.leftOut = append(s.leftOut, lo)
			}
		case t.heard && t.last.Err == nil && alreadyHas(t.last.Heartbeat, r.version) &&
			(t.last.Heartbeat.KnownGood != r.version || !names):
			t.done = true // it has the version or a newer one, and not from this rollout
			s.already = append(s.already, n)
		default:
			s.targeted = append(s.targeted, n)
			if t.heard {
				t.priorRollback = lastRollbackFrom(t.last, r.version)
				t.priorLauncher = priorLauncherRollback(t.last, b.Started) // zero when fresh
			}
			switch {
			case t.reader: // raisePlan notes the plan's revision
			case r.s.ours(cur[k], r.version):
				s.perNode++
				t.targetRev = cur[k].Rev
			default:
				s.perNode++
				s.toSet = append(s.toSet, k)
			}
		}
	}
	return s
}

// recordStarted writes fresh batch i started, with the nodes it leaves out, and says each.
func (r *runner) recordStarted(ctx context.Context, i int, now time.Time, leftOut []LeftOut, perNode int) error {
	err := r.write(ctx, func(st *State) {
		st.Batches[i].Started = now
		if st.Plan != nil {
			st.Batches[i].PerNode = perNode
		}
		st.LeftOut = append(append([]LeftOut(nil), st.LeftOut...), leftOut...)
		fit(st)
	})
	if err != nil {
		return err
	}
	for _, lo := range leftOut {
		r.c.emit(&r.st, Event{Kind: EventLeftOut, Batch: i + 1, Batches: len(r.st.Batches), BatchName: r.st.Batches[i].Name, Node: lo.Node,
			Message: leftOutMessage(r.st, i, lo.Node, lo.SilentSince, now)})
	}
	return nil
}

// setBatchTargets sets the target of the nodes at toSet, and notes each key's revision.
func (r *runner) setBatchTargets(ctx context.Context, nodes []string, cur []targets.Current, toSet []int) error {
	setNodes := make([]string, len(toSet))
	setCur := make([]targets.Current, len(toSet))
	for j, k := range toSet {
		setNodes[j], setCur[j] = nodes[k], cur[k]
	}
	var setRevs []uint64
	err := r.renewing(ctx, func(ctx context.Context) (err error) {
		setRevs, err = r.s.setTargets(ctx, setNodes, setCur, r.version, r.c.cfg.Workers)
		return err
	})
	if err != nil {
		return err
	}
	for j, n := range setNodes {
		r.tracks[n].targetRev = setRevs[j]
	}
	return nil
}

// startJudging says batch i begun and judges its targeted nodes on what they said last.
func (r *runner) startJudging(i int, s batchSort, size int) {
	b := r.st.Batches[i]
	r.judging, r.judgedN, r.confirmedN, r.soakedN, r.troubledN, r.paused = true, len(s.targeted), 0, 0, 0, 0
	r.lastProgress, r.said = time.Now(), progressSaid{}
	r.c.emit(&r.st, Event{Kind: EventBatch, Batch: i + 1, Batches: len(r.st.Batches), BatchName: b.Name, Nodes: len(s.targeted),
		Message: batchMessage(r.st, i, s.targeted, s.already, size-len(s.targeted)-len(s.already))})
	for _, n := range s.targeted {
		if t := r.tracks[n]; t.heard {
			r.note(n, t, t.observe(t.last, r.version, r.soak))
		}
	}
}

// fit keeps the state's head within the bucket's max value size, with room for a halt report:
// the newest left-out nodes past the room are counted rather than listed. The node list is not
// in the head (decision 0021), so only a batch with thousands of silent nodes comes near it.
func fit(st *State) {
	for len(st.LeftOut) > 0 {
		over := headSize(*st) + haltBudget - bus.MaxRolloutBytes
		if over <= 0 {
			return
		}
		drop := min(len(st.LeftOut), over/64+1)
		st.LeftOut = st.LeftOut[:len(st.LeftOut)-drop]
		st.LeftOutMore += drop
	}
}

// troubles are the reasons to halt now: each troubled node of the batch, in batch order.
// Time-based judgement (silent, not confirmed) runs on ticks, and only while the heartbeats can
// be trusted: the bus up (silence counting only the time it was).
func (r *runner) troubles(now time.Time, timeCheck bool) []NodeReason {
	timed := r.wasUp
	if r.troubledN == 0 && !(timeCheck && timed) {
		return nil
	}
	i := r.st.Current
	deadline := r.st.Batches[i].Started.Add(r.window + r.paused)
	var out []NodeReason
	for _, n := range r.st.BatchNodes(i) {
		t := r.tracks[n]
		if !t.judged() {
			continue
		}
		why := t.trouble
		if why == nil && timed {
			why = t.overdue(n, r.version, now, deadline, r.window, r.unheard(t.last.Heard, now))
		}
		if why != nil {
			out = append(out, *why)
		}
	}
	return out
}

// halt stops the rollout for reasons: halted first, then the batch's targets set back.
func (r *runner) halt(ctx context.Context, reasons []NodeReason) (State, error) {
	i := r.st.Current
	troubled := len(reasons)
	outs := r.batchOutcomes(i, reasons)
	more := 0
	if len(reasons) > MaxHaltNodes {
		more, reasons = len(reasons)-MaxHaltNodes, reasons[:MaxHaltNodes]
	}
	now := time.Now().UTC()
	err := r.write(ctx, func(st *State) {
		st.Status, st.Ended = StatusHalted, now
		st.Halt = &Halt{At: now, Batch: i, Nodes: reasons, More: more, Platforms: outs}
	})
	if err != nil {
		return r.st, err
	}
	r.c.emit(&r.st, Event{Kind: EventHalted, Batch: i + 1, Batches: len(r.st.Batches), BatchName: r.st.Batches[i].Name,
		Nodes: r.judgedN, Confirmed: r.confirmedN, Soaked: r.soakedN, ElapsedS: now.Sub(r.st.Batches[i].Started).Seconds(),
		Reasons: reasons, Platforms: outs, Message: haltedMessage(r.st, i, troubled, r.judgedN)})
	r.mu.Lock()
	defer r.mu.Unlock()
	st, err := restore(ctx, r.s, r.st, r.rev, r.c.cfg.Workers)
	r.st = st
	return st, err
}

// batchDone records the batch as done and moves on: "current" advances only with done written.
func (r *runner) batchDone(ctx context.Context) error {
	i := r.st.Current
	now := time.Now().UTC()
	if err := r.write(ctx, func(st *State) {
		st.Batches[i].Done = now
		st.Current = i + 1
		st.BytesMoved = max(st.BytesMoved, r.moved()) // a controller resumed counts from its start
	}); err != nil {
		return err
	}
	b := r.st.Batches[i]
	r.c.emit(&r.st, Event{Kind: EventBatchDone, Batch: i + 1, Batches: len(r.st.Batches), BatchName: b.Name, Platforms: r.batchOutcomes(i, nil),
		Nodes: r.judgedN, Confirmed: r.confirmedN, Soaked: r.soakedN, ElapsedS: now.Sub(b.Started).Seconds(), BytesMoved: r.st.BytesMoved,
		Message: fmt.Sprintf("%s done: %s soaked in %s%s", batchLabel(r.st, i), count(r.soakedN, "node"), human(now.Sub(b.Started)), movedSoFar(r.st.BytesMoved))})
	for _, n := range r.st.BatchNodes(i) {
		r.tracks[n].inBatch = false
	}
	r.judging = false
	return nil
}

// complete sets the fleet key, writes the plan completed (it holds no node then), deletes the
// per-node keys of the rollout's nodes that do not take the plan (each falls back to the fleet
// key) and those earlier rollouts of the release left (clearLeftBehind), then records the
// rollout completed. Each step is idempotent, so a controller killed half-way and
// resumed completes it again.
func (r *runner) complete(ctx context.Context) (State, error) {
	// A compare-and-set first: an abort or a supersede that came in since the last write must
	// stop the fleet key from being set.
	if err := r.write(ctx, func(*State) {}); err != nil {
		return r.st, err
	}
	nodes := r.st.perNodeNodes()
	var left []string
	err := r.renewing(ctx, func(ctx context.Context) (err error) {
		if err := r.s.setFleet(ctx, r.version); err != nil {
			return err
		}
		if r.st.Plan != nil {
			// After the fleet key: a node the plan stops holding finds the version there.
			if _, err := r.s.writePlan(ctx, r.st, 0, wire.PlanCompleted, ""); err != nil {
				return fmt.Errorf("write the rollout plan completed: %w", err)
			}
		}
		if err := r.s.clearTargets(ctx, nodes, r.c.cfg.Workers); err != nil {
			return err
		}
		left, err = r.s.clearLeftBehind(ctx, r.st, r.c.cfg.Workers)
		return err
	})
	if err != nil {
		return r.st, err
	}
	now := time.Now().UTC()
	moved := r.moved()
	if err := r.write(ctx, func(st *State) {
		st.Status, st.Ended = StatusCompleted, now
		st.BytesMoved = max(st.BytesMoved, moved)
	}); err != nil {
		return r.st, err
	}
	r.c.emit(&r.st, Event{Kind: EventCompleted, Batches: len(r.st.Batches), Nodes: len(r.st.Nodes), ElapsedS: now.Sub(r.st.Created).Seconds(),
		BytesMoved: r.st.BytesMoved, Message: completedMessage(r.st, left)})
	return r.st, nil
}

// completeNow completes a rollout that has no batch (policy immediate, or no node needing it).
func (r *runner) completeNow(ctx context.Context) (State, error) { return r.complete(ctx) }
