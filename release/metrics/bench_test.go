package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// What one scrape costs at 10,000 nodes: the fleet view judged as of the scrape (the fleet
// view's rules, every node), the buckets read from a real bus (every scrape: BucketsEvery is
// made tiny), encoded in the text format as Prometheus fetches it. The heartbeats are in the
// view already, as Run keeps them: a scrape never reads the stream. Reported: ms per scrape and
// the body's size.
func BenchmarkScrapeTenThousandNodes(b *testing.B) {
	for _, perNode := range []bool{false, true} {
		b.Run(fmt.Sprintf("node-metrics=%v", perNode), func(b *testing.B) {
			bus := meshtest.StartBus(b)
			e := New(Config{JS: bus.Conn.JS, Names: bus.Names, NodeMetrics: perNode, BucketsEvery: time.Nanosecond})
			now := time.Now()
			for i := range 10000 {
				node := fmt.Sprintf("node-%05d", i)
				hb := heartbeat(node, func(hb *wire.Heartbeat) {
					hb.Running = fmt.Sprintf("v1.%d.0", i%7)
					hb.KnownGood = hb.Running
					if i%50 == 0 {
						hb.LastReconcile = &wire.LastReconcile{At: now, Error: "unit failed"}
					}
				})
				e.Update(fleet.Entry{Node: node, Heard: now.Add(-time.Duration(i%120) * time.Second), Heartbeat: hb})
			}
			e.MarkReady()
			h := e.Handler()
			var size int
			b.ResetTimer()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				if rec.Code != 200 {
					b.Fatalf("status %d", rec.Code)
				}
				body, _ := io.ReadAll(rec.Body)
				size = len(body)
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/scrape")
			b.ReportMetric(float64(size)/1024, "KiB/scrape")
		})
	}
}
