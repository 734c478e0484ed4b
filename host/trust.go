package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// Who may tell a node what (decision 0011): a target is acted on only when one of the trusted
// target keys signed it for the key it is stored under, with a sequence number above (or the
// same target as) the one this node last accepted under that key, and while it has not
// expired. The withdrawal list is verified and numbered the same way; every version it names is
// marked bad here (not a failure), never fetched, and stood aside from.

// inForce is the target this host accepted last: what it acts on while it has not expired.
type inForce struct {
	key    string
	target wire.Target
}

// targetChanged verifies the target the link reports and, if it is accepted, puts it in force:
// delivered unless it has expired. A refused target leaves the one accepted before in force.
func (h *Host) targetChanged(ctx context.Context, ev link.TargetChanged) {
	keep := h.keeping()
	if ev.Err != nil {
		h.refuse(ctx, "target", ev.Revision, fmt.Sprintf("%v; %s", ev.Err, keep))
		return
	}
	if ev.Target == nil {
		h.setTarget(nil)
		h.log.Info("no target: neither this node's key nor the fleet key is set")
		h.heartbeatSoon()
		h.deliverTarget(ctx, "", ev.Revision)
		return
	}
	t := *ev.Target
	if err := verifyTarget(t, ev.Key, h.trustNow(), h.now()); err != nil {
		h.refuse(ctx, "target", ev.Revision, fmt.Sprintf("%s %s refused: %v; %s", ev.Key, t.Version, err, keep))
		return
	}
	if held := h.heldByExpiry(ev.Key, t); held != "" {
		h.refuse(ctx, "target", ev.Revision, held+"; "+keep)
		return
	}
	same, err := h.store.AcceptSigned(ctx, store.TargetWhat, ev.Key, t.Seq, t.Signature)
	switch {
	case errors.Is(err, store.ErrReplay), errors.Is(err, store.ErrSeqReused), errors.Is(err, store.ErrSeqAhead):
		h.refuse(ctx, "target", ev.Revision, fmt.Sprintf("%s %s refused: %v; %s", ev.Key, t.Version, err, keep))
		return
	case err != nil && ctx.Err() != nil:
		return // stopping: the target arrives again at the next start
	case err != nil:
		h.refuse(ctx, "target", ev.Revision, fmt.Sprintf("%s %s not acted on: could not check its sequence number against the last accepted: %v; %s", ev.Key, t.Version, err, keep))
		return
	}
	h.setTarget(&inForce{key: ev.Key, target: t})
	log := h.log.With("target", t.Version, "key", ev.Key, "seq", t.Seq, "expires", t.Expires)
	h.heartbeatSoon()
	if t.ExpiredAt(time.Now()) {
		log.Warn("the target in force has expired: not acting on it, running what this node has until a target signed again arrives")
		h.deliverTarget(ctx, "", ev.Revision)
		return
	}
	if same {
		log.Debug("target arrived again")
	} else {
		log.Info("target accepted")
	}
	h.deliverTarget(ctx, t.Version, ev.Revision)
}

// keeping says what stays in force when a target is refused, for the refusal's text.
func (h *Host) keeping() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target == nil {
		return "no target was accepted before, so this node has none"
	}
	return fmt.Sprintf("the target accepted before stays in force (%s %s, seq %d)", h.target.key, h.target.target.Version, h.target.target.Seq)
}

// setTarget puts t in force (nil: none) and arms a timer for its expiry, which stops acting on
// it then: a delivery in progress for it is cancelled, and heartbeats say it expired.
func (h *Host) setTarget(t *inForce) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.target = t
	if h.expiry != nil {
		h.expiry.Stop()
		h.expiry = nil
	}
	if t == nil {
		return
	}
	left := time.Until(t.target.ExpiresAt())
	if left <= 0 {
		return
	}
	h.expiry = time.AfterFunc(left, func() {
		h.mu.Lock()
		current := h.target == t
		h.mu.Unlock()
		if !current {
			return
		}
		h.log.Warn("the target in force has expired: not acting on it, running what this node has until a target signed again arrives",
			"target", t.target.Version, "key", t.key, "expires", t.target.Expires)
		h.cancelDelivery(t.target.Version)
		h.heartbeatSoon()
	})
}

// targetNow is the target in force and, if it has expired, when.
func (h *Host) targetNow(now time.Time) (version string, expiredSince *time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target == nil {
		return "", nil
	}
	if h.target.target.ExpiredAt(now) {
		at := h.target.target.ExpiresAt().UTC()
		expiredSince = &at
	}
	return h.target.target.Version, expiredSince
}

// withdrawalsArrived verifies the withdrawal list the link reports, keeps it and applies it.
func (h *Host) withdrawalsArrived(ctx context.Context, ev link.WithdrawalsArrived) {
	if ev.Deleted {
		if n := len(h.withdrawnNow()); n > 0 {
			h.refuse(ctx, "withdrawals", ev.Revision, fmt.Sprintf("the withdrawal list was deleted on the bus; a withdrawal is never undone, so the %d versions withdrawn stay withdrawn", n))
		}
		return
	}
	w, err := wire.ParseWithdrawals(ev.Value)
	if err != nil {
		h.refuse(ctx, "withdrawals", ev.Revision, fmt.Sprintf("%v; the versions withdrawn before stay withdrawn", err))
		return
	}
	if err := verifyWithdrawals(w, h.trustNow(), h.now()); err != nil {
		h.refuse(ctx, "withdrawals", ev.Revision, fmt.Sprintf("%v; the versions withdrawn before stay withdrawn", err))
		return
	}
	same, err := h.store.AcceptWithdrawals(ctx, w)
	switch {
	case errors.Is(err, store.ErrReplay), errors.Is(err, store.ErrSeqReused), errors.Is(err, store.ErrSeqAhead):
		h.refuse(ctx, "withdrawals", ev.Revision, fmt.Sprintf("withdrawal list refused: %v; the versions withdrawn before stay withdrawn", err))
		return
	case err != nil && ctx.Err() != nil:
		return // stopping: the list arrives again at the next start
	case err != nil:
		h.log.Error("could not keep the withdrawal list that arrived; it is applied when it arrives again", "revision", ev.Revision, "err", err)
		return
	}
	if !same {
		h.log.Info("withdrawal list accepted", "revision", ev.Revision, "seq", w.Seq, "withdrawn", len(w.Withdrawn))
	}
	if err := h.loadWithdrawn(ctx); err != nil {
		h.log.Error("could not read the versions withdrawn", "err", err)
		return
	}
	h.mu.Lock()
	h.withdrawalsRev = ev.Revision
	h.mu.Unlock()
	h.applyWithdrawals(ctx, ev.Revision, !same)
}

// loadWithdrawn reads every version withdrawn by a list this host accepted from the store.
func (h *Host) loadWithdrawn(ctx context.Context) error {
	list, err := h.store.Withdrawn(ctx)
	if err != nil {
		return err
	}
	m := make(map[string]wire.Withdrawn, len(list))
	for _, e := range list {
		m[e.Version] = e
	}
	h.mu.Lock()
	h.withdrawn = m
	h.mu.Unlock()
	return nil
}

func (h *Host) withdrawnNow() map[string]wire.Withdrawn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.withdrawn
}

// isWithdrawn reports whether version is withdrawn, and why; delivery asks it.
func (h *Host) isWithdrawn(version string) (reason string, ok bool) {
	e, ok := h.withdrawnNow()[version]
	return e.Reason, ok
}

// withdrawnReason is the bad mark's reason for a withdrawn version.
func withdrawnReason(e wire.Withdrawn) string { return "withdrawn: " + e.Reason }

// applyWithdrawals marks every withdrawn version this node knows bad (not a failure), stops a
// delivery of one, and, if this node runs one, has it stand aside once no reconcile runs; a
// fresh list (not the one accepted before) also refuses a target in force that it withdraws
// (a target arriving later is refused by deliverTarget). revision is the list's KV revision,
// for refusals.
func (h *Host) applyWithdrawals(ctx context.Context, revision uint64, fresh bool) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	withdrawn := h.withdrawnNow()
	if len(withdrawn) == 0 {
		return
	}
	for v, e := range withdrawn {
		if v == h.opts.Version {
			continue // below: only if there is something to step down to
		}
		h.markWithdrawn(ctx, v, e)
		h.cancelDelivery(v)
	}
	if v, _ := h.targetNow(time.Now()); fresh && v != "" && v != h.opts.Version {
		if e, ok := withdrawn[v]; ok {
			h.refuse(ctx, "target", revision, fmt.Sprintf("target %s is withdrawn (%s): it is not fetched and not run", v, e.Reason))
		}
	}
	if h.stepDownFromWithdrawn(ctx, revision) {
		h.recheckSoon()
	}
}

// applyOnDisk is the part of applyWithdrawals that can change between lists, run before every
// stand-aside check: a withdrawn version that appeared on disk (installed by hand) is marked
// bad, and this host's own withdrawn version is marked once there is something to step down to.
func (h *Host) applyOnDisk(ctx context.Context) {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	withdrawn := h.withdrawnNow()
	if len(withdrawn) == 0 {
		return
	}
	dirs, err := rollback.ScanVersions(h.root)
	if err != nil {
		h.log.Error("could not list the versions on disk to check them against the withdrawal list", "err", err)
		return
	}
	for _, d := range dirs {
		if e, ok := withdrawn[d.Name]; ok && d.Version && d.Name != h.opts.Version {
			h.markWithdrawn(ctx, d.Name, e)
		}
	}
	h.mu.Lock()
	rev := h.withdrawalsRev
	h.mu.Unlock()
	h.stepDownFromWithdrawn(ctx, rev)
}

// markWithdrawn marks version bad with the withdrawal's reason if this node has a record of it
// and it is not bad yet.
func (h *Host) markWithdrawn(ctx context.Context, version string, e wire.Withdrawn) {
	rec, known, err := h.records.Lookup(ctx, version)
	if err != nil {
		h.log.Error("could not read the records of a withdrawn version", "version", version, "err", err)
		return
	}
	if !known || rec.Bad {
		return
	}
	if err := h.records.MarkBad(ctx, version, withdrawnReason(e)); err != nil {
		h.log.Error("could not mark a withdrawn version bad", "version", version, "err", err)
		return
	}
	h.log.Warn("marked a withdrawn version bad; it is never run or fetched here again", "withdrawn", version, "reason", e.Reason)
}

// stepDownFromWithdrawn marks this host's own version bad when it is withdrawn and another
// version is there to step down to, and reports whether it did (the caller then stands aside).
// With nothing else on disk it keeps running, and says so once.
func (h *Host) stepDownFromWithdrawn(ctx context.Context, revision uint64) bool {
	e, ok := h.withdrawnNow()[h.opts.Version]
	if !ok {
		return false
	}
	if bad, _, err := h.records.IsBad(ctx, h.opts.Version); err != nil {
		h.log.Error("could not read whether this version is marked bad", "err", err)
		return false
	} else if bad {
		return true
	}
	ch, err := h.records.ChooseWithout(ctx, h.root, h.opts.Version)
	if err != nil {
		h.log.Error("could not choose a version to step down to from this withdrawn one", "err", err)
		return false
	}
	if ch.Version == "" {
		h.mu.Lock()
		said := h.saidNoStepDown
		h.saidNoStepDown = true
		h.mu.Unlock()
		if !said {
			h.refuse(ctx, "withdrawals", revision, fmt.Sprintf("this node runs %s, which is withdrawn (%s), but no other version is on disk to step down to: it keeps running %s until a fixed version is delivered%s",
				h.opts.Version, e.Reason, h.opts.Version, skipped(ch.Skipped, h.opts.Version)))
		}
		return false
	}
	if err := h.records.MarkBad(ctx, h.opts.Version, withdrawnReason(e)); err != nil {
		h.log.Error("could not mark this withdrawn version bad", "err", err)
		return false
	}
	h.log.Warn("this version is withdrawn: marked it bad; standing aside once no reconcile runs", "reason", e.Reason, "for", ch.Version)
	return true
}

// skipped says why the versions Choose passed over cannot be run, for the operator.
func skipped(cs []rollback.Candidate, self string) string {
	var parts []string
	for _, c := range cs {
		switch {
		case c.Version == self:
		case c.Mismatch != "":
			parts = append(parts, c.Version+": "+c.Mismatch)
		case c.Bad:
			parts = append(parts, c.Version+": marked bad")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (passed over: " + strings.Join(parts, "; ") + ")"
}
