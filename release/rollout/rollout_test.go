package rollout

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/wire"
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
	c := newController(t, connect(t, b), ev, "")
	ctx := ctxFor(t, 60*time.Second)
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
	_ = s
	_ = context.Background
}
