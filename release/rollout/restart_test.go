package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The server restarts mid-rollout: JetStream keeps everything on disk, the controller retries
// and re-establishes its watches, and the outage is no reason to halt.
//
//   - Away for longer than the window and --silent-after: the time the bus was away is not
//     silence (no node is judged silent or left out for it).
//   - With --silent-after an hour (issue 27 §1.3): the rebuilt watch reads each node's last
//     heartbeat from the stream, so the controller goes on at once instead of waiting out a grace
//     of --silent-after before the next batch; it could not complete in the test's time if it
//     waited. The batch after the restart targets its nodes (none left out): what it read of them
//     was their heartbeats.
func TestARolloutCarriesOnAcrossAServerRestart(t *testing.T) {
	for _, tc := range []struct {
		name                string
		window, silentAfter time.Duration
	}{
		{"away longer than the window and silent-after", 3 * time.Second, time.Second},
		{"silent-after an hour, not waited out", 3 * time.Second, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			publishRelease(t, b, "v1.1.0")
			startSim(t, b, sixNodes()...)
			ev := &events{}
			c := newController(t, connect(t, b), ev, "")
			ctx := meshtest.Context(t, 3*time.Minute)
			o := testOptions("v1.1.0")
			o.Window, o.SilentAfter = tc.window, tc.silentAfter
			st, err := c.Start(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			done := runAsync(ctx, c, st.ID)
			waitEvent(t, ev, EventBatch, func(e Event) bool { return e.Batch == 2 })
			b.Stop()
			time.Sleep(4 * time.Second) // the outage's length, not a wait for something to happen
			b.Start()
			res := <-done
			ev.dump(t)
			if res.err != nil || res.st.Status != StatusCompleted {
				t.Fatalf("run = %s, %v (halt %+v)", res.st.Status, res.err, res.st.Halt)
			}
			if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.1.0" {
				t.Errorf("fleet key = %q", v)
			}
			var set []int
			ev.mu.Lock()
			defer ev.mu.Unlock()
			for _, e := range ev.all {
				switch e.Kind {
				case EventBatch:
					set = append(set, e.Batch)
					if n := len(res.st.BatchNodes(e.Batch - 1)); e.Nodes != n || strings.Contains(e.Message, "left out") {
						t.Errorf("batch %d: %q (%d nodes targeted); want its %d nodes targeted", e.Batch, e.Message, e.Nodes, n)
					}
				case EventLeftOut, EventHalted:
					t.Errorf("%s: %s", e.Kind, e.Message)
				}
			}
			if !slices.Equal(set, []int{1, 2, 3}) {
				t.Errorf("batches set %v, want 1, 2, 3", set)
			}
		})
	}
}
