package host

import (
	"context"
	"fmt"

	"github.com/novox/mesh-host/host/link"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// readEvents handles what the link reports, at all times (also during a reconcile, so the
// watches never stall). A declaration is validated and held before it triggers a reconcile; one
// that is refused is recorded and reported, and the held one stays.
//
// When trust moves (a root walked), the target, withdrawal list, window, bus configuration and
// rollout plan last reported are judged again with it: one refused for a key the node did not trust yet is taken now.
func (h *Host) readEvents(ctx context.Context) {
	var last lastSigned
	events := h.link.Events()
	for {
		var ev link.Event
		select {
		case e, ok := <-events:
			if !ok {
				return
			}
			ev = e
		case <-h.trust.moved:
			last.again(ctx, h)
			continue
		}
		switch ev := ev.(type) {
		case link.Connected:
			h.log.Info("linked to the bus", "url", ev.URL)
			h.heartbeatSoon()
		case link.Reconnected:
			h.log.Info("linked to the bus again", "url", ev.URL)
			h.triggers.kick(wire.TriggerReconnect)
			h.heartbeatSoon()
		case link.Disconnected:
			h.log.Warn("lost the bus; reconciling from the store until it returns", "err", ev.Err)
		case link.RootNoticed:
			// Also at the start of every session (each connect and reconnect): the walk.
			h.kickRoots()
		case link.DeclarationArrived:
			h.declarationArrived(ctx, ev)
		case link.TargetChanged:
			last.target = &ev
			h.mu.Lock()
			h.linkTarget = &ev
			h.mu.Unlock()
			h.decideTarget(ctx)
		case link.PlanArrived:
			last.plan = &ev
			h.planArrived(ctx, ev)
		case link.WithdrawalsArrived:
			last.withdrawals = &ev
			h.withdrawalsArrived(ctx, ev)
		case link.WindowChanged:
			last.window = &ev
			h.windowChanged(ctx, ev)
		case link.BusArrived:
			last.bus = &ev
			h.busArrived(ctx, ev)
		}
	}
}

// lastSigned are the signed documents the link reported last, judged again when trust moves.
type lastSigned struct {
	target      *link.TargetChanged
	withdrawals *link.WithdrawalsArrived
	window      *link.WindowChanged
	bus         *link.BusArrived
	plan        *link.PlanArrived
}

// again judges each again with the trust held now; what was taken already is taken again
// harmlessly (the same sequence number), and a delivery the manifest's signature refused is
// tried again (the deliverer reads it anew once trust moved).
func (l lastSigned) again(ctx context.Context, h *Host) {
	if l.withdrawals != nil && !l.withdrawals.Deleted {
		h.withdrawalsArrived(ctx, *l.withdrawals)
	}
	if l.window != nil {
		h.windowChanged(ctx, *l.window)
	}
	if l.bus != nil && !l.bus.Deleted {
		h.busArrived(ctx, *l.bus)
	}
	if l.plan != nil && !l.plan.Deleted {
		h.planArrived(ctx, *l.plan) // decides the target too
	} else if l.target != nil {
		h.decideTarget(ctx)
	}
}

func (h *Host) declarationArrived(ctx context.Context, ev link.DeclarationArrived) {
	log := h.log.With("revision", ev.Revision)
	if ev.Deleted {
		// Deleting the key is not a declaration of nothing: keep holding the last one. To manage
		// nothing, declare an empty resource list.
		h.refuse(ctx, "declaration", ev.Revision, "the declaration was deleted on the bus; keeping the one held (declare an empty resource list to manage nothing)")
		return
	}
	// By size first: a declaration over the limit is not even parsed.
	if err := wire.CheckDeclarationSize(int64(len(ev.Value)), h.maxDeclarationBytes()); err != nil {
		h.refuse(ctx, "declaration", ev.Revision, fmt.Sprintf("%v; keeping the one held (split it, or raise max_declaration_bytes in host.json or MESH_HOST_MAX_DECLARATION_BYTES)", err))
		return
	}
	d, err := wire.ParseDeclaration(ev.Value, h.opts.Config.Node)
	if err == nil {
		err = wire.CheckDeclarationPaths(d, h.root) // the parser knows only the default root
	}
	if err != nil {
		h.refuse(ctx, "declaration", ev.Revision, err.Error())
		return
	}
	if err := h.store.Hold(ctx, ev.Value, ev.Revision); err != nil {
		log.Error("could not hold the declaration that arrived", "err", err)
		return
	}
	log.Info("declaration arrived")
	h.triggers.kick(wire.TriggerDeclaration)
}

// refuse records a refused input and reports it in the next heartbeat. The reason quotes the
// input, so it is bounded before it is logged, stored or sent.
func (h *Host) refuse(ctx context.Context, what string, revision uint64, reason string) {
	reason = text.Cut(reason, wire.MaxErrorBytes)
	h.log.Warn("refused "+what, "revision", revision, "reason", reason)
	if err := h.store.RecordRefusal(ctx, what, revision, reason); err != nil {
		h.log.Error("could not record the refusal", "err", err)
	}
	h.heartbeatSoon()
}

// maxDeclarationBytes is the configured limit, or the default for a Config not made by Load.
func (h *Host) maxDeclarationBytes() int64 {
	if n := h.opts.Config.MaxDeclarationBytes; n > 0 {
		return n
	}
	return wire.DefaultMaxDeclarationBytes
}
