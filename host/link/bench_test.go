package link

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkDeclarationPutToEvent measures the link's share of "declaration put → heartbeat
// showing it applied": from a KV put on the bus to DeclarationArrived on the host's events, over
// loopback. It reports the median and p99.
//
//	go test -run '^$' -bench BenchmarkDeclarationPutToEvent -benchtime 2000x ./host/link
func BenchmarkDeclarationPutToEvent(b *testing.B) {
	bb := meshtest.StartBus(b)
	l, err := Open(context.Background(), Options{URLs: []string{bb.URL()}, Node: "n1", Names: names})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	kv := bb.KV(names.Declarations())
	for ev := range l.Events() { // watches start after Connected; the initial TargetChanged follows them
		if _, ok := ev.(TargetChanged); ok {
			break
		}
	}
	value := wire.Declaration{Version: 1, Node: "n1"}.Marshal()
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		rev, err := kv.Put(ctx, "n1", value)
		if err != nil {
			b.Fatal(err)
		}
		for ev := range l.Events() {
			if d, ok := ev.(DeclarationArrived); ok && d.Revision == rev {
				break
			}
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkHeartbeatPublish measures one heartbeat published and stored by the stream.
func BenchmarkHeartbeatPublish(b *testing.B) {
	bb := meshtest.StartBus(b)
	l, err := Open(context.Background(), Options{URLs: []string{bb.URL()}, Node: "n1", Names: names})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for ev := range l.Events() {
		if _, ok := ev.(Connected); ok {
			break
		}
	}
	go func() {
		for range l.Events() {
		}
	}()
	ctx := context.Background()
	hb := wire.Heartbeat{State: wire.StateRunning, Running: "v1.0.0", LastReconcile: &wire.LastReconcile{OK: true, Trigger: wire.TriggerTimer}}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.PublishHeartbeat(ctx, hb); err != nil {
			b.Fatal(err)
		}
	}
}
