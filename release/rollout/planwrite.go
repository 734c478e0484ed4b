package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// A rollout with a plan (decision 0047) writes one signed document under wire.PlanKey in the
// rollouts bucket rather than a target per node: a batch begun is one write raising the plan's
// In, a halt or an abort one write lowering it to the batches done, a completion one write
// saying so (after the fleet key names the version). Every write is a compare-and-set on the
// revision read just before, and a rollout never replaces the plan of a rollout started after
// it: a superseded controller's late write cannot undo its successor's.

// planIn is the plan's In once batches [0, i) are done: what a halt or an abort leaves held.
func (st State) planIn(i int) int {
	if i <= 0 || len(st.Batches) == 0 {
		return 0
	}
	return st.Batches[min(i, len(st.Batches))-1].In
}

// planOf is st's plan holding in of its batches, in state, for reason (bounded to one line).
// Seq, expiry and signatures are the signer's (targets.Signer.SignPlan).
func (st State) planOf(in int, state, reason string) wire.Plan {
	ref := st.Plan
	p := wire.Plan{Rollout: st.ID, Version: st.Version, Salt: ref.Salt, Canaries: append([]string{}, st.Nodes[:min(ref.Canaries, len(st.Nodes))]...),
		Waves: ref.Waves, In: in, State: state, SkipPlatforms: ref.SkipPlatforms, MeteredLast: ref.MeteredLast, Urgent: st.Urgent}
	if state == wire.PlanCompleted {
		p.In = p.Batches()
	}
	if reason != "" {
		p.Reason = txt.Cut(txt.Printable(strings.Join(strings.Fields(reason), " ")), wire.MaxPlanReasonBytes)
	}
	return p
}

// errPlanTaken: the plan key holds the plan of a rollout started after this one.
var errPlanTaken = errors.New("the rollout plan on the bus is a newer rollout's")

// readPlan reads the plan key: the plan (ok false when absent, deleted or unreadable, err nil)
// and the key's revision (0 when it never had a value), what the next write compares with.
func (s *store) readPlan(ctx context.Context) (p wire.Plan, ok bool, rev uint64, err error) {
	e, present, err := s.entry(ctx, s.rollouts, wire.PlanKey)
	if err != nil || !present {
		// Create (rev 0) takes a key whose last value was deleted too.
		return wire.Plan{}, false, 0, err
	}
	p, perr := wire.ParsePlan(e.Value())
	if perr != nil {
		s.log.Warn("the rollout plan on the bus is unreadable; it is replaced", "revision", e.Revision(), "err", perr)
		return wire.Plan{}, false, e.Revision(), nil
	}
	return p, true, e.Revision(), nil
}

// writePlan writes st's plan holding in batches in state (planOf), and returns the plan key's
// revision holding it. A plan on the bus that says exactly that already, signed by this
// controller's key and not due to be signed again, is left as it is. errPlanTaken when the key
// holds the plan of a rollout started after st.
func (s *store) writePlan(ctx context.Context, st State, in int, state, reason string) (uint64, error) {
	want := st.planOf(in, state, reason)
	for range 10 {
		cur, ok, rev, err := s.readPlan(ctx)
		if err != nil {
			return 0, err
		}
		if ok && cur.Rollout != st.ID && startedAfter(cur.Rollout, st.ID) {
			// Only a rollout the bucket holds counts: a plan written by someone who is not the
			// release side (nodes refuse it) must not keep the operator's rollouts off the bus.
			if _, ok, err := s.entry(ctx, s.rollouts, stateKey(cur.Rollout)); err != nil {
				return 0, err
			} else if ok {
				return 0, fmt.Errorf("%w (%s)", errPlanTaken, txt.Bound(cur.Rollout))
			}
		}
		if ok && samePlan(cur, want) && s.w.Signer.SignedPlan(cur) && !s.w.Signer.PlanDue(cur) {
			return rev, nil
		}
		next := want
		var prev uint64
		if ok {
			prev = cur.Seq
		}
		if err := s.w.Signer.SignPlan(&next, prev); err != nil {
			return 0, fmt.Errorf("sign the rollout plan: %w", err)
		}
		out, err := s.save(ctx, s.rollouts, wire.PlanKey, next.Marshal(), rev)
		if errors.Is(err, errConflict) {
			continue // written meanwhile (a keeper signing it again): judge it again
		}
		if err != nil {
			return 0, err
		}
		return out, nil
	}
	return 0, errors.New("the rollout plan kept changing while this controller wrote it")
}

// samePlan reports whether a and b say the same, signatures, seq and expiry aside.
func samePlan(a, b wire.Plan) bool {
	a.Seq, a.Expires, a.SignatureList = 0, "", wire.SignatureList{}
	b.Seq, b.Expires, b.SignatureList = 0, "", wire.SignatureList{}
	return string(a.SigningText()) == string(b.SigningText())
}

// startedAfter reports whether rollout a was started after rollout b, by the second in their
// ids (rolloutID); ids of one second are not ordered.
func startedAfter(a, b string) bool {
	ta, _, _ := strings.Cut(a, "-")
	tb, _, _ := strings.Cut(b, "-")
	return len(ta) == len(tb) && ta > tb
}

// planHolds reports whether the plan p (read at rev) is st's, running, holding at least in
// batches: a batch resumed finds its nodes told already.
func planHolds(p wire.Plan, ok bool, st State, in int) bool {
	return ok && p.Rollout == st.ID && p.Version == st.Version && p.State == wire.PlanRunning && p.In >= in
}

// pinnedNodes are the nodes whose own target key holds a value: one listing of the targets
// bucket's node keys, not a read per node.
func (s *store) pinnedNodes(ctx context.Context) (map[string]bool, error) {
	out := map[string]bool{}
	err := retry(ctx, s.log, "list the nodes' own targets", func(ctx context.Context) error {
		clear(out)
		kl, err := s.targets.ListKeysFiltered(ctx, wire.NodeTargetKey(">"))
		if err != nil {
			return ignoreNoKeys(err)
		}
		defer kl.Stop()
		for k := range kl.Keys() {
			out[strings.TrimPrefix(k, wire.NodeTargetKey(""))] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the nodes' own targets in %s: %w", s.targets.Bucket(), err)
	}
	return out, nil
}

// ignoreNoKeys is nil for a listing of a bucket with no such key.
func ignoreNoKeys(err error) error {
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil
	}
	return err
}
