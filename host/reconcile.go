package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/blobs"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// errStopped ends a reconcile between steps when the host is asked to stop.
var errStopped = apply.ErrStopped

// reconcile runs one reconcile, records it in the store and, the first time one completes,
// confirms this version.
func (h *Host) reconcile(ctx context.Context, stop <-chan struct{}, trigger wire.Trigger) {
	began := time.Now()
	id, err := h.store.BeginReconcile(ctx, trigger)
	if err != nil {
		h.log.Error("could not record the reconcile's start; reconciling anyway", "err", err)
	}
	err = h.apply(ctx, stop)
	log := h.log.With("trigger", trigger, "duration", time.Since(began).Round(time.Millisecond))
	// The error is built from the declaration, so it is bounded before it is stored, sent or
	// logged (the engine bounds each step's error; this bounds the whole).
	errText := ""
	if err != nil {
		errText = text.CutMiddle(err.Error(), wire.MaxErrorBytes)
	}
	if id != 0 {
		if rerr := h.store.EndReconcile(ctx, id, err == nil, errText); rerr != nil {
			log.Error("could not record the reconcile's end", "err", rerr)
		}
	}
	if errors.Is(err, errStopped) {
		log.Info("reconcile stopped between steps")
		return
	}
	if err != nil {
		log.Warn("reconcile completed with errors", "err", errText)
	} else {
		log.Info("reconcile completed")
	}
	// Completing a reconcile confirms the binary even if a resource failed: a failing resource
	// is the machine's problem, not the binary's.
	h.mu.Lock()
	confirmed := h.confirmed
	h.mu.Unlock()
	if !confirmed {
		retired, err := h.records.Confirm(ctx, h.root, h.opts.Version, h.opts.StartID)
		if err != nil {
			h.log.Error("could not confirm this version", "err", err)
			return
		}
		h.mu.Lock()
		h.confirmed = true
		h.mu.Unlock()
		h.log.Info("confirmed", "retired", retired)
	}
}

// apply applies the declaration the host holds through the engine (one resource at a time,
// stopping at the first that fails, checking for a stop between steps), then reports what the
// host owns and what drifted for the heartbeat. No declaration held yet changes nothing: not
// even what an earlier `mesh-host apply` left owned is removed until a declaration says so.
func (h *Host) apply(ctx context.Context, stop <-chan struct{}) error {
	raw, _, ok, err := h.store.Held(ctx)
	if err != nil {
		return fmt.Errorf("read the held declaration: %w", err)
	}
	if !ok {
		h.reportApplied(ctx, nil, false)
		return nil
	}
	decl, err := wire.ParseDeclaration(raw, h.opts.Config.Node)
	if err != nil {
		// Only parsed declarations are held, so this is a store that was edited by hand or a
		// declaration format this version no longer reads.
		return fmt.Errorf("the held declaration no longer parses: %w", err)
	}
	// The parser knows only the default root; this host's own is checked here (and the
	// engine's Guard checks again, against symlinks, before every change).
	if err := wire.CheckDeclarationPaths(decl, h.root); err != nil {
		return err
	}
	// The container runtime is the profile's, detected again on the drift timer; the appliers
	// and the guard are made again for each reconcile (small values; the guard resolves the
	// root's symlinks once, for every resource).
	runtime := ""
	if p := h.machine.profileNow(); p != nil {
		runtime = p.ContainerRuntime
	} else if NeedsRuntime(ctx, decl, h.store) {
		runtime = h.machineProfile(ctx).ContainerRuntime
	}
	h.engine.Appliers = Appliers(h.root, h.blobStore, runtime)
	h.engine.Guard = apply.NewGuard(h.root) // the root's symlinks as they are now
	rescue, rescuing, rerr := h.store.PendingRescue(ctx)
	if rerr != nil {
		h.log.Warn("could not read whether a rescue is pending; reconciling as usual", "err", rerr)
	}
	h.engine.Adopt = rescuing
	rep, err := h.engine.Apply(ctx, decl, stop)
	h.engine.Adopt = false
	if rescuing && !errors.Is(err, apply.ErrStopped) {
		h.endRescue(ctx, rescue, rep, err)
	}
	h.reportApplied(ctx, rep.Drifted, err == nil)
	if errors.Is(err, apply.ErrStopped) {
		return errStopped
	}
	if err != nil {
		return err
	}
	if n := rep.Changed(); n > 0 {
		h.log.Info("applied the declaration", "changed", n, "drifted", len(rep.Drifted), "counts", rep.Counts)
	}
	h.pruneBlobs(decl)
	return nil
}

// pruneBlobs removes from ROOT/blobs what the declaration no longer names, after a complete
// apply (so after what is no longer declared was removed): the cache holds what the host may
// need again to put a resource back, never more. A blob pruned is fetched again if named later.
func (h *Host) pruneBlobs(d wire.Declaration) {
	c, ok := h.blobStore.(*blobs.Cache)
	if !ok {
		return
	}
	keep := map[string]bool{}
	for _, r := range d.Resources {
		switch s := r.Parsed.(type) {
		case *wire.FileSpec:
			keep[s.Source] = true
		case *wire.ArchiveSpec:
			keep[s.Source] = true
		case *wire.PackageSpec:
			keep[s.Source] = true
		}
	}
	if n, err := c.Prune(keep); err != nil {
		h.log.Warn("could not prune the blob cache", "err", err)
	} else if n > 0 {
		h.log.Info("pruned blobs no longer declared", "removed", n)
	}
}

// reportApplied hands the heartbeat what the host owns now, when it last applied a declaration
// completely, and what this reconcile found drifted.
func (h *Host) reportApplied(ctx context.Context, drifted []wire.Drifted, complete bool) {
	owned, err := h.store.OwnedCount(ctx)
	if err != nil {
		h.log.Warn("could not count what the host owns", "err", err)
	}
	h.mu.Lock()
	if complete {
		now := time.Now().UTC()
		h.lastApplied = &now
	} else if h.lastApplied == nil {
		if at, ok, err := h.store.LastApplied(ctx); err != nil {
			h.log.Warn("could not read when a declaration was last applied", "err", err)
		} else if ok {
			at = at.UTC()
			h.lastApplied = &at
		}
	}
	owned.AppliedAt = h.lastApplied
	h.mu.Unlock()
	h.machine.setApplied(owned, drifted)
}
