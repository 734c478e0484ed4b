package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkFleetRead measures reading every node's last heartbeat (what `mesh-release fleet`
// does) with 1,000 nodes in the stream.
func BenchmarkFleetRead(b *testing.B) {
	ctx := context.Background()
	c := meshtest.StartBus(b).Conn
	const nodes = 1000
	for i := 0; i < nodes; i++ {
		node := fmt.Sprintf("n%04d", i)
		hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", SentAt: time.Now().UTC()}
		if _, err := c.JS.Publish(ctx, names.Heartbeat(node), hb.Marshal()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		es, err := Read(ctx, c.JS, names)
		if err != nil || len(es) != nodes {
			b.Fatalf("read %d entries, %v", len(es), err)
		}
		_ = Rows(es, time.Now(), DefaultSilentAfter)
	}
}
