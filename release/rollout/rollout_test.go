package rollout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func sixNodes(takes ...string) []*simNode {
	var ns []*simNode
	for i := 1; i <= 6; i++ {
		ns = append(ns, node(fmt.Sprintf("node-%d", i), "v1.0.0", takes...))
	}
	return ns
}

func TestAGoodReleaseReachesEveryNodeInBatchOrderThenTheFleetKey(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	s := startSim(t, b, sixNodes()...)
	ev := &events{}
	c, err := New(Config{JS: connect(t, b), Events: ev.add, Tick: 50 * time.Millisecond, Progress: 300 * time.Millisecond, Key: testSigner.Key})
	if err != nil {
		t.Fatal(err)
	}
	ctx := meshtest.Context(t, 60*time.Second)
	st, err := c.Start(ctx, testOptions("v1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Batches) != 3 || st.Batches[0].End != 2 || st.Batches[1].End != 3 || st.Batches[2].End != 6 {
		t.Fatalf("batches = %+v, want canary 2, then 50%% (3), 100%% (6)", st.Batches)
	}
	st, err = c.Run(ctx, st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	if v, _, ok := targetKey(t, b, wire.FleetTargetKey); v != "v1.1.0" || !ok {
		t.Errorf("fleet key = %q, want v1.1.0", v)
	}
	for _, n := range st.Nodes {
		if _, _, ok := targetKey(t, b, wire.NodeTargetKey(n)); ok {
			t.Errorf("node key of %s still set", n)
		}
	}
	// Batch order: a node's confirmation never comes before the previous batch was done.
	done := ev.kinds(EventBatchDone)
	if len(done) != 3 {
		t.Fatalf("%d batches done", len(done))
	}
	for _, e := range ev.kinds(EventConfirmed) {
		if e.Batch > 1 && e.Time.Before(done[e.Batch-2].Time) {
			t.Errorf("%s confirmed in batch %d before batch %d was done", e.Node, e.Batch, e.Batch-1)
		}
	}
	if got := ev.kinds(EventCompleted); len(got) != 1 {
		t.Errorf("completed events: %+v", got)
	}
	p := ev.kinds(EventProgress)
	if len(p) == 0 {
		t.Fatal("no progress event")
	}
	for _, e := range p {
		if e.Nodes == 0 || e.Batch == 0 || e.Batches != 3 || e.BatchName == "" ||
			!strings.Contains(e.Message, fmt.Sprintf("/3 (%s): %d/%d confirmed, %d/%d soaked; ", e.BatchName, e.Confirmed, e.Nodes, e.Soaked, e.Nodes)) {
			t.Errorf("progress %+v", e)
		}
	}
	for _, n := range st.Nodes {
		if got := s.targeted(n); len(got) != 1 || got[0] != "v1.1.0" {
			t.Errorf("%s took %v", n, got)
		}
	}
}

func TestTroubleInABatchHaltsItSetsItsTargetsBackAndLeavesTheFleetKey(t *testing.T) {
	for _, tc := range []struct {
		name, takes, why string
		soak, window     time.Duration
		detail, output   string
	}{
		{name: "a node silent past the window", takes: thenQuiet, why: WhySilent, soak: 6 * time.Second, window: 2 * time.Second, detail: "unheard for"},
		{name: "a rollback from the version, its output quoted", takes: rollsBack, why: WhyRolledBack, detail: "rolled back from v1.1.0 to v1.0.0",
			output: `panic: boom\x1b[31m`},
		{name: "a launcher rollback: the host confirmed, the launcher it carried did not", takes: launcherRollsBack, why: WhyLauncherRolledBack,
			detail: "launcher rolled back from v1.1.0: exited with status 2 before confirming"},
		{name: "a restart during the soak", takes: crashLoop, why: WhyRestarted, soak: 4 * time.Second, detail: "restarted after confirming"},
		{name: "a refusal of the target's revision", takes: refuses, why: WhyRefused, detail: "marked bad on this node"},
		{name: "a fetch failed for good", takes: fetchFail, why: WhyRefused, detail: "archive digest mismatch"},
		{name: "no confirmation within the window", takes: hangs, why: WhyNotConfirmed, detail: "fetch of v1.1.0 staged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := meshtest.StartBus(t)
			publishRelease(t, b, "v1.1.0")
			ns := sixNodes()
			ns[0].takes["v1.1.0"] = tc.takes
			s := startSim(t, b, ns...)
			ev := &events{}
			c := newController(t, connect(t, b), ev, "")
			ctx := meshtest.Context(t, 60*time.Second)
			o := testOptions("v1.1.0")
			o.CanaryNodes = []string{"node-1", "node-2"}
			if tc.soak > 0 {
				o.Soak = tc.soak
			}
			if tc.window > 0 {
				o.Window = tc.window
			}
			st, err := c.Start(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			st, err = c.Run(ctx, st.ID)
			ev.dump(t)
			if err != nil || st.Status != StatusHalted {
				t.Fatalf("run = %s, %v; want halted", st.Status, err)
			}
			h := st.Halt
			if h == nil || h.Batch != 0 || len(h.Nodes) != 1 || h.Nodes[0].Node != "node-1" || h.Nodes[0].Why != tc.why {
				t.Fatalf("halt = %+v, want node-1 %s in the canary batch", h, tc.why)
			}
			if r := h.Nodes[0]; !strings.Contains(r.Detail, tc.detail) || !strings.Contains(r.Output, tc.output) {
				t.Errorf("reason = %+v, want detail with %q and output with %q", r, tc.detail, tc.output)
			}
			if !st.Restored {
				t.Error("targets_restored is not set")
			}
			for _, n := range []string{"node-1", "node-2"} {
				if v, _, _ := targetKey(t, b, wire.NodeTargetKey(n)); v != "v1.0.0" {
					t.Errorf("target of %s = %q, want it set back to v1.0.0", n, v)
				}
			}
			if v, _, ok := targetKey(t, b, wire.FleetTargetKey); ok {
				t.Errorf("fleet key = %q; a halted version must never be the fleet target", v)
			}
			for _, n := range []string{"node-3", "node-4", "node-5", "node-6"} {
				if got := s.targeted(n); len(got) != 0 {
					t.Errorf("%s was targeted with %v; only the canaries may be", n, got)
				}
			}
			halted := ev.kinds(EventHalted)
			if len(halted) != 1 || len(halted[0].Reasons) != 1 || !strings.HasPrefix(halted[0].Message, "HALTED in batch 1/3 (canary): 1 of 2 nodes") {
				t.Errorf("halted events = %+v", halted)
			}
			// What --follow prints and what `rollout status` shows name the node and say why.
			var follow, status strings.Builder
			if len(halted) == 1 {
				if err := WriteEvent(&follow, halted[0]); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteStatus(&status, st, time.Now()); err != nil {
				t.Fatal(err)
			}
			for what, out := range map[string]string{"--follow": follow.String(), "status": status.String()} {
				if !strings.Contains(out, "node-1: ") || !strings.Contains(out, tc.detail) {
					t.Errorf("%s does not say node-1 and %q:\n%s", what, tc.detail, out)
				}
			}
		})
	}
}

// A launcher rollback a node reported before the rollout began is history: the rollout runs to
// its end (issue 19, 6), as it does past a host rollback from another version.
func TestALauncherRollbackFromBeforeTheRolloutDoesNotHaltIt(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	ns := sixNodes()
	ns[0].launcher = &wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: wire.LauncherFloor, RolledBackFrom: "v1.0.5",
		RolledBackAt: time.Now().Add(-time.Hour).UTC(), RollbackReason: "exited with status 2 before confirming"}
	startSim(t, b, ns...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	ctx := meshtest.Context(t, 60*time.Second)
	o := testOptions("v1.1.0")
	o.CanaryNodes = []string{"node-1", "node-2"}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.Run(ctx, st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v, halt %+v; want completed past node-1's old launcher rollback", st.Status, err, st.Halt)
	}
}
