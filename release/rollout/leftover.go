package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// maxSupersedes bounds the chain of superseded rollouts a completion follows.
const maxSupersedes = 64

// leftBehind is a per-node key another rollout set: the node, and the version it set there.
type leftBehind struct {
	node, version string
}

// clearLeftBehind deletes the per-node keys that other rollouts set and left for nodes outside
// st's plan (complete deletes the plan's own): a rollout of st's release that was superseded,
// aborted or halted leaves the keys of its started batches, and a new plan leaves out the
// nodes that already run the release, so their keys would otherwise pin them for good
// (issue 18, 2b). Which keys a rollout set is read from its state in the rollouts bucket — the
// nodes of each batch it began, less those it left out — whichever controller drove it; the
// rollouts counted are every one of st's version and the chain st superseded (of any version).
// A key is deleted only while it still names the version that rollout set (compare-and-set):
// one naming anything else was set since by someone else (`mesh-release target --node`) and is
// theirs. It returns the nodes whose key it deleted.
func (s *store) clearLeftBehind(ctx context.Context, st State, workers int) ([]string, error) {
	left, err := s.leftBehind(ctx, st)
	if err != nil || len(left) == 0 {
		return nil, err
	}
	deleted := make([]bool, len(left))
	err = each(ctx, workers, len(left), func(ctx context.Context, i int) error {
		res, err := s.w.Update(ctx, wire.NodeTargetKey(left[i].node), nil, func(c targets.Current) targets.Decision {
			if c.Names(left[i].version) {
				return targets.Delete()
			}
			return targets.Leave()
		})
		deleted[i] = res.Deleted
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("clear the per-node targets earlier rollouts left: %w", err)
	}
	var out []string
	for i, l := range left {
		if deleted[i] && !slices.Contains(out, l.node) {
			out = append(out, l.node)
		}
	}
	return out, nil
}

// leftBehind lists the per-node keys other rollouts may have left that clearLeftBehind looks
// at, nodes of st's own plan excluded, each (node, version) once, in a stable order.
func (s *store) leftBehind(ctx context.Context, st State) ([]leftBehind, error) {
	ids, err := s.rolloutIDs(ctx)
	if err != nil {
		return nil, err
	}
	var others []string
	for _, id := range ids {
		if id != st.ID && versionOfID(id) == st.Version {
			others = append(others, id)
		}
	}
	for id, hops := st.Supersedes, 0; id != "" && hops < maxSupersedes; hops++ {
		if id == st.ID || slices.Contains(others, id) {
			break
		}
		others = append(others, id)
		prev, _, err := s.get(ctx, id)
		if err != nil {
			s.log.Warn("a superseded rollout's state is unreadable; the per-node targets it set are not cleared", "rollout", id, "err", err)
			break
		}
		id = prev.Supersedes
	}
	own := make(map[string]bool, len(st.Nodes))
	for _, n := range st.Nodes {
		own[n] = true
	}
	seen := make(map[leftBehind]bool)
	var out []leftBehind
	for _, id := range others {
		prev, _, err := s.get(ctx, id)
		if err != nil {
			s.log.Warn("a rollout's state is unreadable; the per-node targets it set are not cleared", "rollout", id, "err", err)
			continue
		}
		if !prev.Status.Final() {
			continue // its controller may be setting targets still: not this one's to clear
		}
		for _, l := range prev.targeted() {
			if k := (leftBehind{l, prev.Version}); !own[l] && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	slices.SortFunc(out, func(a, b leftBehind) int {
		if c := strings.Compare(a.node, b.node); c != 0 {
			return c
		}
		return strings.Compare(a.version, b.version)
	})
	return out, nil
}

// targeted are the nodes whose key the rollout may have set: those of every batch it began,
// less the ones it listed as left out of it and those that took its plan (decision 0047).
func (st State) targeted() []string {
	type at struct {
		node  string
		batch int
	}
	leftOut := make(map[at]bool, len(st.LeftOut))
	for _, lo := range st.LeftOut {
		leftOut[at{lo.Node, lo.Batch}] = true
	}
	var out []string
	for i, b := range st.Batches {
		if b.Started.IsZero() {
			continue
		}
		start := st.batchStart(i)
		for k, n := range st.BatchNodes(i) {
			if !leftOut[at{n, i}] && !st.reads(start+k) {
				out = append(out, n)
			}
		}
	}
	return out
}

// perNodeNodes are the rollout's nodes that do not read plans: every node of a rollout without
// a plan.
func (st State) perNodeNodes() []string {
	if st.Plan == nil {
		return st.Nodes
	}
	var out []string
	for i, n := range st.Nodes {
		if !st.reads(i) {
			out = append(out, n)
		}
	}
	return out
}

// rolloutIDs lists the ids of the rollouts in the bucket.
func (s *store) rolloutIDs(ctx context.Context) ([]string, error) {
	var ids []string
	err := retry(ctx, s.log, "list the rollouts", func(ctx context.Context) error {
		ids = nil
		kl, err := s.rollouts.ListKeysFiltered(ctx, "rollout.>")
		if err != nil {
			return err
		}
		defer kl.Stop()
		for k := range kl.Keys() {
			ids = append(ids, strings.TrimPrefix(k, "rollout."))
		}
		return nil
	})
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the rollouts in %s: %w", s.rollouts.Bucket(), err)
	}
	return ids, nil
}
