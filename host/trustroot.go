package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/truststore"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// The node follows the root of trust (decision 0045, issue 29 §2-§4). It holds a wire.Trust —
// the roots stored under ROOT/trust, or host.json's keys before the first — and walks the chain
// over the link: it asks for root.<N+1> in the releases bucket at its start, on every
// (re)connect, on a notice of a root written, and every RootPollBeats heartbeat intervals, until
// there is none, accepting each by Trust.Advance and storing it (truststore.Save) before using
// it. A root refused is a refusal ("root"), logged and reported, and stops nothing. When trust
// moves, the target, the withdrawal list and the window last reported are judged again, and the
// deliverer reads a manifest it refused for its signature again.
//
// While the newest root has expired the host keeps running and reconciling what it holds, and
// takes no new target; it says `trust expired since T` in its log (once), its heartbeat
// (trust_expired_since) and ROOT/trust-expired.json for `mesh-launcher status`.

// RootPollBeats is how many heartbeat intervals apart the host asks for the next root when no
// notice came (a node whose user may not subscribe to the notices follows by these polls).
const RootPollBeats = 10

// RefusedRoot is the refusal kind ("what") of a root the node did not take.
const RefusedRoot = "root"

// trustState is the trust the host verifies with, and the walk's bookkeeping.
type trustState struct {
	mu     sync.Mutex
	trust  wire.Trust
	broken error // the trust store did not load: nothing signed is taken, and no root is walked
	// refused is the last root refusal recorded, not recorded again at every poll; askErr the
	// last failure to ask for a root, logged once until an ask succeeds.
	refused string
	askErr  string
	// expired is the expiry last said (log and file); written says the file was put right
	// once since the start.
	expired time.Time
	written bool

	walk  sync.Mutex    // one walk at a time
	kick  chan struct{} // asks followRoots for a walk now
	moved chan struct{} // tells readEvents that trust moved: judge the last documents again
}

func newTrustState() trustState {
	return trustState{kick: make(chan struct{}, 1), moved: make(chan struct{}, 1)}
}

// trustNow is the trust every signed document is verified with now.
func (h *Host) trustNow() wire.Trust {
	h.trust.mu.Lock()
	defer h.trust.mu.Unlock()
	return h.trust.trust
}

// loadTrust reads ROOT/trust at start. A store that does not load or verify is not replaced by
// host.json's keys (a node does not go back): the host runs on, takes nothing signed, walks no
// root, and says why in its log and heartbeat until the file named is put right.
func (h *Host) loadTrust(ctx context.Context) {
	cfg := h.opts.Config
	t, err := truststore.Trust(h.root, cfg.TrustedKeys, cfg.TargetKeys())
	h.trust.mu.Lock()
	h.trust.trust, h.trust.broken = t, err
	h.trust.mu.Unlock()
	switch {
	case err != nil:
		h.refuse(ctx, RefusedRoot, 0, fmt.Sprintf("this node's trust store does not load, so it takes no signed document and follows no root until it is put right: %v", err))
	case t.Version() > 0:
		h.log.Info("trusting root", "trust_root", t.Version(), "expires", rootExpires(t))
	case len(cfg.TargetKeys()) == 0 && len(cfg.NATSURLs) > 0:
		h.log.Warn("no root of trust and no trusted_target_keys or trusted_keys configured: every target and withdrawal list on the bus will be refused as signed by a key this node does not trust")
	}
	h.checkTrustExpiry()
}

func rootExpires(t wire.Trust) string {
	r, _ := t.Root()
	return r.Expires
}

// kickRoots asks followRoots for a walk now.
func (h *Host) kickRoots() {
	select {
	case h.trust.kick <- struct{}{}:
	default:
	}
}

// followRoots walks the chain when kicked and every RootPollBeats heartbeat intervals, until
// ctx ends.
func (h *Host) followRoots(ctx context.Context) {
	every := h.opts.Config.HeartbeatInterval.Std()
	if every <= 0 {
		every = config.DefaultHeartbeatInterval // a Config not made by Load
	}
	poll := time.NewTicker(RootPollBeats * every)
	defer poll.Stop()
	// A walk that could not ask the bus (a timeout on a loaded bus, a reconnect under way) is
	// tried again soon, not at the next poll, which may be hours away.
	retry := time.NewTimer(0)
	<-retry.C
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.trust.kick:
		case <-poll.C:
		case <-retry.C:
		}
		moved, failed := h.walkRoots(ctx)
		if failed {
			retry.Reset(min(every, rootRetry))
		}
		if moved {
			select {
			case h.trust.moved <- struct{}{}:
			default:
			}
			h.checkTrustExpiry()
			h.heartbeatSoon()
		}
	}
}

// rootRetry is the longest a walk that could not ask the bus waits to ask again.
const rootRetry = 5 * time.Second

// walkRoots takes root.<N+1> from the bus while there is one, and reports whether trust moved
// and whether the bus could not be asked.
func (h *Host) walkRoots(ctx context.Context) (moved, failed bool) {
	h.trust.walk.Lock()
	defer h.trust.walk.Unlock()
	h.trust.mu.Lock()
	broken := h.trust.broken
	h.trust.mu.Unlock()
	if broken != nil || h.link == nil {
		return false, false
	}
	for ctx.Err() == nil {
		cur := h.trustNow()
		want := cur.Version() + 1
		raw, revision, found, err := h.link.Root(ctx, want)
		if err != nil {
			h.walkFailed(ctx, want, err)
			return moved, true
		}
		h.trust.mu.Lock()
		h.trust.askErr = ""
		h.trust.mu.Unlock()
		if !found {
			return moved, false
		}
		next, err := h.acceptRoot(cur, raw)
		if err != nil {
			h.refuseRoot(ctx, revision, fmt.Sprintf("%s %s: %v; %s", wire.NamesFor(h.opts.Config.Prefix).Releases(), wire.RootKey(want), err, keepsTrust(cur)))
			return moved, false
		}
		h.trust.mu.Lock()
		h.trust.trust, h.trust.refused = next, ""
		h.trust.mu.Unlock()
		h.log.Info("accepted root", "trust_root", next.Version(), "expires", rootExpires(next))
		moved = true
	}
	return moved, false
}

// walkFailed logs that the next root could not be asked for: at warning level once, then at
// debug level while the same failure repeats (a user that may not get it fails every poll).
func (h *Host) walkFailed(ctx context.Context, want uint64, err error) {
	if ctx.Err() != nil {
		return
	}
	h.trust.mu.Lock()
	again := h.trust.askErr == err.Error()
	h.trust.askErr = err.Error()
	h.trust.mu.Unlock()
	log := h.log.Warn
	if again {
		log = h.log.Debug
	}
	log("could not ask the bus for the next root; asking again at the next connect, notice or poll", "root", want, "err", err)
}

// keepsTrust says what a node keeps when a root is refused, for the refusal's text.
func keepsTrust(t wire.Trust) string {
	if t.Version() == 0 {
		return "this node keeps the keys host.json names"
	}
	return fmt.Sprintf("this node keeps root v%d", t.Version())
}

// acceptRoot parses raw and accepts it after cur, storing it before it is used.
func (h *Host) acceptRoot(cur wire.Trust, raw []byte) (wire.Trust, error) {
	r, err := wire.ParseRoot(raw)
	if err != nil {
		return cur, err
	}
	next, err := cur.Advance(r)
	if err != nil {
		return cur, err
	}
	if err := truststore.Save(h.root, r); err != nil {
		return cur, fmt.Errorf("not stored, so not used: %w", err)
	}
	return next, nil
}

// refuseRoot records a root refused, once for the same reason.
func (h *Host) refuseRoot(ctx context.Context, revision uint64, reason string) {
	h.trust.mu.Lock()
	again := h.trust.refused == reason
	h.trust.refused = reason
	h.trust.mu.Unlock()
	if again {
		h.log.Debug("the next root is refused as before", "reason", reason)
		return
	}
	h.refuse(ctx, RefusedRoot, revision, reason)
}

// trustExpiredSince is when the newest root expired, if it has by now.
func (h *Host) trustExpiredSince() (time.Time, bool) {
	return h.trustNow().ExpiredSince(h.now())
}

// checkTrustExpiry says, once each time it changes, whether trust has expired: the log line
// `trust expired since T` and ROOT/trust-expired.json (removed once trust is fresh), which
// `mesh-launcher status` reads. Nothing else follows from it: nothing expiring stops, rolls
// back or restarts a running host.
func (h *Host) checkTrustExpiry() {
	since, expired := h.trustExpiredSince()
	if !expired {
		since = time.Time{}
	}
	h.trust.mu.Lock()
	said, written := h.trust.expired, h.trust.written
	h.trust.expired, h.trust.written = since, true
	h.trust.mu.Unlock()
	if said.Equal(since) && written {
		return
	}
	var file *rollback.TrustExpired
	if expired {
		file = &rollback.TrustExpired{Since: since.UTC(), Root: h.trustNow().Version()}
		h.log.Warn(wire.TrustExpiredLine(since)+": running and reconciling what this node holds, taking no new target until a fresher root arrives",
			"trust_root", file.Root)
	} else if !said.IsZero() {
		h.log.Info("trust is fresh again: new targets are taken", "trust_root", h.trustNow().Version())
	}
	if err := rollback.WriteTrustExpired(h.root, file); err != nil {
		h.log.Warn("could not leave the trust expiry for mesh-launcher status", "err", err)
		h.trust.mu.Lock()
		h.trust.written = false
		h.trust.mu.Unlock()
	}
}

// heldByExpiry is the refusal of a new target while trust has expired, or "" when trust is
// fresh or t is the target already in force (which keeps being what this node runs).
func (h *Host) heldByExpiry(key string, t wire.Target) string {
	since, expired := h.trustExpiredSince()
	if !expired {
		return ""
	}
	h.mu.Lock()
	cur := h.target
	h.mu.Unlock()
	if cur != nil && cur.key == key && cur.target.Seq == t.Seq && cur.target.Version == t.Version {
		return ""
	}
	return fmt.Sprintf("%s %s not taken: %s (root v%d); this node takes no new target until a fresher root reaches it",
		key, t.Version, wire.TrustExpiredLine(since), h.trustNow().Version())
}

// keptList is the withdrawal list accepted last: its seq, expiry (zero: none) and revision, and
// the expiry already reported.
type keptList struct {
	seq      uint64
	expires  time.Time
	revision uint64
	said     bool
}

// checkWithdrawalsExpiry reports, once per list, that the withdrawal list accepted has expired:
// its withdrawals stay in force (a withdrawal is never undone), and a newer list is overdue —
// the node may be cut off from the lists the release side signed since (a freeze).
func (h *Host) checkWithdrawalsExpiry(ctx context.Context) {
	h.mu.Lock()
	l := h.withdrawalsList
	due := !l.said && !l.expires.IsZero() && !h.now().Before(l.expires)
	if due {
		h.withdrawalsList.said = true
	}
	h.mu.Unlock()
	if !due {
		return
	}
	h.refuse(ctx, "withdrawals", l.revision, fmt.Sprintf("the withdrawal list (seq %d) expired at %s: the versions it withdraws stay withdrawn (a withdrawal is never undone), and a newer list is overdue — is this node cut off from the lists signed since?",
		l.seq, l.expires.UTC().Format(time.RFC3339)))
}
