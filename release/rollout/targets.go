package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// each runs fn(i) for i in [0, n) on up to workers goroutines, and returns the first error
// (the rest are not started once one fails).
func each(ctx context.Context, workers, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	next := make(chan int)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// targetOf reads a node's target key.
func (s *store) targetOf(ctx context.Context, node string) (targets.Current, error) {
	return s.w.Read(ctx, wire.NodeTargetKey(node))
}

// ours reports whether c is a target for version this controller may leave as it is: signed
// with its key and not expired (the controller's Keep signs it again before it does). Anything
// else naming the version — unsigned, another key's, expired, not urgent in an urgent rollout —
// is signed again.
func (s *store) ours(c targets.Current, version string) bool {
	return c.Names(version) && s.w.Signer.Signed(c.Key, c.Target) && !c.Target.ExpiredAt(time.Now()) &&
		(c.Target.Urgent || !s.w.Signer.Urgent) // an urgent rollout signs a plain target again, urgent

}

// setTargets sets node.<id> = version, signed, for each node, by compare-and-set on what
// begin read (curs, index for index), and returns each key's revision. The caller passes
// only nodes whose key it read as not ours for the version (a key that is is left alone, so its
// revision — what a refusal is compared with — does not move when a batch is set again on
// resume); reading it again here would cost a third more round trips per node, which is what a
// 10,000-node batch waits on. A key changed since it was read is read again.
func (s *store) setTargets(ctx context.Context, nodes []string, curs []targets.Current, version string, workers int) ([]uint64, error) {
	revs := make([]uint64, len(nodes))
	err := each(ctx, workers, len(nodes), func(ctx context.Context, i int) error {
		res, err := s.w.Update(ctx, wire.NodeTargetKey(nodes[i]), &curs[i], func(c targets.Current) targets.Decision {
			if s.ours(c, version) {
				return targets.Leave()
			}
			return targets.SetTo(version)
		})
		revs[i] = res.Rev
		return err
	})
	return revs, err
}

// restoreTargets sets node.<id> back to the version each node ran (ran, index for index) where
// it still names version, the rollout's: a key naming anything else was not set by the rollout,
// or was set since by someone else, and is left alone (compare-and-set: a key changed while it
// is being set back is read and judged again). A node that ran no version has its key deleted.
func (s *store) restoreTargets(ctx context.Context, nodes, ran []string, version string, workers int) error {
	return each(ctx, workers, len(nodes), func(ctx context.Context, i int) error {
		_, err := s.w.Update(ctx, wire.NodeTargetKey(nodes[i]), nil, func(c targets.Current) targets.Decision {
			switch {
			case !c.Names(version) || ran[i] == version:
				return targets.Leave()
			case ran[i] == "":
				return targets.Delete()
			}
			return targets.SetTo(ran[i])
		})
		return err
	})
}

// clearTargets deletes node.<id> for each node, so each falls back to the fleet key.
func (s *store) clearTargets(ctx context.Context, nodes []string, workers int) error {
	return each(ctx, workers, len(nodes), func(ctx context.Context, i int) error {
		return s.deleteTarget(ctx, nodes[i])
	})
}

func (s *store) deleteTarget(ctx context.Context, node string) error {
	key := wire.NodeTargetKey(node)
	err := retry(ctx, s.log, "delete "+key, func(ctx context.Context) error {
		return s.targets.Delete(ctx, key)
	})
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete %s in %s: %w", key, s.targets.Bucket(), err)
	}
	return nil
}

// setFleet sets the fleet key to version, signed, unless it holds it already signed by this
// controller's key.
func (s *store) setFleet(ctx context.Context, version string) error {
	_, err := s.w.Update(ctx, wire.FleetTargetKey, nil, func(c targets.Current) targets.Decision {
		if s.ours(c, version) {
			return targets.Leave()
		}
		return targets.SetTo(version)
	})
	return err
}

// fleetTarget is the version the fleet key names ("" when none or unreadable).
func (s *store) fleetTarget(ctx context.Context) (string, error) {
	c, err := s.w.Read(ctx, wire.FleetTargetKey)
	if err != nil || c.Err != nil {
		return "", err
	}
	return c.Target.Version, nil
}
