package rollout

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkRollout2000 rolls a release out to 2,000 simulated nodes (the wire protocol only,
// heartbeating every second) on one embedded server: canary 2, then 1%, 10%, 50%, 100%, soak 1s.
// It reports the time to complete; most of it is the nodes' heartbeat cadence and the soaks.
func BenchmarkRollout2000(b *testing.B) {
	const n = 2000
	for b.Loop() {
		bus := meshtest.StartBus(b)
		publishRelease(b, bus, "v1.1.0")
		var ns []*simNode
		for i := 0; i < n; i++ {
			ns = append(ns, node(fmt.Sprintf("sim-%05d", i), "v1.0.0"))
		}
		startSimEvery(b, bus, time.Second, ns...)
		c := newController(b, connect(b, bus), nil, "")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		o := Options{Version: "v1.1.0", Steps: []int{1, 10, 50, 100}, Window: time.Minute, Soak: time.Second, Alive: time.Hour, SilentAfter: 30 * time.Second}
		start := time.Now()
		st, err := c.Start(ctx, o)
		if err == nil {
			st, err = c.Run(ctx, st.ID)
		}
		cancel()
		if err != nil || st.Status != StatusCompleted {
			b.Fatalf("%s, %v", st.Status, err)
		}
		took := time.Since(start)
		b.ReportMetric(float64(took.Milliseconds()), "ms")
		bus.Stop()
	}
}
