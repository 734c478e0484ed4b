package host

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkDeclarationToAppliedHeartbeat measures, on loopback with a real server, the time from
// putting a declaration to receiving the heartbeat that shows it reconciled (the put's revision
// and a completed "declaration" reconcile): median and p99 over b.N puts.
func BenchmarkDeclarationToAppliedHeartbeat(b *testing.B) {
	bs := meshtest.StartBus(b)
	hbs := bs.Heartbeats("bench")
	startHost(b, newRoot(b, "v1.0.0"), "bench", bs.URL())
	meshtest.WaitHeartbeat(b, hbs, "the start reconcile", func(hb wire.Heartbeat) bool { return hb.LastReconcile != nil })
	dir := b.TempDir() // a host applies what it holds, and benchmarks may run as root
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		began := time.Now()
		rev := bs.Declare("bench", decl("bench", fmt.Sprintf(`{"type": "directory", "id": "%s/%d"}`, dir, i)))
		meshtest.WaitHeartbeat(b, hbs, "the applied revision", func(hb wire.Heartbeat) bool {
			return hb.DeclarationRevision == rev && hb.LastReconcile != nil && hb.LastReconcile.Trigger == "declaration"
		})
		lat = append(lat, time.Since(began))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[(len(lat)-1)*99/100].Microseconds())/1000, "p99-ms")
}
