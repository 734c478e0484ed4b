package host

import (
	"context"
	"errors"
	"time"

	"github.com/novox/mesh-host/host/deliver"
	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"golang.org/x/mod/semver"
)

// heartbeatSoon asks the heartbeat loop for a heartbeat now; asks made while one is being sent
// coalesce into one more.
func (h *Host) heartbeatSoon() {
	select {
	case h.beat <- struct{}{}:
	default:
	}
}

// heartbeatLoop sends a heartbeat when asked and every heartbeat interval while idle. It runs
// apart from the reconcile loop so a slow bus never holds up a reconcile.
//
// It also has the machine's profile detected once at its start, beside it rather than before
// it: detection can take seconds, and the first heartbeats go without a profile rather than
// wait. One more heartbeat follows when it ends.
func (h *Host) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(h.opts.Config.HeartbeatInterval.Std())
	defer t.Stop()
	detected := make(chan struct{})
	go func() {
		defer close(detected)
		if h.machine.profileNow() == nil { // the start reconcile may have detected first
			h.detectMachine(ctx)
		}
	}()
	defer func() { <-detected }() // the detection ends with ctx; nothing outlives the host
	profiled := detected
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.beat:
			t.Reset(h.opts.Config.HeartbeatInterval.Std())
		case <-profiled:
			profiled = nil
		}
		h.sendHeartbeat(ctx, wire.StateRunning, "")
	}
}

// sendHeartbeat builds and publishes one heartbeat; while the link is down it is skipped (the
// stream keeps the last one sent, and silence is what the fleet view reads).
func (h *Host) sendHeartbeat(ctx context.Context, state, standingAsideFor string) {
	if h.link == nil {
		return
	}
	hb := h.heartbeat(ctx, state, standingAsideFor)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := h.link.PublishHeartbeat(ctx, hb); err != nil && !errors.Is(err, link.ErrNotConnected) && !errors.Is(err, context.Canceled) {
		h.log.Warn("could not send a heartbeat", "err", err)
	}
}

// heartbeat is what this host says about itself now. Whatever cannot be read is left empty and
// logged: a partial heartbeat is better than silence, which means something else.
func (h *Host) heartbeat(ctx context.Context, state, standingAsideFor string) wire.Heartbeat {
	target, expiredSince := h.targetNow(time.Now())
	hb := wire.Heartbeat{
		Node: h.opts.Config.Node, State: state, Running: h.opts.Version,
		StandingAsideFor: standingAsideFor, Target: target, TargetExpiredSince: expiredSince, Fetch: h.fetch(),
		UptimeS: int64(time.Since(h.started).Seconds()), SentAt: time.Now().UTC(),
		IntervalS: h.opts.Config.HeartbeatInterval.Std().Seconds(),
		// The newest manifest schema this host reads: a rollout of a schema 4 release is gated on it.
		ManifestSchema: deliver.ManifestSchema,
	}
	if h.link != nil {
		hb.Link = h.link.LastFailure()
	}
	warn := func(what string, err error) { h.log.Warn("heartbeat: could not read "+what, "err", err) }
	var err error
	if hb.KnownGood, err = h.records.KnownGood(ctx, h.root); err != nil {
		warn("known-good", err)
	}
	if hb.Staged, err = h.staged(ctx); err != nil {
		warn("staged versions", err)
	}
	if rbs, err := h.records.Rollbacks(ctx, 5); err != nil {
		warn("rollbacks", err)
	} else {
		for _, rb := range rbs {
			hb.Rollbacks = append(hb.Rollbacks, wire.Rollback{From: rb.From, To: rb.To, At: rb.At.UTC(),
				Reason: text.Cut(rb.Reason, wire.MaxReasonBytes), Output: text.Cut(rb.Output, wire.MaxOutputBytes)})
		}
	}
	if _, rev, ok, err := h.store.Held(ctx); err != nil {
		warn("the held declaration", err)
	} else if ok {
		hb.DeclarationRevision = rev
	}
	if r, ok, err := h.store.LastReconcile(ctx); err != nil {
		warn("the last reconcile", err)
	} else if ok {
		hb.LastReconcile = r.Wire()
		// Bounded when recorded; cut again for rows an older host wrote.
		hb.LastReconcile.Error = text.CutMiddle(hb.LastReconcile.Error, wire.MaxErrorBytes)
	}
	if r, ok, err := h.store.LastRescue(ctx); err != nil {
		warn("the last rescue", err)
	} else if ok {
		hb.Rescue = rescueReport(r)
	}
	if r, ok, err := h.store.LastRefusal(ctx); err != nil {
		warn("the last refusal", err)
	} else if ok {
		hb.Refused = r.Wire()
		hb.Refused.Error = text.CutMiddle(hb.Refused.Error, wire.MaxErrorBytes)
	}
	if hb.Fetch != nil {
		hb.Fetch.Error = text.CutMiddle(hb.Fetch.Error, wire.MaxErrorBytes)
	}
	if hb.Launcher, err = h.launcher(ctx); err != nil {
		warn("the launcher", err)
	}
	hb.Window = h.windowState()
	h.checkTrustExpiry()
	h.checkWithdrawalsExpiry(ctx)
	hb.TrustRoot = h.trustNow().Version()
	if since, ok := h.trustExpiredSince(); ok {
		since = since.UTC()
		hb.TrustExpiredSince = &since
	}
	hb.LinkClass = h.opts.Config.LinkClass
	hb.BusSeq, hb.BusCAs = h.busState()
	if h.link != nil && h.link.FollowsPlan() {
		hb.Plans = wire.PlanSchema // a rollout tells this node by its plan (decision 0047)
	}
	hb.Profile = h.machine.profileNow()
	hb.Inventory, hb.Drift = h.inventory(ctx)
	return hb
}

// launcher is the launcher running this host as the records say it, each text cut to its
// bound (docs/wire.md, "Heartbeat size"); nil when the records are older than launcher versions
// (the launcher running predates them) or say nothing of the launcher yet.
func (h *Host) launcher(ctx context.Context) (*wire.Launcher, error) {
	if !h.records.HasLaunchers() {
		return nil, nil
	}
	rep, err := h.records.LauncherStatus(ctx, h.root)
	if err != nil {
		return nil, err
	}
	if rep.Version == "" && rep.FloorVersion == "" {
		return nil, nil
	}
	l := &wire.Launcher{Version: text.Cut(rep.Version, wire.MaxLauncherVersionBytes),
		Floor: text.Cut(rep.FloorVersion, wire.MaxLauncherVersionBytes), State: rep.State}
	if rep.RolledBackFrom != "" && len(rep.Rollbacks) > 0 {
		rb := rep.Rollbacks[0] // the newest, the one RolledBackFrom names
		l.RolledBackFrom = text.Cut(rep.RolledBackFrom, wire.MaxLauncherVersionBytes)
		l.RolledBackAt, l.RollbackReason = rb.At.UTC(), text.Cut(rb.Reason, wire.MaxReasonBytes)
	}
	return l, nil
}

// staged lists the versions on disk newer than this one and not marked bad, newest first.
func (h *Host) staged(ctx context.Context) ([]string, error) {
	dirs, err := rollback.ScanVersions(h.root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range dirs {
		if !d.Version || semver.Compare(d.Name, h.opts.Version) <= 0 {
			continue
		}
		bad, _, err := h.records.IsBad(ctx, d.Name)
		if err != nil {
			return nil, err
		}
		if !bad {
			out = append(out, d.Name)
		}
	}
	return out, nil
}
