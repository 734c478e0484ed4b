package link

import (
	"fmt"
	"testing"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A rollout completes by putting the fleet key and then deleting the node's own key, within the
// same millisecond (release/rollout: complete). The node keeps a value throughout — the node's
// until the fleet's is there — so the link never reports the fold in between: no key in force,
// or the fleet's previous value. Round after round, every report between the node key's value
// and the fleet's new one is checked; it waits for each positive report, with no time bound.
func TestAFoldNeverReportsTheGapWhenTheFleetKeyReplacesTheNodeKey(t *testing.T) {
	const rounds = 100
	for _, tc := range []struct {
		name      string
		node      string // the node's key and the fleet's
		fleet     string
		value     func(t *testing.T, key string, round int) []byte
		versionOf func(ev Event) (key string, rev uint64, ok bool)
	}{
		{name: "target", node: wire.NodeTargetKey("n1"), fleet: wire.FleetTargetKey,
			value: func(t *testing.T, key string, round int) []byte {
				return target(t, key, fmt.Sprintf("v1.%d.0", round))
			},
			versionOf: func(ev Event) (string, uint64, bool) {
				e, ok := ev.(TargetChanged)
				return e.Key, e.Revision, ok
			}},
		{name: "window", node: wire.NodeWindowKey("n1"), fleet: wire.FleetWindowKey,
			value: func(t *testing.T, key string, round int) []byte {
				var nodes []string
				if key != wire.FleetWindowKey {
					nodes = []string{"n1"}
				}
				return window(t, key, nodes, fmt.Sprintf("daily %02d:00-%02d:30 UTC", round%24, round%24))
			},
			versionOf: func(ev Event) (string, uint64, bool) {
				e, ok := ev.(WindowChanged)
				return e.Key, e.Revision, ok
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			l := openLink(t, b.URL(), "n1")
			// next is the fold's next report, skipping the other events.
			next := func(what string) (string, uint64) {
				t.Helper()
				var key string
				var rev uint64
				waitFor[Event](t, l, what, func(ev Event) bool {
					var ok bool
					key, rev, ok = tc.versionOf(ev)
					return ok
				})
				return key, rev
			}
			if key, _ := next("the initial report"); key != "" {
				t.Fatalf("initial report names %q, want none", key)
			}
			gaps := 0
			for round := 1; round <= rounds; round++ {
				// Neither key: the node has no value, as before a rollout's first batch.
				if round > 1 {
					b.Delete(names.Targets(), tc.fleet)
					if key, rev := next("no key in force"); key != "" {
						t.Fatalf("round %d: report %s rev %d, want none", round, key, rev)
					}
				}
				nodeRev := b.Put(names.Targets(), tc.node, tc.value(t, tc.node, round))
				if key, rev := next("the node's key"); key != tc.node || rev != nodeRev {
					t.Fatalf("round %d: report %s rev %d, want %s rev %d", round, key, rev, tc.node, nodeRev)
				}
				// The controller's order at a rollout's end: the fleet key put, the node's deleted.
				fleetRev := b.Put(names.Targets(), tc.fleet, tc.value(t, tc.fleet, round))
				b.Delete(names.Targets(), tc.node)
				for gap := false; ; {
					key, rev := next("the fleet's key")
					if key == tc.fleet && rev == fleetRev {
						break
					}
					if !gap {
						gap = true
						gaps++
					}
					t.Errorf("round %d: reported %q rev %d between %s rev %d and %s rev %d", round, key, rev, tc.node, nodeRev, tc.fleet, fleetRev)
				}
			}
			if gaps > 0 {
				t.Errorf("%d of %d rounds reported a gap", gaps, rounds)
			}
		})
	}
}
