// Package host is mesh-host's run loop: reconcile, confirm, heartbeat, and stand aside for a newer
// version.
//
// It is a library type so one process can run many hosts (the lab's fleets) and main stays small:
// hold the lock, reconcile on the four triggers (start, a declaration arriving, reconnect, the
// drift timer), confirm after the first completed reconcile, heartbeat upward, and stand aside
// between reconciles when Choose names another version.
package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/profile"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// Options are what one host needs besides its Config.
type Options struct {
	Config  config.Config
	Version string // the version this host is (stamped at build); Choose is compared with it
	StartID int64  // the launcher's record of this start (MESH_HOST_START_ID); 0 when run alone
	Logger  *slog.Logger
	// PreflightArgs follow "preflight" when a staged successor is checked (e.g. --config FILE
	// when this host was started with one), so it reads the same config this host does.
	PreflightArgs []string
	// Alive is the launcher's liveness pipe (MESH_HOST_ALIVE_FD), written every AliveEvery
	// from the reconcile loop; nil for none.
	Alive      io.Writer
	AliveEvery time.Duration
	// Detector detects the machine's profile; hosts of one process (the lab's fleets) share
	// one. Nil: the host makes its own, reusing a detection for a minute.
	Detector *profile.Detector
	// Now is the clock the host judges its maintenance window and its target's expiry by; nil
	// for time.Now. Tests set it.
	Now func() time.Time
}

// Result says why Run returned without error.
type Result struct {
	StoodAsideFor string // non-empty: Choose named this version; exit 0 so the launcher runs it
}

// Host is one node's host.
type Host struct {
	opts     Options
	log      *slog.Logger
	root     string
	records  *rollback.Records
	store    *store.Store
	link     *link.Link // nil when no NATS URL is configured: the host runs disconnected
	started  time.Time
	triggers *triggers
	pulse    pulse         // shows the launcher this host is alive (loop goroutine only)
	beat     chan struct{} // asks the heartbeat loop for a heartbeat now
	recheck  chan struct{} // a version was staged: check Choose once no reconcile runs
	wg       sync.WaitGroup

	trust     trustState        // the roots walked, or host.json's keys: verifies every signed document (trustroot.go)
	wmu       sync.Mutex        // one application of the withdrawal list at a time
	machine   machineReport     // owned and drifted, from the reconciles, for the heartbeat
	detector  *profile.Detector // shared by the hosts of one process
	engine    *apply.Engine     // applies the held declaration (set in Run, once the link is open)
	blobStore apply.Blobs       // the blobs its appliers read: ROOT/blobs, filled over the link

	mu              sync.Mutex
	confirmed       bool
	target          *inForce            // the target accepted last; nil for none
	linkTarget      *link.TargetChanged // the node's or the fleet's target key as the link reported it last
	plan            keptPlan            // the rollout plan accepted last, and the version carried (plan.go)
	expiry          *time.Timer         // fires when target expires
	delivery        *delivery           // nil when the host does not fetch versions (no link or no trusted keys)
	withdrawn       map[string]wire.Withdrawn
	withdrawalsRev  uint64      // KV revision of the withdrawal list accepted last (0: known from the store)
	saidNoStepDown  bool        // the refusal "withdrawn, nothing to step down to" was recorded
	withdrawalsList keptList    // the withdrawal list accepted last in this run: its expiry is reported
	lastApplied     *time.Time  // when a declaration was last applied completely (nil: not known)
	window          *keptWindow // the maintenance window in force (window.go); nil for none
	windowTimer     *time.Timer // rechecks Choose when the window opens
	lastChoice      string      // what Choose named at the last stand-aside check
	waitingSaid     string      // the wait last logged and left for status ("" for none)
	waitWritten     bool        // the wait file was written (or removed) once since start
	busSeq          uint64      // the bus configuration applied last (bus.go); 0 for none
	urls            []string    // the nats_urls host.json holds since a bus configuration wrote them; nil: as at start
}

// New makes a host; nothing happens until Run.
func New(opts Options) (*Host, error) {
	if opts.Version == "" {
		return nil, errors.New("host: no version given")
	}
	if err := wire.ValidNode(opts.Config.Node); err != nil {
		return nil, fmt.Errorf("host: node id: %w (set node in host.json or MESH_HOST_NODE)", err)
	}
	opts = opts.withDefaults()
	return &Host{
		pulse:    pulse{w: opts.Alive, every: opts.AliveEvery},
		opts:     opts,
		detector: opts.Detector,
		// Each key once per line (logkey): the link's, the stager's and the engine's loggers
		// replace component=host; the host's own version is host_version, apart from the
		// versions its lines are about.
		log: slog.New(logkey.Unique(opts.Logger.Handler())).With("component", "host", "node", opts.Config.Node,
			"host_version", opts.Version),
		root:     opts.Config.Root,
		triggers: newTriggers(),
		beat:     make(chan struct{}, 1),
		recheck:  make(chan struct{}, 1),
		trust:    newTrustState(),
	}, nil
}

// Run holds the host lock and reconciles until ctx ends (a stop: it returns after the reconcile
// in progress, if any) or until, after a completed reconcile, Choose names another version.
func (h *Host) Run(ctx context.Context) (Result, error) {
	h.started = time.Now()
	h.pulse.beat()
	closeLocal, err := h.openLocal(ctx)
	if err != nil {
		return Result{}, err
	}
	defer closeLocal()
	if removed, err := rollback.CleanStaging(h.root); err != nil {
		h.log.Error("could not remove leftover staging directories", "err", err)
	} else if len(removed) > 0 {
		h.log.Info("removed staging directories left by a crash", "dirs", removed)
	}

	// Background work (the link's events, heartbeats) lives as long as this context; it is
	// cancelled only after the last heartbeat has been sent.
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopBackground()
		if h.link != nil {
			h.link.Close()
		}
		h.wg.Wait()
	}()
	if err := h.startLink(bg); err != nil {
		return Result{}, err
	}

	// The engine reads blobs over the link when there is one, so it is made once the link is.
	h.blobStore = h.blobs()
	h.engine = NewEngine(h.root, h.store, h.blobStore, "", h.log.With("component", "apply"), h.pulse.beat)

	res, err := h.loop(ctx)
	h.pulse.beat()
	state := wire.StateStopping
	if res.StoodAsideFor != "" {
		state = wire.StateStandingAside
	}
	h.sendHeartbeat(bg, state, res.StoodAsideFor)
	return res, err
}

// openLocal takes what the host holds on this machine — the root's lock, the records, the
// store, the trusted target keys — and puts in force what it kept from the bus (the withdrawal
// list, the window) before the bus answers: a host started while cut off still keeps them.
// closeAll releases them in reverse; on an error, what was taken is released already.
func (h *Host) openLocal(ctx context.Context) (closeAll func(), err error) {
	var closers []func()
	release := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			release() // not closeAll: a return with an error has set it to nil
		}
	}()
	lock, err := rollback.LockHost(ctx, h.root, 10*time.Second)
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { lock.Unlock() })
	if h.records, err = rollback.OpenForHost(ctx, h.root); err != nil {
		return nil, err
	}
	closers = append(closers, func() { h.records.Close() })
	if h.store, err = h.openStore(ctx); err != nil {
		return nil, err
	}
	closers = append(closers, func() { h.store.Close() })
	h.loadTrust(ctx)
	if err := h.loadWithdrawn(ctx); err != nil {
		return nil, err
	}
	if err := h.loadBusSeq(ctx); err != nil {
		return nil, err
	}
	h.applyWithdrawals(ctx, 0, false)
	h.loadWindow()
	h.loadPlan()
	closers = append(closers, h.stopWindowTimer, func() {
		h.mu.Lock()
		if h.expiry != nil {
			h.expiry.Stop()
		}
		h.mu.Unlock()
	})
	return release, nil
}

// startLink opens the link, when a bus is configured, and starts reading its events and sending
// heartbeats under bg; without one the host runs disconnected, from the store.
func (h *Host) startLink(bg context.Context) error {
	cfg := h.opts.Config
	if len(cfg.NATSURLs) == 0 {
		h.log.Info("no NATS URL configured: running disconnected, reconciling from the store")
		return nil
	}
	var err error
	h.link, err = link.Open(bg, linkOptions(cfg, h.log.With("component", "link")))
	if err != nil {
		return err
	}
	if h.delivery, err = h.newDelivery(); err != nil {
		return err
	}
	h.wg.Add(3)
	go func() { defer h.wg.Done(); h.readEvents(bg) }()
	go func() { defer h.wg.Done(); h.heartbeatLoop(bg) }()
	go func() { defer h.wg.Done(); h.followRoots(bg) }()
	return nil
}

// openStore opens ROOT/store.db. A store that is not a readable database is moved aside and a
// fresh one made: it holds only what the bus sends again (the declaration) and history, and a
// host that cannot start over it would be judged a failing binary when the disk is to blame.
func (h *Host) openStore(ctx context.Context) (*store.Store, error) {
	path := filepath.Join(h.root, store.FileName)
	s, err := store.Open(ctx, path)
	if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrNewerSchema) {
		return s, err
	}
	aside, merr := store.MoveAside(path, time.Now())
	if merr != nil {
		return nil, fmt.Errorf("%w; %w", err, merr)
	}
	why := "store.db is not a readable database"
	if errors.Is(err, store.ErrNewerSchema) {
		why = "store.db is of a schema this host cannot read"
	}
	h.log.Error(why+": moved it aside and rescuing: the declaration is taken from the bus again, what is in its declared state adopted as it is, nothing removed",
		"store", path, "moved_to", aside, "err", err)
	if s, err = store.Open(ctx, path); err != nil {
		return nil, err
	}
	if err := s.BeginRescue(ctx, text.Cut(why, wire.MaxErrorBytes), aside, nil); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// loop is the reconcile loop: one reconcile at a time, triggers coalesced, the stand-aside check
// after every completed reconcile.
func (h *Host) loop(ctx context.Context) (Result, error) {
	h.triggers.kick(wire.TriggerStart)
	interval := h.opts.Config.ReconcileInterval.Std()
	drift := time.NewTimer(interval)
	defer drift.Stop()
	alive := time.NewTicker(h.opts.AliveEvery)
	defer alive.Stop()
	for {
		h.pulse.beat()
		select {
		case <-alive.C:
			continue
		case <-ctx.Done():
			h.log.Info("stopping")
			return Result{}, nil
		case <-drift.C:
			h.triggers.kick(wire.TriggerTimer)
		case <-h.triggers.ready:
		case <-h.recheck:
			// A version was staged while no reconcile ran: this is between reconciles.
			if next, err := h.standAsideFor(ctx); err != nil {
				h.log.Error("could not choose a version", "err", err)
			} else if next != "" {
				h.log.Info("standing aside", "for", next)
				return Result{StoodAsideFor: next}, nil
			}
			continue
		}
		trigger := h.triggers.take()
		if trigger == "" {
			continue
		}
		// A stop that arrives mid-reconcile takes effect after it: the reconcile runs on a
		// context that is not cancelled and checks for the stop between steps.
		h.reconcile(context.WithoutCancel(ctx), ctx.Done(), trigger)
		if ctx.Err() != nil {
			h.log.Info("stopping after the reconcile")
			return Result{}, nil
		}
		drift.Reset(interval)
		h.checkTrustExpiry()
		if trigger == wire.TriggerTimer {
			// The drift timer also detects the machine again (a runtime's engine may have
			// started since), apart from the loop: detection may take seconds.
			h.wg.Add(1)
			go func() { defer h.wg.Done(); h.detectMachine(ctx) }()
		}
		if next, err := h.standAsideFor(ctx); err != nil {
			h.log.Error("could not choose a version after the reconcile", "err", err)
		} else if next != "" {
			h.log.Info("standing aside", "for", next)
			return Result{StoodAsideFor: next}, nil
		}
		h.heartbeatSoon()
	}
}

// recheckSoon asks the loop to check Choose once no reconcile is running.
func (h *Host) recheckSoon() {
	select {
	case h.recheck <- struct{}{}:
	default:
	}
}

// standAsideFor returns the version Choose names if it is not this one, unless the maintenance
// window holds it (window.go: the window's opening checks again). The withdrawal list is
// applied to what is on disk first, so a withdrawn version is never stood aside for, and a
// withdrawn host steps down.
func (h *Host) standAsideFor(ctx context.Context) (string, error) {
	h.applyOnDisk(ctx)
	choice, err := h.records.Choose(ctx, h.root)
	if err != nil {
		return "", err
	}
	if choice.Version == h.opts.Version {
		h.holdForWindow(choice.Version) // waits for nothing: clears a wait left before
		return "", nil
	}
	if choice.Version == "" {
		// Nothing is runnable, not even this binary: exiting would leave the launcher nothing
		// to run, so keep going and say so.
		return "", fmt.Errorf("choose names no version (was this binary's directory removed or altered?); not standing aside")
	}
	if h.holdForWindow(choice.Version) {
		return "", nil // the window's opening rechecks
	}
	return choice.Version, nil
}

// DefaultAliveEvery is how often the host pulses the launcher's liveness pipe unless
// Options.AliveEvery says otherwise.
const DefaultAliveEvery = 10 * time.Second

// withDefaults returns o with every zero field at its default (decision 0041).
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Detector == nil {
		o.Detector = profile.NewDetector(time.Minute)
	}
	if o.AliveEvery <= 0 {
		o.AliveEvery = DefaultAliveEvery
	}
	return o
}
