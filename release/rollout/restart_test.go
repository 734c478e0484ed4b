package rollout

import (
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The server restarts mid-rollout, away for longer than the window: JetStream keeps everything on
// disk, the controller retries and re-establishes its watches, and the outage is no reason to
// halt.
func TestARolloutCarriesOnAcrossAServerRestart(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	startSim(t, b, sixNodes()...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	ctx := meshtest.Context(t, 90*time.Second)
	o := testOptions("v1.1.0")
	o.Window = 3 * time.Second
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	done := runAsync(ctx, c, st.ID)
	waitEvent(t, ev, EventBatch, func(e Event) bool { return e.Batch == 2 })
	b.Stop()
	time.Sleep(4 * time.Second)
	b.Start()
	res := <-done
	ev.dump(t)
	if res.err != nil || res.st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v (halt %+v)", res.st.Status, res.err, res.st.Halt)
	}
	if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.1.0" {
		t.Errorf("fleet key = %q", v)
	}
}
