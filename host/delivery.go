package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/deliver"
	"github.com/novox/mesh-host/wire"
)

// delivery is the host fetching and staging the version its target names: one at a time, the
// newest target replacing any delivery still in progress.
type delivery struct {
	d       *deliver.Deliverer
	latest  deliver.Latest
	cancel  context.CancelFunc // of the delivery in progress; nil once it ended
	version string             // what is being delivered, or was last
	run     uint64             // numbers deliveries: one that ends clears only its own cancel
	refused refusal            // the last refusal a delivery recorded
	// recheck is the version whose manifest is to be read again and the newest revision of its
	// target (recheckPlatform); version "" when none is pending. One is pending at a time,
	// however often the target arrives.
	recheck struct {
		version  string
		revision uint64
	}
}

// refusal is a delivery's refusal as recorded: the same one for the same target (it arrives
// again after every reconnect) is not recorded twice.
type refusal struct {
	version  string
	revision uint64
	reason   string
}

// newDelivery makes the deliverer when the host has a link and trusts at least one release key.
// Without trusted keys nothing announced on the bus is fetched; the target is only reported.
func (h *Host) newDelivery() (*delivery, error) {
	if h.link == nil {
		return nil, nil
	}
	cfg := h.opts.Config
	if len(cfg.TrustedKeys) == 0 && h.trustNow().Version() == 0 {
		h.log.Warn("no root of trust and no trusted_keys configured: host versions announced on the bus will not be fetched")
		return nil, nil
	}
	d, err := deliver.New(deliver.Config{
		Root: h.root, JS: h.link.JetStream(), Names: wire.NamesFor(cfg.Prefix), Trust: h.trustNow,
		Records: h.records, Withdrawn: h.isWithdrawn, Log: h.log.With("component", "deliver"), PreflightArgs: h.opts.PreflightArgs,
		MaxFetchRate: cfg.MaxFetchRate, LegacyCredentials: h.link.LegacyCredentials,
	})
	if err != nil {
		return nil, err
	}
	return &delivery{d: d}, nil
}

// deliverTarget starts delivering version unless it is already on disk or on its way. A staged
// version makes the host check whether to stand aside and settles the target refusals it put
// right; a refusal is recorded and reported. A delivery that ended, refused or not, leaves
// nothing behind that keeps the next target of the version from being tried: the deliverer
// remembers a refusal for the manifest's bytes, so the same bytes are refused again unfetched
// (at the new target's revision) and a new manifest is delivered.
func (h *Host) deliverTarget(ctx context.Context, version string, revision uint64) {
	what := h.targetWhat() // "plan" when the plan put the version in force
	if version != "" && version != h.opts.Version {
		// A withdrawn version, and one this node marked bad, is refused whatever is on disk
		// (its directory may not be retired yet), and never fetched again.
		if reason, ok := h.isWithdrawn(version); ok {
			h.refuse(ctx, what, revision, fmt.Sprintf("target %s is withdrawn (%s): it is not fetched and not run", version, reason))
			version = ""
		} else if bad, reason, err := h.records.IsBad(ctx, version); err != nil {
			h.log.Error("could not read whether the target is marked bad", "err", err)
		} else if bad {
			h.refuse(ctx, what, revision, fmt.Sprintf("target %s is marked bad on this node and is not fetched again: %s", version, reason))
			version = ""
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	dl := h.delivery
	if dl == nil || version == "" || version == h.opts.Version || dl.d.Have(version) {
		if dl != nil && dl.cancel != nil && dl.version != version {
			dl.cancel()
			dl.cancel = nil
		}
		return
	}
	if dl.cancel != nil && dl.version == version {
		return
	}
	if dl.cancel != nil {
		dl.cancel()
	}
	dctx, cancel := context.WithCancel(ctx)
	dl.run++
	run := dl.run
	dl.cancel, dl.version = cancel, version
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		err := dl.d.Run(dctx, version, func(p deliver.Progress) {
			dl.latest.Report(p)
			h.heartbeatSoon()
		})
		// Ended before its outcome is acted on, so a target arriving meanwhile starts anew.
		h.mu.Lock()
		if dl.run == run {
			dl.cancel = nil
		}
		h.mu.Unlock()
		cancel()
		rctx := context.WithoutCancel(dctx)
		switch {
		case err == nil:
			h.log.Info("staged the target version; standing aside once no reconcile is running", "target", version)
			if err := h.store.SettleRefusals(rctx, what, revision); err != nil {
				h.log.Warn("could not forget the target refusals the delivered version put right", "err", err)
			}
			h.recheckSoon()
		case errors.Is(err, context.Canceled):
		default:
			if e := (*deliver.Error)(nil); errors.As(err, &e) && e.Kind == deliver.KindNoPlatform {
				h.recheckPlatform(ctx, version, revision)
			}
			r := refusal{version: version, revision: revision, reason: err.Error()}
			h.mu.Lock()
			again := dl.refused == r
			dl.refused = r
			h.mu.Unlock()
			if again {
				h.log.Debug("the target arrived again and is refused as before", "target", version, "revision", revision)
				return
			}
			h.refuse(rctx, what, revision, r.reason)
		}
	}()
}

// recheckPlatform delivers version again one heartbeat interval later while it is still the
// target in force: a version refused for having no build for this node's platform is taken once
// its manifest is republished with one. A node creates no consumer, so it cannot watch the
// releases bucket; this costs one read of the manifest an interval, the same bytes refused again
// unfetched and not recorded twice.
func (h *Host) recheckPlatform(ctx context.Context, version string, revision uint64) {
	h.mu.Lock()
	dl := h.delivery
	pending := dl.recheck.version == version
	if !pending || revision > dl.recheck.revision {
		dl.recheck.version, dl.recheck.revision = version, revision
	}
	h.mu.Unlock()
	if pending {
		return
	}
	every := h.opts.Config.HeartbeatInterval.Std()
	if every <= 0 {
		every = config.DefaultHeartbeatInterval // a Config not made by Load
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTimer(every)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		// Cleared before delivering, so the refusal that delivery may end in arms the next one.
		h.mu.Lock()
		rc := dl.recheck
		dl.recheck.version, dl.recheck.revision = "", 0
		h.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if v, expired := h.targetNow(time.Now()); v == rc.version && expired == nil {
			h.deliverTarget(ctx, rc.version, rc.revision)
		}
	}()
}

// cancelDelivery stops a delivery of version in progress, if there is one.
func (h *Host) cancelDelivery(version string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if dl := h.delivery; dl != nil && dl.cancel != nil && dl.version == version {
		dl.cancel()
		dl.cancel = nil
	}
}

// fetch is the delivery's progress for the heartbeat, or nil.
func (h *Host) fetch() *wire.Fetch {
	h.mu.Lock()
	dl := h.delivery
	h.mu.Unlock()
	if dl == nil {
		return nil
	}
	return dl.latest.Fetch()
}
