package rollout

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// readerNodes are n nodes on v1.0.0 that read plans, node-p01 …, then old nodes that do not.
func readerNodes(n, old int) []*simNode {
	var ns []*simNode
	for i := 1; i <= n; i++ {
		nd := node(fmt.Sprintf("node-p%02d", i), "v1.0.0")
		nd.plans = true
		ns = append(ns, nd)
	}
	for i := 1; i <= old; i++ {
		ns = append(ns, node(fmt.Sprintf("node-o%02d", i), "v1.0.0"))
	}
	return ns
}

// planOnBus reads the plan key.
func planOnBus(t *testing.T, b *meshtest.Bus) (wire.Plan, uint64) {
	t.Helper()
	ctx := meshtest.Context(t, 10*time.Second)
	e, err := b.KV(b.Names.Rollouts()).Get(ctx, wire.PlanKey)
	if err != nil {
		t.Fatalf("the plan key: %v", err)
	}
	p, err := wire.ParsePlan(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return p, e.Revision()
}

func TestARolloutToNodesThatReadPlansWritesOnePlanPerBatchAndATargetOnlyForOldHosts(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	putTarget(t, b, wire.FleetTargetKey, "v1.0.0")
	s := startSim(t, b, readerNodes(10, 2)...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	ctx := meshtest.Context(t, 90*time.Second)
	o := testOptions("v1.1.0")
	preview, err := c.Preview(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if st.Plan == nil || st.Plan.Salt != wire.PlanSalt("v1.1.0") {
		t.Fatalf("plan = %+v, want one salted with wire.PlanSalt", st.Plan)
	}
	if !slices.Equal(preview.Nodes, st.Nodes) || !slices.EqualFunc(preview.Batches, st.Batches, func(a, b Batch) bool { return a.End == b.End && a.In == b.In }) {
		t.Errorf("preview %v %+v, start %v %+v: want the same batches", preview.Nodes, preview.Batches, st.Nodes, st.Batches)
	}
	// Each batch holds exactly the nodes the plan puts in it, as a node computes it.
	plan := st.planOf(0, wire.PlanRunning, "")
	for i := range st.Batches {
		for _, n := range st.BatchNodes(i) {
			want := 0
			if i > 0 || st.Batches[0].Name != "canary" {
				want = st.Batches[i].In - 1
			}
			if got := plan.BatchOf(wire.PlanNode{ID: n, Platform: "linux/amd64"}); got > want || (i > 0 && got <= st.Batches[i-1].In-1) {
				t.Errorf("%s is in batch %d (plan in %d) but the plan puts it in batch %d", n, i, st.Batches[i].In, got)
			}
		}
	}
	st, err = c.Run(ctx, st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	var status strings.Builder
	if err := WriteStatus(&status, st, time.Now()); err != nil || !strings.Contains(status.String(), "plan     one signed plan the nodes evaluate (salt "+st.Plan.Salt) ||
		!strings.Contains(status.String(), "10 nodes read it, 2 nodes given a target of its own") {
		t.Errorf("rollout status does not say the plan (%v):\n%s", err, status.String())
	}
	p, _ := planOnBus(t, b)
	if p.Rollout != st.ID || p.State != wire.PlanCompleted || p.In != p.Batches() {
		t.Errorf("plan at the end = %s %s in %d of %d, want %s completed", p.Rollout, p.State, p.In, p.Batches(), st.ID)
	}
	s.mu.Lock()
	puts, nodePuts := s.planPuts, 0
	for k, n := range s.puts {
		if k != wire.FleetTargetKey {
			nodePuts += n
		}
	}
	s.mu.Unlock()
	// One write per batch and one saying it completed (a renewal would add one: the TTL is an hour).
	if puts != len(st.Batches)+1 {
		t.Errorf("plan written %d times for %d batches, want %d", puts, len(st.Batches), len(st.Batches)+1)
	}
	if nodePuts != 2 {
		t.Errorf("%d per-node targets written, want 2: one for each host that does not read plans", nodePuts)
	}
	perNode := 0
	for _, bt := range st.Batches {
		perNode += bt.PerNode
	}
	if perNode != 2 {
		t.Errorf("batches count %d per-node targets, want 2", perNode)
	}
	for _, n := range st.Nodes {
		if got := s.targeted(n); len(got) != 1 || got[0] != "v1.1.0" {
			t.Errorf("%s took %v", n, got)
		}
		if _, _, ok := targetKey(t, b, wire.NodeTargetKey(n)); ok {
			t.Errorf("node key of %s left behind", n)
		}
	}
}

func TestAHaltLowersThePlanToTheBatchesDoneAndItsBatchFallsBackToTheFleetKey(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	putTarget(t, b, wire.FleetTargetKey, "v1.0.0")
	ns := readerNodes(8, 0)
	s := startSim(t, b, ns...)
	c := newController(t, connect(t, b), nil, "")
	ctx := meshtest.Context(t, 90*time.Second)
	o := testOptions("v1.1.0")
	o.CanaryNodes = []string{"node-p01", "node-p02"}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	// The first node of the batch after the canaries refuses the version.
	bad := st.BatchNodes(1)[0]
	s.with(bad, func(n *simNode) { n.takes["v1.1.0"] = refuses })
	st, err = c.Run(ctx, st.ID)
	if err != nil || st.Status != StatusHalted || st.Halt == nil || st.Halt.Batch != 1 || st.Halt.Nodes[0].Node != bad || st.Halt.Nodes[0].Why != WhyRefused {
		t.Fatalf("run = %s %+v, %v; want halted in batch 2 by %s refusing the plan", st.Status, st.Halt, err, bad)
	}
	p, _ := planOnBus(t, b)
	if p.State != wire.PlanHalted || p.In != 1 || p.Reason == "" {
		t.Errorf("plan after the halt: %s in %d reason %q, want halted holding the canaries (in 1) with a reason", p.State, p.In, p.Reason)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, n := range st.Nodes {
		want := "v1.0.0"
		if i < 2 {
			want = "v1.1.0"
		}
		if got := s.target(n).version; got != want {
			t.Errorf("%s follows %s after the halt, want %s", n, got, want)
		}
	}
}

func TestAPlanOfAnotherRolloutCarriesWhatTheOneItReplacedHeldANodeAt(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	putTarget(t, b, wire.FleetTargetKey, "v1.0.0")
	s := startSim(t, b, readerNodes(6, 0)...)
	c := newController(t, connect(t, b), nil, "")
	ctx := meshtest.Context(t, 90*time.Second)
	o := testOptions("v1.1.0")
	o.CanaryNodes = []string{"node-p01", "node-p02"}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	s.with(st.BatchNodes(1)[0], func(n *simNode) { n.takes["v1.1.0"] = hangs })
	o.Window = time.Second
	if st, err = c.Run(ctx, st.ID); st.Status != StatusHalted {
		t.Fatalf("run = %s, %v; want halted", st.Status, err)
	}
	// Started again, the rollout leaves the canaries out (they have the version) and its plan
	// holds them nowhere: they keep v1.1.0, carried, and never go back to the fleet's v1.0.0.
	s.with(st.BatchNodes(1)[0], func(n *simNode) { n.takes["v1.1.0"] = good })
	o.CanaryNodes = nil
	st2, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(st2.Nodes, "node-p01") {
		t.Fatalf("the second rollout plans node-p01, which runs the version: %v", st2.Nodes)
	}
	if st2, err = c.Run(ctx, st2.ID); err != nil || st2.Status != StatusCompleted {
		t.Fatalf("second run = %s, %v", st2.Status, err)
	}
	for _, n := range []string{"node-p01", "node-p02"} {
		if got := s.targeted(n); !slices.Equal(got, []string{"v1.1.0"}) {
			t.Errorf("%s took %v, want v1.1.0 once", n, got)
		}
		var running string
		s.with(n, func(sn *simNode) { running = sn.running })
		if running != "v1.1.0" {
			t.Errorf("%s runs %s", n, running)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.carry) != 0 {
		t.Errorf("carried after the completion: %v", s.carry)
	}
}

func TestAControllerNeverReplacesThePlanOfARolloutStartedAfterItsOwn(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 30*time.Second)
	s, err := openStore(ctx, connect(t, b), b.Names, testSigner, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := func(id string) State {
		return State{ID: id, Version: "v1.1.0", Nodes: []string{"a"}, Ran: []string{"v1.0.0"}, Batches: []Batch{{End: 1, In: 1}},
			Plan: &PlanRef{Salt: wire.PlanSalt("v1.1.0"), Canaries: 1, Waves: []uint32{wire.PlanScale}}}
	}
	newer, older := st("20261203T100001Z-v1.1.0"), st("20261203T100000Z-v1.1.0")
	// A plan naming a later rollout the bucket does not hold (someone else's write) is replaced.
	if _, err := s.writePlan(ctx, st("20991231T000000Z-v6.6.6"), 1, wire.PlanRunning, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.writePlan(ctx, newer, 1, wire.PlanRunning, ""); err != nil {
		t.Fatalf("a plan of a rollout the bucket does not hold blocked the plan of one it does: %v", err)
	}
	newer.Created = time.Now()
	if _, err := s.saveState(ctx, newer, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.writePlan(ctx, older, 1, wire.PlanHalted, "late"); err == nil {
		t.Fatal("the older rollout replaced the newer one's plan")
	}
	rev1, err := s.writePlan(ctx, newer, 1, wire.PlanRunning, "")
	if err != nil {
		t.Fatal(err)
	}
	if p, rev := planOnBus(t, b); p.Rollout != newer.ID || rev != rev1 {
		t.Errorf("plan %s at %d, want %s left as it was (%d)", p.Rollout, rev, newer.ID, rev1)
	}
}

// A node that reads plans but has a target of its own when the rollout is planned (a pin the
// plan would not win over) is given the rollout's target in its batch, as before plans, and
// its key is deleted at completion.
func TestANodeWithATargetOfItsOwnIsGivenTheRolloutsTargetAsBeforePlans(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	putTarget(t, b, wire.FleetTargetKey, "v1.0.0")
	putTarget(t, b, wire.NodeTargetKey("node-p03"), "v1.0.0")
	s := startSim(t, b, readerNodes(4, 0)...)
	c := newController(t, connect(t, b), nil, "")
	ctx := meshtest.Context(t, 60*time.Second)
	st, err := c.Start(ctx, testOptions("v1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.perNodeNodes(); !slices.Equal(got, []string{"node-p03"}) {
		t.Errorf("per-node nodes %v, want node-p03 alone", got)
	}
	if st, err = c.Run(ctx, st.ID); err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	if got := s.targeted("node-p03"); !slices.Equal(got, []string{"v1.1.0"}) {
		t.Errorf("node-p03 took %v, want v1.1.0", got)
	}
	if _, _, ok := targetKey(t, b, wire.NodeTargetKey("node-p03")); ok {
		t.Error("node-p03's own key is left behind")
	}
}

// The controller's batches are exactly what each node finds evaluating the plan itself
// (wire.Plan.BatchOf): canaries named or chosen, metered nodes last, a platform skipped, nodes
// that do not take the plan in the same hash order — over fleets of several sizes and steps.
func TestEachBatchHoldsExactlyTheNodesThePlanPutsInIt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		steps   []int
		metered bool
		named   []string
		skip    []string
	}{
		{name: "3 nodes, 50% and 100%", n: 3, steps: []int{50, 100}},
		{name: "200 nodes, 1% 10% 50% 100%", n: 200, steps: []int{1, 10, 50, 100}},
		{name: "200 nodes, a tenth of them metered", n: 200, steps: []int{10, 50, 100}, metered: true},
		{name: "named canaries and a skipped platform", n: 120, steps: []int{25, 100}, named: []string{"linux-amd64-07", "linux-arm64-03"},
			skip: []string{"linux/arm/v7"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := mixed(map[string]int{"linux/amd64": tc.n - tc.n/3, "linux/arm64": tc.n / 3, "linux/arm/v7": len(tc.skip) * 5})
			for i := range es {
				es[i].Heartbeat.Plans = wire.PlanSchema
				if i%7 == 3 {
					es[i].Heartbeat.Plans = 0 // a host from before plans
				}
				if tc.metered && i%10 == 1 {
					es[i].Heartbeat.LinkClass = wire.LinkMetered
				}
			}
			o := Options{Version: "v1.1.0", Canary: 2, Steps: tc.steps, CanaryNodes: tc.named, SkipPlatforms: tc.skip}.WithDefaults()
			p, err := planFleet(o, anyRelease(o.Version), es, planNow)
			if err != nil {
				t.Fatal(err)
			}
			st := State{ID: "r", Version: o.Version, Nodes: p.nodes, Ran: p.ran, Batches: p.batches, Plan: p.plan, Readers: p.readers}
			if st.Plan == nil {
				t.Fatal("no plan for a fleet that reads plans")
			}
			plan := st.planOf(0, wire.PlanRunning, "")
			if err := testSigner.SignPlan(&plan, 0); err != nil {
				t.Fatal(err)
			}
			if tc.metered && !plan.MeteredLast || !slices.Equal(plan.SkipPlatforms, tc.skip) || len(plan.Canaries) < 2 {
				t.Errorf("plan metered_last %v, skip %v, canaries %v; want metered last, %v, two or more", plan.MeteredLast, plan.SkipPlatforms, plan.Canaries, tc.skip)
			}
			byNode := map[string]fleet.Entry{}
			for _, e := range es {
				byNode[e.Node] = e
			}
			seen := 0
			for i, b := range st.Batches {
				lo := 0
				if i > 0 {
					lo = st.Batches[i-1].In
				}
				for _, n := range st.BatchNodes(i) {
					seen++
					hb := byNode[n].Heartbeat
					_, platform := platformOf(hb)
					got := plan.BatchOf(wire.PlanNode{ID: n, Platform: platform, Metered: hb.LinkClass == wire.LinkMetered})
					if got < lo || got >= b.In {
						t.Errorf("%s is in batch %d (%s, plan in %d) but evaluates itself into plan batch %d", n, i+1, b.Name, b.In, got)
					}
				}
			}
			for _, e := range es {
				_, platform := platformOf(e.Heartbeat)
				if slices.Contains(tc.skip, platform) {
					if got := plan.BatchOf(wire.PlanNode{ID: e.Node, Platform: platform}); got != -1 {
						t.Errorf("%s, of a skipped platform, evaluates itself into batch %d", e.Node, got)
					}
				}
			}
			if want := len(es) - 5*len(tc.skip); seen != want {
				t.Errorf("the batches hold %d nodes, want %d", seen, want)
			}
		})
	}
}
