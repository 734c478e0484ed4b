package lab

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// beforePlans is the last commit of main before issue 30 (rollout plans): its host follows
// its target keys only, as every deployed host does.
const beforePlans = "aa9a9c99e53f9bc7614c85372dcc63df94ecdac3"

// Issue 30, with real processes: a rollout is one signed plan the nodes evaluate.
//
//   - plan: `rollout plan` prints, before anything is written, which nodes each batch holds;
//     `rollout start` prints the same batches.
//   - writes: the rollout writes the plan once per batch and once to complete it; the nodes
//     that read plans never get a target of their own; node-4, on a host from before plans,
//     gets one (counted in the state), and every node ends on the release, with nothing left
//     behind — node-4 then says it reads plans.
//   - forged: a plan put on the bus by someone who is not the release side, holding every node
//     for a version of theirs, is refused by every node by name; nothing of it is fetched; and
//     the operator's next rollout replaces it.
func TestARolloutIsOneSignedPlanTheNodesEvaluate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-host from the commit before issue 30")
	}
	t.Parallel()
	oldHost := buildAt(t, beforePlans, PkgHost, "v1.0.0")
	s := newScenario(t, 6*time.Minute, FleetOptions{Nodes: 4, BaseBinaries: map[string]string{"node-4": oldHost}})
	nats := []string{"--nats", s.f.Bus.URL()}
	s.ship("v1.1.0", PkgHost)
	readers := []string{"node-1", "node-2", "node-3"}
	if err := s.f.Beats.WaitAll(s.ctx, readers, "plans said", func(b Beat) bool { return b.Plans == wire.PlanSchema }); err != nil {
		t.Fatal(err)
	}
	if b, ok := s.f.Beats.Last("node-4"); !ok || b.Plans != 0 {
		t.Fatalf("node-4, on a host from before plans, says plans %d", b.Plans)
	}

	t.Log("plan: what each batch holds, before anything is written")
	flags := rolloutFlags(30*time.Second, 2*time.Second)
	preview, err := s.f.Release.Run(s.ctx, append(append([]string{"rollout", "plan", "v1.1.0"}, flags[:4]...), nats...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mesh-release rollout plan:\n%s", preview)
	if !strings.Contains(preview, "salt "+wire.PlanSalt("v1.1.0")) || !strings.Contains(preview, "per-node targets: 1 node not taking the plan (a host from before plans, or a target of its own): node-4") {
		t.Errorf("rollout plan does not name its salt and node-4's target of its own:\n%s", preview)
	}
	if _, ok, err := s.f.Target(s.ctx, wire.FleetTargetKey); err != nil || ok {
		t.Errorf("rollout plan wrote the fleet key (%v)", err)
	}

	t.Log("writes: one plan per batch, a target of its own for the old host alone")
	c := s.rollout(append([]string{"start", "v1.1.0"}, flags...)...)
	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d, want 0 (completed)", code)
	}
	for _, line := range strings.Split(strings.TrimSpace(preview), "\n")[1:] {
		if !strings.Contains(c.Output(), line) {
			t.Errorf("rollout start did not print the batch `rollout plan` printed: %q", line)
		}
	}
	st := s.waitState("v1.1.0 completed", func(st rollout.State) bool { return st.Version == "v1.1.0" && st.Status.Final() })
	if st.Status != rollout.StatusCompleted || st.Plan == nil {
		t.Fatalf("the rollout ended %s, plan %+v; want completed with a plan", st.Status, st.Plan)
	}
	s.allOn(s.f.Names(), "v1.1.0")
	s.targetsAfterCompletion("v1.1.0", s.f.Names())
	plans := s.planHistory()
	var ours []wire.Plan
	for _, p := range plans {
		if p.Rollout == st.ID {
			ours = append(ours, p)
		}
	}
	if len(ours) != len(st.Batches)+1 || ours[len(ours)-1].State != wire.PlanCompleted {
		t.Errorf("the plan was written %d times for %d batches (%+v); want once a batch and once completed", len(ours), len(st.Batches), ours)
	}
	for i, p := range ours[:len(ours)-1] {
		if p.In != st.Batches[i].In || p.State != wire.PlanRunning {
			t.Errorf("plan write %d holds %d batches (%s), want %d running", i+1, p.In, p.State, st.Batches[i].In)
		}
	}
	for _, n := range readers {
		if h := s.targetHistory(n); len(h) != 0 {
			t.Errorf("%s, which reads plans, had its own target written: %+v", n, h)
		}
	}
	if h := s.targetHistory("node-4"); len(h) != 2 || h[0].Version != "v1.1.0" || !h[1].Deleted {
		t.Errorf("node-4's own target: %+v; want set to v1.1.0, then deleted at completion", h)
	}
	perNode := 0
	for _, b := range st.Batches {
		perNode += b.PerNode
	}
	if perNode != 1 {
		t.Errorf("the batches count %d per-node targets, want 1 (node-4)", perNode)
	}
	if _, err := s.f.Beats.Wait(s.ctx, "node-4 on v1.1.0 says it reads plans", func(b Beat) bool {
		return b.Node == "node-4" && b.Running == "v1.1.0" && b.Plans == wire.PlanSchema
	}); err != nil {
		t.Fatal(err)
	}

	t.Log("forged: a plan not signed by the release side is refused by every node")
	_, forger, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s.ship("v6.6.6", PkgHost)
	forged := wire.Plan{Rollout: "20991231T000000Z-v6.6.6", Version: "v6.6.6", Seq: uint64(time.Now().UnixMilli()),
		Expires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339), Salt: wire.PlanSalt("v6.6.6"),
		Canaries: []string{}, Waves: []uint32{wire.PlanScale}, In: 2, State: wire.PlanRunning}
	if err := forged.Sign(forger); err != nil {
		t.Fatal(err)
	}
	from := s.f.Beats.Len()
	s.putPlan(forged)
	s.eachHeard(s.f.Names(), from, "the forged plan refused", func(b Beat) bool {
		return b.Refused != nil && b.Refused.What == "plan" && strings.Contains(b.Refused.Error, "does not trust")
	})
	for _, n := range s.f.Names() {
		if s.touchedBy(n, "v6.6.6") {
			t.Errorf("%s touched v6.6.6, which only a forged plan named", n)
		}
	}
	if reads, err := s.f.Reads.Count(s.ctx, "v6.6.6"); err != nil || reads != 0 {
		t.Errorf("v6.6.6's archive was read %d times (%v); want never", reads, err)
	}
	s.ship("v1.2.0", PkgHost)
	c = s.rollout(append([]string{"start", "v1.2.0"}, flags...)...)
	if code := s.exit(c); code != 0 {
		t.Fatalf("the rollout after the forged plan exited %d, want 0 (completed)", code)
	}
	s.allOn(s.f.Names(), "v1.2.0")
}

// planHistory is every value the plan key held (the rollouts bucket keeps the last five),
// oldest first.
func (s *scenario) planHistory() []wire.Plan {
	s.t.Helper()
	kv, err := s.f.Bus.Conn.JS.KeyValue(s.ctx, s.f.Bus.Names.Rollouts())
	if err != nil {
		s.t.Fatal(err)
	}
	entries, err := kv.History(s.ctx, wire.PlanKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	var out []wire.Plan
	for _, e := range entries {
		p, err := wire.ParsePlan(e.Value())
		if err != nil {
			s.t.Fatalf("plan revision %d: %v", e.Revision(), err)
		}
		out = append(out, p)
	}
	return slices.Clip(out)
}

// putPlan puts p on the bus as anyone who may write the rollouts bucket can.
func (s *scenario) putPlan(p wire.Plan) {
	s.t.Helper()
	kv, err := s.f.Bus.Conn.JS.KeyValue(s.ctx, s.f.Bus.Names.Rollouts())
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := kv.Put(s.ctx, wire.PlanKey, p.Marshal()); err != nil {
		s.t.Fatal(err)
	}
}
