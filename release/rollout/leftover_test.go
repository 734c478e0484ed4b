package rollout

import (
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A rollout of a release that completes leaves no per-node key that any rollout of that release
// set, whichever controller set it: not the canaries of one it superseded (issue 18, 2b: the new
// plan leaves out nodes already on the version, and completion cleared only its own plan's), nor
// the done batches of one aborted before it. A per-node key no rollout of the release set (by
// hand, `mesh-release target --node`), or set by one and changed since to another version, is
// left alone.
func TestACompletedRolloutLeavesNoPerNodeKeyThatAnyRolloutOfItsReleaseSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		// how the first rollout of v1.1.0 (canary n1, then n2 and n3) ends before the second
		// one starts: "supersede" (the second supersedes it once n1 confirmed) or "abort"
		// (aborted once its canary batch is done).
		first string
		// keys written by hand once the first rollout ended: node → version.
		byHand map[string]string
		// the keys left once the second rollout completed: node → version.
		want map[string]string
	}{
		{name: "its canary, when a rollout of the release superseded it", first: "supersede",
			want: map[string]string{}},
		{name: "its done batch, when it was aborted and the release rolled out again", first: "abort",
			want: map[string]string{}},
		{name: "but not a key set by hand for a node no rollout of it targeted", first: "supersede",
			byHand: map[string]string{"n4": "v1.1.0"}, want: map[string]string{"n4": "v1.1.0"}},
		{name: "nor one it set that was changed by hand since", first: "supersede",
			byHand: map[string]string{"n1": "v1.0.5"}, want: map[string]string{"n1": "v1.0.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := meshtest.StartBus(t)
			publishRelease(t, b, "v1.1.0")
			// n4 already runs v1.1.0: no rollout of it targets n4.
			startSim(t, b, node("n1", "v1.0.0"), node("n2", "v1.0.0"), node("n3", "v1.0.0"), node("n4", "v1.1.0"))
			ctx := t.Context()
			ev1, ev2 := &events{}, &events{}
			c1, c2 := newController(t, connect(t, b), ev1, "first"), newController(t, connect(t, b), ev2, "second")
			defer ev1.dump(t)
			defer ev2.dump(t)

			o := testOptions("v1.1.0")
			o.CanaryNodes, o.Steps, o.Window, o.Soak = []string{"n1"}, []int{100}, 30*time.Second, 30*time.Second
			if tc.first == "abort" {
				o.Steps, o.Soak = []int{50, 100}, time.Second
			}
			first, err := c1.Start(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			done := runAsync(ctx, c1, first.ID)
			second := testOptions("v1.1.0")
			second.Canary, second.Steps, second.Window = 1, []int{100}, 30*time.Second
			switch tc.first {
			case "supersede":
				waitEvent(t, ev1, EventConfirmed, func(e Event) bool { return e.Node == "n1" })
				second.Supersede = true
			case "abort":
				waitEvent(t, ev1, EventBatchDone, func(e Event) bool { return e.Batch == 1 })
				if _, err := Abort(ctx, b.Conn.JS, b.Names, "alice@test", testSigner); err != nil {
					t.Fatal(err)
				}
			}
			if tc.first == "abort" {
				if res := <-done; res.st.Status != StatusAborted {
					t.Fatalf("the first rollout = %s, %v; want aborted", res.st.Status, res.err)
				}
				if v, _, ok := targetKey(t, b, wire.NodeTargetKey("n1")); !ok || v != "v1.1.0" {
					t.Fatalf("after the abort, n1's own key = %q (present %v); the abort keeps it on the release", v, ok)
				}
			}
			for n, v := range tc.byHand {
				if tc.first == "supersede" && n == "n1" {
					continue // written once the first rollout set it: below
				}
				putTarget(t, b, wire.NodeTargetKey(n), v)
			}
			// A rollout's id is its start to the second and its version: the second must not
			// start within the first's second.
			meshtest.Eventually(t, "the second after the first rollout's", func() bool { return time.Now().Unix() > first.Created.Unix() })
			st, err := c2.Start(ctx, second)
			if err != nil {
				t.Fatal(err)
			}
			if tc.first == "supersede" {
				if res := <-done; res.st.Status != StatusSuperseded {
					t.Fatalf("the first rollout = %s, %v; want superseded", res.st.Status, res.err)
				}
				if v, ok := tc.byHand["n1"]; ok {
					putTarget(t, b, wire.NodeTargetKey("n1"), v)
				}
			}
			for _, n := range st.Nodes {
				if n == "n1" || n == "n4" {
					t.Fatalf("the second rollout's plan %v holds %s, which already runs v1.1.0; the case needs it left out", st.Nodes, n)
				}
			}
			if !st.Status.Final() {
				st, err = c2.Run(ctx, st.ID)
			}
			if err != nil || st.Status != StatusCompleted {
				t.Fatalf("the second rollout = %s, %v; want completed", st.Status, err)
			}
			if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.1.0" {
				t.Errorf("fleet key = %q, want v1.1.0", v)
			}
			for _, n := range []string{"n1", "n2", "n3", "n4"} {
				v, _, ok := targetKey(t, b, wire.NodeTargetKey(n))
				want, keep := tc.want[n]
				switch {
				case ok && !keep:
					t.Errorf("node.%s still names %s after the rollout of v1.1.0 completed; a later fleet target would not reach %s", n, v, n)
				case keep && (!ok || v != want):
					t.Errorf("node.%s = %q (present %v), want %s left alone", n, v, ok, want)
				}
			}
		})
	}
}
