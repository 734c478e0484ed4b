package rollout

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// Config is what a Controller needs; the zero values of the optional fields are defaults.
type Config struct {
	JS     jetstream.JetStream
	Names  wire.Names
	Events func(Event)   // called from one goroutine at a time; nil: none
	Log    *slog.Logger  // nil: discard
	Lease  time.Duration // default DefaultLease
	// Progress is how often the batch's progress is looked at while a batch runs (0: never, no
	// EventProgress): an event when what it says changed beyond the clock, else one every
	// quietProgress of these, with the time left.
	Progress time.Duration
	Tick     time.Duration // how often the current batch is judged besides on each heartbeat; default 250ms
	Workers  int           // targets set/deleted concurrently; default 32
	Holder   string        // optional extra text naming this controller (e.g. "watch"); host name and pid are always recorded
	// Key signs every target the controller writes (decision 0011): the release key or a
	// target key the hosts trust. Required.
	Key ed25519.PrivateKey
	// MoreKeys each add their signature to what Key signs, for a root whose targets role needs
	// two or more (decision 0045).
	MoreKeys []ed25519.PrivateKey
	// TargetTTL is how long a target it writes stays valid; while the controller drives a
	// rollout it signs again every target of Key with less than half of it left (targets.Keep).
	// Default targets.DefaultTTL.
	TargetTTL time.Duration
}

// Defaults of Config.
const (
	DefaultTick    = 250 * time.Millisecond
	DefaultWorkers = 32
)

// Controller drives rollouts on one bus. One controller may run one rollout at a time (Watch
// runs them one after the other); two controllers never act on the same rollout at once.
type Controller struct {
	cfg    Config
	log    *slog.Logger
	signer targets.Signer
	host   string
	pid    int
	token  string

	emitMu sync.Mutex

	keepMu   sync.Mutex
	keepers  int                // runs (Run, Watch) that want targets kept
	stopKeep context.CancelFunc // ends the one Keep they share
}

// withDefaults returns c with every zero field at its default (decision 0041).
func (c Config) withDefaults() Config {
	if c.Names.Prefix == "" {
		c.Names = wire.NamesFor("")
	}
	if c.Lease <= 0 {
		c.Lease = DefaultLease
	}
	if c.Tick <= 0 {
		c.Tick = DefaultTick
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.TargetTTL == 0 {
		c.TargetTTL = targets.DefaultTTL
	}
	return c
}

// New returns a controller for cfg, with its defaults filled in.
func New(cfg Config) (*Controller, error) {
	if cfg.JS == nil {
		return nil, errors.New("rollout: no JetStream connection")
	}
	cfg = cfg.withDefaults()
	signer, err := targets.NewSigner(cfg.Key, cfg.TargetTTL)
	if err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	signer.More = cfg.MoreKeys
	if err := signer.Check(); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var tok [6]byte
	_, _ = rand.Read(tok[:])
	return &Controller{cfg: cfg, log: discard(cfg.Log), signer: signer, host: host, pid: os.Getpid(), token: hex.EncodeToString(tok[:])}, nil
}

// keeping keeps the targets of the controller's key from expiring (targets.Keep) until every
// caller has called the stop it returns: a watch and the rollout it drives share one Keep.
func (c *Controller) keeping() (stop func()) {
	c.keepMu.Lock()
	defer c.keepMu.Unlock()
	if c.keepers == 0 {
		ctx, cancel := context.WithCancel(context.Background())
		c.stopKeep = cancel
		go func() {
			err := targets.KeepSigned(ctx, c.cfg.JS, c.cfg.Names, c.signer, c.log)
			if err != nil && ctx.Err() == nil {
				c.log.Error("targets are not being signed again before they expire", "err", err)
			}
		}()
	}
	c.keepers++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.keepMu.Lock()
			defer c.keepMu.Unlock()
			if c.keepers--; c.keepers == 0 {
				c.stopKeep()
			}
		})
	}
}

// holder is this controller holding a rollout from since, its lease running from now.
func (c *Controller) holder(since, now time.Time) *Holder {
	id := fmt.Sprintf("%s pid %d", c.host, c.pid)
	if c.cfg.Holder != "" {
		id += " (" + c.cfg.Holder + ")"
	}
	return &Holder{ID: id, Host: c.host, PID: c.pid, Since: since, Until: now.Add(c.cfg.Lease), Extra: c.cfg.Holder, Token: c.token}
}

func (c *Controller) mine(h *Holder) bool {
	return h != nil && h.Host == c.host && h.PID == c.pid && h.Token == c.token
}

// mayTake says whether this controller may act on a rollout held by h (0006, "State and one
// controller"), and why, for the resumed event.
func (c *Controller) mayTake(h *Holder, now time.Time) (bool, string) {
	switch {
	case h == nil:
		return true, "no controller held it"
	case c.mine(h):
		return true, ""
	case now.After(h.Until):
		return true, fmt.Sprintf("the lease of %s lapsed at %s", h.describe(), stamp(h.Until))
	case h.Host == c.host && h.PID != c.pid && processGone(h.PID):
		return true, fmt.Sprintf("%s is gone", h.describe())
	}
	return false, ""
}

// emit sends ev to Config.Events, one at a time.
func (c *Controller) emit(st *State, ev Event) {
	if c.cfg.Events == nil {
		return
	}
	ev.Time = time.Now().UTC()
	ev.Rollout, ev.Version = st.ID, st.Version
	c.emitMu.Lock()
	defer c.emitMu.Unlock()
	c.cfg.Events(ev)
}

// haltBudget is room kept in a state for its halt report: MaxHaltNodes reasons with their
// output and detail.
const haltBudget = MaxHaltNodes * (wire.MaxOutputBytes + maxDetailBytes + 512)

// Start validates o (with its defaults), plans the fleet from the heartbeat stream, stores the
// rollout (rollout.<id>, then "current" by compare-and-set) held by this controller, and emits
// EventStarted. A rollout that needs no batch — PolicyImmediate, or a fleet where no node needs
// the version — is completed before Start returns. A running rollout is a *RunningError unless
// o.Supersede, which marks it superseded. Its phases: the version checked, the current rollout
// read, the fleet planned, the rollout stored, then the old one superseded.
func (c *Controller) Start(ctx context.Context, o Options) (State, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return State{}, err
	}
	s, err := openStore(ctx, c.cfg.JS, c.cfg.Names, c.signer, c.log)
	if err != nil {
		return State{}, err
	}
	rel, err := c.mayRollOut(ctx, o.Version)
	if err != nil {
		return State{}, err
	}
	cur, err := c.currentRollout(ctx, s, o.Supersede)
	if err != nil {
		return State{}, err
	}
	entries, err := c.readFleet(ctx)
	if err != nil {
		return State{}, err
	}
	pinned, err := s.pinnedNodes(ctx)
	if err != nil {
		return State{}, err
	}
	now := time.Now().UTC()
	p, err := planPinned(o, rel, entries, now, pinned)
	if err != nil {
		return State{}, err
	}
	st := c.newState(o, p, now, cur)
	if err := fits(st, c.cfg.Names.Rollouts()); err != nil {
		return State{}, err
	}
	rev, err := c.saveNew(ctx, s, st, cur.rev)
	if err != nil {
		return State{}, err
	}
	if cur.running != nil {
		// The old rollout's holder (if any) notices and stops; its targets stay.
		done, err := c.supersede(ctx, s, cur.running.ID, st.ID)
		if err != nil {
			c.log.Warn("could not mark the older rollout superseded", "rollout", cur.running.ID, "err", err)
		} else if done.Status == StatusSuperseded {
			c.emit(&done, Event{Kind: EventSuperseded, Message: supersededMessage(done)})
		}
	}
	c.emit(&st, Event{Kind: EventStarted, Batches: len(st.Batches), Nodes: len(st.Nodes), Message: startedMessage(st) + trustWords(st, entries)})
	if st.Policy == PolicyImmediate || len(st.Batches) == 0 {
		r := c.newRunner(s, st, rev)
		return r.completeNow(ctx)
	}
	return st, nil
}

// Preview is the rollout o would be if it started now, computed as Start computes it (the version
// checked, the fleet read and planned, its plan's batches) and written nowhere: `rollout plan`
// prints it, and `rollout start` prints the same batches for the same fleet.
func (c *Controller) Preview(ctx context.Context, o Options) (State, error) {
	o = o.WithDefaults()
	if err := o.Validate(); err != nil {
		return State{}, err
	}
	rel, err := c.mayRollOut(ctx, o.Version)
	if err != nil {
		return State{}, err
	}
	entries, err := c.readFleet(ctx)
	if err != nil {
		return State{}, err
	}
	s, err := openStore(ctx, c.cfg.JS, c.cfg.Names, c.signer, c.log)
	if err != nil {
		return State{}, err
	}
	pinned, err := s.pinnedNodes(ctx)
	if err != nil {
		return State{}, err
	}
	now := time.Now().UTC()
	p, err := planPinned(o, rel, entries, now, pinned)
	if err != nil {
		return State{}, err
	}
	return c.newState(o, p, now, current{}), nil
}

// mayRollOut checks that version is published, with a manifest hosts read, and not withdrawn,
// and returns what the platform gate needs of it.
func (c *Controller) mayRollOut(ctx context.Context, version string) (release, error) {
	m, err := publishedManifest(ctx, c.cfg.JS, c.cfg.Names, version, c.log)
	if err != nil {
		return release{}, err
	}
	err = retry(ctx, c.log, "read the withdrawals", func(ctx context.Context) error {
		return targets.CheckNotWithdrawn(ctx, c.cfg.JS, c.cfg.Names, version)
	})
	return releaseOf(m), err
}

// current is what "current" named when a rollout started: its id and revision, and the rollout
// if it still runs (to be superseded).
type current struct {
	id      string
	rev     uint64
	running *State
}

// currentRollout reads the current rollout, setting a halt's targets back if that was not done
// yet; one still running is a *RunningError unless supersede.
func (c *Controller) currentRollout(ctx context.Context, s *store, supersede bool) (current, error) {
	var cur current
	var err error
	if cur.id, cur.rev, err = s.current(ctx); err != nil || cur.id == "" {
		return cur, err
	}
	st, rev, err := s.get(ctx, cur.id)
	if err != nil {
		return cur, err
	}
	if st, err = restore(ctx, s, st, rev, c.cfg.Workers); err != nil {
		return cur, err // a halt's targets not yet set back would pin nodes to its version
	}
	if !st.Status.Final() {
		if !supersede {
			return cur, &RunningError{State: st}
		}
		cur.running = &st
	}
	return cur, nil
}

// newState is the rollout o plans as p, started at now, held by this controller.
func (c *Controller) newState(o Options, p plannedFleet, now time.Time, cur current) State {
	// An id is the second a rollout started and its version: one superseding the current rollout
	// of its version within the same second takes the next second's id, which no other holds.
	idAt := now
	for rolloutID(idAt, o.Version) == cur.id {
		idAt = idAt.Add(time.Second)
	}
	st := State{
		Schema: Schema, ID: rolloutID(idAt, o.Version), Version: o.Version, Policy: o.Policy, Status: StatusRunning,
		Created: now, Updated: now, Canary: max(o.Canary, p.canaries), CanaryNodes: o.CanaryNodes, Steps: o.Steps,
		WindowS: o.Window.Seconds(), SoakS: o.Soak.Seconds(), AliveS: o.Alive.Seconds(), SilentAfterS: o.SilentAfter.Seconds(),
		Urgent: o.Urgent, Metered: p.metered, Skipped: p.skipped, Nodes: p.nodes, Ran: p.ran, Batches: p.batches, LeftOut: []LeftOut{}, Holder: c.holder(now, now),
		Plan: p.plan, Readers: p.readers,
	}
	if st.Nodes == nil {
		st.Nodes, st.Ran = []string{}, []string{}
	}
	if st.Batches == nil {
		st.Batches = []Batch{}
	}
	if cur.running != nil {
		st.Supersedes = cur.running.ID
	}
	return st
}

// saveNew writes the new rollout, then "current" naming it by compare-and-set on curRev, and
// returns the rollout's revision. A start that loses either race is said as lostStart says.
func (c *Controller) saveNew(ctx context.Context, s *store, st State, curRev uint64) (uint64, error) {
	rev, err := s.saveState(ctx, st, 0)
	if errors.Is(err, errConflict) {
		return 0, c.lostStart(ctx, s, st.ID)
	}
	if err != nil {
		return 0, err
	}
	if _, err := s.savePointer(ctx, st.ID, curRev); err != nil {
		// Another controller started a rollout since "current" was read: this one never was.
		c.forget(s, st.ID)
		if errors.Is(err, errConflict) {
			return 0, c.lostStart(ctx, s, "")
		}
		return 0, err
	}
	return rev, nil
}

// readFleet reads every node's last heartbeat, what a rollout is planned from. The read takes
// as long as the fleet is large, so an attempt is given up only when the heartbeats stop coming
// (retryProgressing). A heartbeat stored while the snapshot is read comes too: each node keeps
// its newest, where its first one was (as fleet.Read).
func (c *Controller) readFleet(ctx context.Context) ([]fleet.Entry, error) {
	var out []fleet.Entry
	err := retryProgressing(ctx, c.log, "read the heartbeats", func(ctx context.Context, alive func()) error {
		out = out[:0]
		at := map[string]int{}
		rctx, caughtUp := context.WithCancel(ctx)
		defer caughtUp()
		read := false
		err := fleet.Watch(rctx, c.cfg.JS, c.cfg.Names, func(e fleet.Entry) {
			alive()
			if i, ok := at[e.Node]; ok {
				out[i] = e
				return
			}
			at[e.Node] = len(out)
			out = append(out, e)
		}, func() { read = true; caughtUp() })
		if read {
			return nil
		}
		return err
	})
	return out, err
}

// fits refuses a planned state that cannot be stored: a node list over the chunks a head may
// name (bus.MaxRolloutChunks), or a head without room for a halt report. The node list is not
// in the head (decision 0021): 100,000 nodes and more fit.
func fits(st State, bucket string) error {
	if _, _, err := splitNodes(st); err != nil {
		return err
	}
	if n := headSize(st) + haltBudget; n > bus.MaxRolloutBytes {
		return fmt.Errorf("a rollout to %d nodes does not fit its head (%d bytes with room for a halt report; %s holds values of at most %d): name fewer canaries",
			len(st.Nodes), n, bucket, bus.MaxRolloutBytes)
	}
	return nil
}

// lostStart explains a start that lost the race to another: the rollout now running.
func (c *Controller) lostStart(ctx context.Context, s *store, id string) error {
	if id == "" {
		var err error
		if id, _, err = s.current(ctx); err != nil {
			return err
		}
	}
	st, _, err := s.get(ctx, id)
	if err != nil {
		// The other start wrote the chunks of its node list under this id and not yet its head.
		return fmt.Errorf("another rollout (%s) was started at the same moment and is still being stored; start again: %w", text(id), err)
	}
	if !st.Status.Final() {
		return &RunningError{State: st}
	}
	return fmt.Errorf("another rollout (%s of %s) was started at the same moment; start again", st.ID, st.Version)
}

// forget removes a rollout that lost the race for "current" (best effort: it is never named).
func (c *Controller) forget(s *store, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s.purge(ctx, id)
}

// supersede marks rollout id superseded by next, unless it has ended already, and returns it.
func (c *Controller) supersede(ctx context.Context, s *store, id, next string) (State, error) {
	for range 10 {
		st, rev, err := s.get(ctx, id)
		if err != nil || st.Status.Final() {
			return st, err
		}
		now := time.Now().UTC()
		st.Status, st.SupersededBy, st.Ended, st.Updated = StatusSuperseded, next, now, now
		if _, err = s.saveState(ctx, st, rev); !errors.Is(err, errConflict) {
			return st, err
		}
	}
	return State{}, fmt.Errorf("rollout %s kept changing while it was being superseded", id)
}

// publishedManifest reads the manifest of version as announced (publish.Published, the rule
// target and withdraw follow too): hosts refuse a target with no manifest, or with one they
// cannot read.
func publishedManifest(ctx context.Context, js jetstream.JetStream, n wire.Names, version string, log *slog.Logger) (wire.Manifest, error) {
	var raw []byte
	err := retry(ctx, discard(log), "read "+version+" in "+n.Releases(), func(ctx context.Context) (err error) {
		raw, err = publish.Published(ctx, js, n, version)
		return err
	})
	if err != nil {
		return wire.Manifest{}, err
	}
	m, err := wire.ParseManifest(raw)
	if err != nil {
		return wire.Manifest{}, fmt.Errorf("%s: the published manifest is unreadable (%w); hosts would refuse it", version, err)
	}
	return m, nil
}

// Resume takes over the rollout "current" names and runs it (see Run). It returns ErrNoRollout
// when no rollout was started, a *NotRunningError when it has ended (restoring its batch's
// targets first if a halt or abort left them), and a *HeldError when another live controller
// holds it.
func (c *Controller) Resume(ctx context.Context) (State, error) {
	s, err := openStore(ctx, c.cfg.JS, c.cfg.Names, c.signer, c.log)
	if err != nil {
		return State{}, err
	}
	st, _, err := runningCurrent(ctx, s, c.cfg.Workers)
	if err != nil {
		return st, err
	}
	return c.Run(ctx, st.ID)
}

// runningCurrent reads the rollout "current" names and its revision: ErrNoRollout when there is
// none, *NotRunningError when it is final (after finishing a restore a halt or abort left undone).
func runningCurrent(ctx context.Context, s *store, workers int) (State, uint64, error) {
	id, _, err := s.current(ctx)
	if err != nil {
		return State{}, 0, err
	}
	if id == "" {
		return State{}, 0, ErrNoRollout
	}
	st, rev, err := s.get(ctx, id)
	if err != nil {
		return State{}, 0, err
	}
	if st.Status.Final() {
		st, err = restore(ctx, s, st, rev, workers)
		if err != nil {
			return st, 0, err
		}
		return st, 0, &NotRunningError{State: st}
	}
	return st, rev, nil
}

// Abort marks the current running rollout aborted (by names who: "alice@web-01"), sets the
// batch in progress back as a halt does, its targets signed by signer, and returns its state.
// The controller holding it notices and stops. *NotRunningError or ErrNoRollout when there is
// nothing to abort.
func Abort(ctx context.Context, js jetstream.JetStream, n wire.Names, by string, signer targets.Signer) (State, error) {
	if err := signer.Check(); err != nil {
		return State{}, fmt.Errorf("rollout: %w", err) // it could not set the batch back
	}
	s, err := openStore(ctx, js, n, signer, nil)
	if err != nil {
		return State{}, err
	}
	for range 20 {
		st, rev, err := runningCurrent(ctx, s, DefaultWorkers)
		if err != nil {
			return st, err
		}
		now := time.Now().UTC()
		st.Status, st.AbortedBy, st.Ended, st.Updated = StatusAborted, text(by), now, now
		rev, err = s.saveState(ctx, st, rev)
		if errors.Is(err, errConflict) {
			continue // the holder renewed its lease, or moved on: read it again
		}
		if err != nil {
			return st, err
		}
		return restore(ctx, s, st, rev, DefaultWorkers)
	}
	return State{}, errors.New("the rollout kept changing while it was being aborted; try again")
}

// restore sets the targets of a halted or aborted rollout's batch back to what its nodes ran
// and records that it did (targets_restored): the plan, if it has one, lowered to the batches
// done (one write: its nodes that read plans fall back to what they followed before it), and
// the per-node keys of its other nodes set back. Keys that no longer name the rollout's version
// were not set by it, or were set since by someone else, and are left alone.
func restore(ctx context.Context, s *store, st State, rev uint64, workers int) (State, error) {
	if st.Restored || (st.Status != StatusHalted && st.Status != StatusAborted) {
		return st, nil
	}
	i := st.Current
	if st.Halt != nil {
		i = st.Halt.Batch
	}
	if st.Plan != nil {
		state, reason := wire.PlanHalted, haltReason(st)
		if st.Status == StatusAborted {
			state, reason = wire.PlanAborted, "aborted by "+st.AbortedBy
		}
		_, err := s.writePlan(ctx, st, st.planIn(i), state, reason)
		if err != nil && !errors.Is(err, errPlanTaken) {
			return st, fmt.Errorf("lower the rollout plan to the batches done: %w", err)
		}
	}
	if i < len(st.Batches) && !st.Batches[i].Started.IsZero() {
		start := st.batchStart(i)
		var nodes, ran []string
		for k, n := range st.BatchNodes(i) {
			if !st.reads(start + k) {
				nodes, ran = append(nodes, n), append(ran, st.Ran[start+k])
			}
		}
		if err := s.restoreTargets(ctx, nodes, ran, st.Version, workers); err != nil {
			return st, fmt.Errorf("set the targets of batch %d back: %w", i+1, err)
		}
	}
	for range 20 {
		st.Restored, st.Updated = true, time.Now().UTC()
		_, err := s.saveState(ctx, st, rev)
		if !errors.Is(err, errConflict) {
			return st, err
		}
		if st, rev, err = s.get(ctx, st.ID); err != nil || st.Restored {
			return st, err
		}
	}
	return st, errors.New("the rollout kept changing while its targets were being restored")
}

// haltReason is a halt's reason as its plan says it: the first troubled node and why.
func haltReason(st State) string {
	h := st.Halt
	if h == nil || len(h.Nodes) == 0 {
		return "halted"
	}
	n := h.Nodes[0]
	more := len(h.Nodes) - 1 + h.More
	if more > 0 {
		return fmt.Sprintf("halted at %s: %s %s (and %d more)", batchLabel(st, h.Batch), n.Node, n.Why, more)
	}
	return fmt.Sprintf("halted at %s: %s %s", batchLabel(st, h.Batch), n.Node, n.Why)
}
