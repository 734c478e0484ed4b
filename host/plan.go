package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
)

// A rollout plan (decision 0047) is one signed document the node evaluates for itself: it is in
// the rollout when the plan holds its id (wire.Plan.Holds). What the node runs, first found
// first: its own target key (an operator's pin, or a target a rollout gave it), the plan when it
// holds the node, the version an earlier plan held it at (carried: a plan of another rollout
// replaced that one before holding this node, as a superseding or restarted rollout does; kept
// until a plan completes), then the fleet key.

// PlanFile keeps the plan accepted last and the version carried, so that a restart, on or off
// the bus, follows them as before it.
const PlanFile = "plan.json"

// keptPlan is what PlanFile holds.
type keptPlan struct {
	Plan     *wire.Plan `json:"plan,omitempty"`
	Revision uint64     `json:"revision,omitempty"`
	// Carry is the version an earlier plan, of rollout CarryFrom, held this node at.
	Carry     string `json:"carry,omitempty"`
	CarryFrom string `json:"carry_from,omitempty"`
}

// planNode is this node as a plan sees it: its id, the platform whose builds it takes (as its
// profile says it, before the deliverer exists), and whether its link is metered.
func (h *Host) planNode() wire.PlanNode {
	n := wire.PlanNode{ID: h.opts.Config.Node, Metered: h.opts.Config.LinkClass == wire.LinkMetered}
	h.mu.Lock()
	dl := h.delivery
	h.mu.Unlock()
	if dl != nil {
		n.Platform = dl.d.Platform().String()
	} else if pr := h.machine.profileNow(); pr != nil {
		if p := wire.ProfilePlatform(*pr); p.OS != "" && p.Arch != "" {
			n.Platform = p.String()
		}
	}
	return n
}

// planArrived verifies the plan the link reports and, once accepted, evaluates it. A refused
// plan leaves the one accepted before in force.
func (h *Host) planArrived(ctx context.Context, ev link.PlanArrived) {
	keep := "the plan accepted before stays in force"
	if ev.Deleted {
		h.log.Info("the rollout plan was deleted on the bus; " + keep)
		return
	}
	p, err := wire.ParsePlan(ev.Value)
	if err != nil {
		h.refuse(ctx, store.PlanWhat, ev.Revision, fmt.Sprintf("%v; %s", err, keep))
		return
	}
	what := fmt.Sprintf("rollout plan %s seq %d", p.Rollout, p.Seq)
	if err := p.Verify(h.trustNow(), h.now()); err != nil {
		h.refuse(ctx, store.PlanWhat, ev.Revision, fmt.Sprintf("%s refused: %v; %s", what, err, keep))
		return
	}
	same, err := h.store.AcceptSigned(ctx, store.PlanWhat, wire.PlanKey, p.Seq, store.ContentID(p.SignatureList, p.SigningText()))
	switch {
	case errors.Is(err, store.ErrReplay), errors.Is(err, store.ErrSeqReused), errors.Is(err, store.ErrSeqAhead):
		h.refuse(ctx, store.PlanWhat, ev.Revision, fmt.Sprintf("%s refused: %v; %s", what, err, keep))
		return
	case err != nil && ctx.Err() != nil:
		return
	case err != nil:
		h.refuse(ctx, store.PlanWhat, ev.Revision, fmt.Sprintf("%s not acted on: could not check its sequence number: %v; %s", what, err, keep))
		return
	}
	me := h.planNode()
	if !same {
		h.log.Info("rollout plan accepted", "rollout", p.Rollout, "version", p.Version, "state", p.State, "in", p.In,
			"batches", p.Batches(), "this_node_batch", p.BatchOf(me), "holds_this_node", p.Holds(me))
	}
	h.putPlan(p, ev.Revision, me)
	h.decideTarget(ctx)
}

// putPlan puts p in force and keeps it on disk, carrying the version the plan it replaces held
// this node at when p is another rollout's, and dropping what is carried once a plan completes
// (the fleet key names its version then).
func (h *Host) putPlan(p wire.Plan, rev uint64, me wire.PlanNode) {
	h.mu.Lock()
	old := h.plan
	next := old.replacedBy(p, rev, me)
	h.plan = next
	h.mu.Unlock()
	if next.Carry != old.Carry {
		h.log.Info("the version an earlier plan held this node at is kept until a plan completes", "carry", next.Carry, "from", next.CarryFrom)
	}
	b, _ := json.Marshal(next)
	if err := atomicfile.WriteFile(filepath.Join(h.root, PlanFile), b, 0o600); err != nil {
		h.log.Warn("could not keep the rollout plan on disk; it holds until this host stops", "err", err)
	}
}

// replacedBy is what k becomes when plan p (at revision rev) replaces its plan.
func (k keptPlan) replacedBy(p wire.Plan, rev uint64, me wire.PlanNode) keptPlan {
	next := keptPlan{Plan: &p, Revision: rev, Carry: k.Carry, CarryFrom: k.CarryFrom}
	if k.Plan != nil && k.Plan.Rollout != p.Rollout && k.Plan.Holds(me) {
		next.Carry, next.CarryFrom = k.Plan.Version, k.Plan.Rollout
	}
	if p.State == wire.PlanCompleted {
		next.Carry, next.CarryFrom = "", ""
	}
	return next
}

// loadPlan reads the plan kept in PlanFile at start, verified again with the trust held now
// (expiry aside: an expired plan is judged as a target is, when it is evaluated).
func (h *Host) loadPlan() {
	b, err := os.ReadFile(filepath.Join(h.root, PlanFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var k keptPlan
	if err == nil {
		err = json.Unmarshal(b, &k)
	}
	if err == nil && k.Plan != nil {
		err = k.Plan.Verify(h.trustNow(), h.now())
	}
	if err != nil {
		h.log.Warn("the rollout plan kept on disk is not used; the plan on the bus is followed when the link reports it", "err", err)
		return
	}
	h.mu.Lock()
	h.plan = k
	h.mu.Unlock()
}

// decideTarget acts on the target this node follows now (see the order above).
func (h *Host) decideTarget(ctx context.Context) {
	h.mu.Lock()
	lt, kp := h.linkTarget, h.plan
	h.mu.Unlock()
	switch followed(lt, kp, h.planNode()) {
	case followPlan:
		h.planTarget(ctx, *kp.Plan, kp.Revision)
	case followCarried:
		h.carriedTarget(ctx, kp)
	case followKey:
		h.targetChanged(ctx, *lt)
	}
}

// What a node follows.
const (
	followNothing = iota // the link has not reported the target keys yet, and no plan holds it
	followKey            // the link's target: its own key, else the fleet key (or none)
	followPlan           // the plan, which holds it
	followCarried        // the version an earlier plan held it at
)

// followed says what node me follows, given the target key the link reported last (lt) and
// the plan kept (kp): its own key first, then the plan holding it, then what is carried, then
// the fleet key.
func followed(lt *link.TargetChanged, kp keptPlan, me wire.PlanNode) int {
	switch {
	case lt != nil && lt.Key == wire.NodeTargetKey(me.ID):
		return followKey
	case kp.Plan != nil && kp.Plan.Holds(me):
		return followPlan
	case kp.Carry != "":
		return followCarried
	case lt != nil:
		return followKey
	}
	return followNothing
}

// planTarget acts on the plan p holding this node, as on a target of p's version, seq, expiry
// and urgency: a refusal of it is said as the plan's (refused.what "plan", its revision).
func (h *Host) planTarget(ctx context.Context, p wire.Plan, rev uint64) {
	t := wire.Target{Version: p.Version, Seq: p.Seq, Expires: p.Expires, Urgent: p.Urgent}
	if held := h.heldByExpiry(wire.PlanKey, t); held != "" {
		h.refuse(ctx, store.PlanWhat, rev, held+"; "+h.keeping())
		return
	}
	h.putInForce(ctx, &inForce{key: wire.PlanKey, target: t}, rev, "the rollout plan holds this node", "rollout", p.Rollout)
}

// carriedTarget acts on the version an earlier plan held this node at.
func (h *Host) carriedTarget(ctx context.Context, kp keptPlan) {
	t := wire.Target{Version: kp.Carry}
	h.putInForce(ctx, &inForce{key: wire.PlanKey, target: t}, kp.Revision, "an earlier plan held this node at this version; kept until a plan completes", "from", kp.CarryFrom)
}

// putInForce puts t in force and delivers it unless it has expired.
func (h *Host) putInForce(ctx context.Context, t *inForce, rev uint64, why string, args ...any) {
	h.mu.Lock()
	cur := h.target
	h.mu.Unlock()
	same := cur != nil && cur.key == t.key && cur.target.Seq == t.target.Seq && cur.target.Version == t.target.Version
	h.setTarget(t)
	h.heartbeatSoon()
	log := h.log.With(append([]any{"target", t.target.Version, "seq", t.target.Seq, "expires", t.target.Expires}, args...)...)
	if t.target.ExpiredAt(time.Now()) {
		log.Warn("the target in force has expired: not acting on it, running what this node has until a target signed again arrives")
		h.deliverTarget(ctx, "", rev)
		return
	}
	if !same {
		log.Info(why)
	}
	h.deliverTarget(ctx, t.target.Version, rev)
}

// targetWhat is what a refusal of the target in force is said as: "plan" when a plan put it in
// force, else "target".
func (h *Host) targetWhat() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.target != nil && h.target.key == wire.PlanKey {
		return store.PlanWhat
	}
	return store.TargetWhat
}
