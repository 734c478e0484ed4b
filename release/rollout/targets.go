package rollout

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

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

// targetOf reads a node's target key: the version it names ("" when absent or unreadable) and
// its revision.
func (s *store) targetOf(ctx context.Context, node string) (version string, rev uint64, err error) {
	e, ok, err := s.entry(ctx, s.targets, wire.NodeTargetKey(node))
	if err != nil || !ok {
		return "", 0, err
	}
	t, err := wire.ParseTarget(e.Value())
	if err != nil {
		return "", e.Revision(), nil
	}
	return t.Version, e.Revision(), nil
}

func (s *store) put(ctx context.Context, key string, v []byte) (uint64, error) {
	var rev uint64
	err := retry(ctx, s.log, "set "+key, func(ctx context.Context) (err error) {
		rev, err = s.targets.Put(ctx, key, v)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("set %s in %s: %w", key, s.targets.Bucket(), err)
	}
	return rev, nil
}

// setTargets puts node.<id> = version for each node and returns each key's revision. The
// caller passes only nodes whose key it read as naming something else (a key already naming
// the version is left alone, so its revision — what a refusal is compared with — does not move
// when a batch is set again on resume); reading it again here would cost a third more round
// trips per node, which is what a 10,000-node batch waits on.
func (s *store) setTargets(ctx context.Context, nodes []string, version string, workers int) ([]uint64, error) {
	revs := make([]uint64, len(nodes))
	val := wire.Target{Version: version}.Marshal()
	err := each(ctx, workers, len(nodes), func(ctx context.Context, i int) (err error) {
		revs[i], err = s.put(ctx, wire.NodeTargetKey(nodes[i]), val)
		return err
	})
	return revs, err
}

// restoreTargets sets node.<id> back to the version each node ran (ran, index for index) where
// it still names version, the rollout's: a key naming anything else was not set by the rollout,
// or was set since by someone else, and is left alone. A node that ran no version has its key
// deleted.
func (s *store) restoreTargets(ctx context.Context, nodes, ran []string, version string, workers int) error {
	return each(ctx, workers, len(nodes), func(ctx context.Context, i int) error {
		have, _, err := s.targetOf(ctx, nodes[i])
		if err != nil || have != version || have == ran[i] {
			return err
		}
		if ran[i] == "" {
			return s.deleteTarget(ctx, nodes[i])
		}
		_, err = s.put(ctx, wire.NodeTargetKey(nodes[i]), wire.Target{Version: ran[i]}.Marshal())
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

// setFleet sets the fleet key to version, unless it names it already.
func (s *store) setFleet(ctx context.Context, version string) error {
	e, ok, err := s.entry(ctx, s.targets, wire.FleetTargetKey)
	if err != nil {
		return err
	}
	if ok {
		if t, err := wire.ParseTarget(e.Value()); err == nil && t.Version == version {
			return nil
		}
	}
	_, err = s.put(ctx, wire.FleetTargetKey, wire.Target{Version: version}.Marshal())
	return err
}

// fleetTarget is the version the fleet key names ("" when none).
func (s *store) fleetTarget(ctx context.Context) (string, error) {
	e, ok, err := s.entry(ctx, s.targets, wire.FleetTargetKey)
	if err != nil || !ok {
		return "", err
	}
	t, err := wire.ParseTarget(e.Value())
	if err != nil {
		return "", nil
	}
	return t.Version, nil
}
