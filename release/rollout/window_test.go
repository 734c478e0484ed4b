package rollout

import (
	"context"
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A node of a batch that has staged the version and waits for its maintenance window, which
// opens later than the batch's --window allows, holds its batch without halting it; the
// progress events name it and when its window opens; once it opens, the node takes the version
// and the rollout completes. Before decision 0029 it halted as not confirmed.
func TestABatchWaitsForANodesWindowWithoutHalting(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	nodes := sixNodes()
	opens := time.Now().Add(5 * time.Second)
	nodes[0].windowOpens = opens
	startSim(t, b, nodes...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	c.cfg.Progress = 200 * time.Millisecond
	ctx := meshtest.Context(t, 60*time.Second)
	o := testOptions("v1.1.0") // --window 3s
	o.CanaryNodes = []string{"node-1"}
	o.Canary = 1
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.Run(ctx, st.ID)
	if err != nil || st.Status != StatusCompleted {
		ev.dump(t)
		t.Fatalf("run = %s, %v; want completed", st.Status, err)
	}
	var named bool
	for _, e := range ev.kinds(EventProgress) {
		if len(e.WindowWaiting) == 1 && e.WindowWaiting[0].Node == "node-1" && e.WindowWaiting[0].Opens.Equal(opens) &&
			strings.Contains(e.Message, "waiting for its maintenance window: node-1 (opens ") {
			named = true
		}
	}
	if !named {
		ev.dump(t)
		t.Error("no progress event named node-1 waiting for its window")
	}
}

// Nodes on metered links wait for the last batch, the state says how many, the start says so;
// an urgent rollout's targets are signed urgent, the fleet target too.
func TestMeteredNodesGoLastAndAnUrgentRolloutSignsUrgent(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	nodes := sixNodes()
	nodes[0].linkClass, nodes[1].linkClass = wire.LinkMetered, wire.LinkMetered
	startSim(t, b, nodes...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	ctx := meshtest.Context(t, 60*time.Second)
	o := testOptions("v1.1.0")
	o.Urgent = true
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	last := st.BatchNodes(len(st.Batches) - 1)
	if st.Metered != 2 || !slices.Contains(last, "node-1") || !slices.Contains(last, "node-2") || !st.Urgent {
		t.Fatalf("metered %d, urgent %v, last batch %v; want node-1 and node-2 in it", st.Metered, st.Urgent, last)
	}
	st, err = c.Run(ctx, st.ID)
	if err != nil || st.Status != StatusCompleted {
		ev.dump(t)
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	if s := ev.kinds(EventStarted); len(s) != 1 || !strings.Contains(s[0].Message, "2 nodes on metered links deferred to the last batch") {
		t.Errorf("started: %+v", s)
	}
	kv, err := b.Conn.JS.KeyValue(context.Background(), b.Names.Targets())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), wire.FleetTargetKey)
	if err != nil {
		t.Fatal(err)
	}
	tg, err := wire.ParseTarget(e.Value())
	if err != nil || !tg.Urgent || tg.Verify(wire.FleetTargetKey, wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now()) != nil {
		t.Errorf("fleet target %+v (%v): want it signed urgent", tg, err)
	}
}
