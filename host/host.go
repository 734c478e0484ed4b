// Package host is mesh-host's run loop as a library type, so one process can run many hosts
// (the lab's fleets) and main stays small: hold the lock, reconcile on the four triggers,
// confirm after the first completed reconcile, and stand aside between reconciles when Choose
// names another version.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/rollback"
)

// Options are what one host needs besides its Config.
type Options struct {
	Config  config.Config
	Version string // the version this host is (stamped at build); Choose is compared with it
	StartID int64  // the launcher's record of this start (MESH_HOST_START_ID); 0 when run alone
	Logger  *slog.Logger
}

// Result says why Run returned without error.
type Result struct {
	StoodAsideFor string // non-empty: Choose named this version; exit 0 so the launcher runs it
}

// Host is one node's host.
type Host struct {
	opts      Options
	log       *slog.Logger
	records   *rollback.Records
	started   time.Time
	triggers  *triggers
	confirmed bool
}

// New makes a host; nothing happens until Run.
func New(opts Options) (*Host, error) {
	if opts.Version == "" {
		return nil, errors.New("host: no version given")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Host{
		opts:     opts,
		log:      opts.Logger.With("node", opts.Config.Node, "version", opts.Version),
		triggers: newTriggers(),
	}, nil
}

// Run holds the host lock and reconciles until ctx ends (a stop: it returns after the reconcile
// in progress, if any) or until, after a completed reconcile, Choose names another version.
func (h *Host) Run(ctx context.Context) (Result, error) {
	h.started = time.Now()
	root := h.opts.Config.Root
	lock, err := rollback.LockHost(ctx, root, 10*time.Second)
	if err != nil {
		return Result{}, err
	}
	defer lock.Unlock()
	h.records, err = rollback.OpenForHost(ctx, root)
	if err != nil {
		return Result{}, err
	}
	defer h.records.Close()
	if removed, err := rollback.CleanStaging(root); err != nil {
		h.log.Error("could not remove leftover staging directories", "err", err)
	} else if len(removed) > 0 {
		h.log.Info("removed staging directories left by a crash", "dirs", removed)
	}

	h.triggers.kick(TriggerStart)
	interval := h.opts.Config.ReconcileInterval.Std()
	drift := time.NewTimer(interval)
	defer drift.Stop()
	for {
		select {
		case <-ctx.Done():
			h.log.Info("stopping")
			return Result{}, nil
		case <-drift.C:
			h.triggers.kick(TriggerTimer)
		case <-h.triggers.ready:
		}
		trigger := h.triggers.take()
		if trigger == "" {
			continue
		}
		// A stop that arrives mid-reconcile takes effect after it: the reconcile itself runs
		// on a context that is not cancelled and checks for the stop between steps.
		h.reconcile(context.WithoutCancel(ctx), ctx.Done(), trigger)
		drift.Reset(interval)
		if next, err := h.standAsideFor(ctx); err != nil {
			h.log.Error("could not choose a version after the reconcile", "err", err)
		} else if next != "" {
			h.log.Info("standing aside", "for", next)
			return Result{StoodAsideFor: next}, nil
		}
	}
}

// reconcile runs one reconcile and, the first time one completes, confirms this version.
func (h *Host) reconcile(ctx context.Context, stop <-chan struct{}, trigger Trigger) {
	began := time.Now()
	err := h.apply(ctx, stop)
	log := h.log.With("trigger", trigger, "duration", time.Since(began).Round(time.Millisecond))
	if errors.Is(err, errStopped) {
		log.Info("reconcile stopped between steps")
		return
	}
	if err != nil {
		log.Warn("reconcile completed with errors", "err", err)
	} else {
		log.Info("reconcile completed")
	}
	// Completing a reconcile confirms the binary even if a resource failed: a failing resource
	// is the machine's problem, not the binary's.
	if !h.confirmed {
		retired, err := h.records.Confirm(ctx, h.opts.Config.Root, h.opts.Version, h.opts.StartID)
		if err != nil {
			h.log.Error("could not confirm this version", "err", err)
			return
		}
		h.confirmed = true
		h.log.Info("confirmed", "retired", retired)
	}
}

// errStopped ends a reconcile between steps when the host is asked to stop.
var errStopped = errors.New("stopped between steps")

// apply applies the declaration the host holds. Until the appliers arrive (a later issue) the
// declaration held is empty, which is a valid one: there is nothing to do, and that completes.
func (h *Host) apply(ctx context.Context, stop <-chan struct{}) error {
	select {
	case <-stop:
		return errStopped
	default:
	}
	_ = ctx
	return nil
}

// standAsideFor returns the version Choose names if it is not this one.
func (h *Host) standAsideFor(ctx context.Context) (string, error) {
	choice, err := h.records.Choose(ctx, h.opts.Config.Root)
	if err != nil {
		return "", err
	}
	if choice.Version == h.opts.Version {
		return "", nil
	}
	if choice.Version == "" {
		// Nothing is runnable, not even this binary (its directory was removed or altered):
		// exiting would leave the launcher nothing to run, so keep going and say so.
		return "", fmt.Errorf("choose names no version (was this binary's directory removed or altered?); not standing aside")
	}
	return choice.Version, nil
}
