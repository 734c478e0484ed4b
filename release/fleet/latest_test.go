package fleet

import (
	"context"
	"testing"

	"github.com/novox/mesh-host/wire/meshtest"
)

func TestLastReadsOneNodesLastWord(t *testing.T) {
	b := meshtest.StartBus(t)
	heartbeat(t, b, "web-01", "v1.0.0")
	heartbeat(t, b, "web-01", "v1.1.0")
	ctx := context.Background()
	e, ok, err := Last(ctx, b.Conn.JS, names, "web-01")
	if err != nil || !ok || e.Node != "web-01" || e.Heartbeat.Running != "v1.1.0" || e.Heard.IsZero() || e.Err != nil {
		t.Fatalf("Last = %+v, %v, %v", e, ok, err)
	}
	if _, ok, err := Last(ctx, b.Conn.JS, names, "web-02"); ok || err != nil {
		t.Fatalf("a node never heard: ok %v, err %v", ok, err)
	}
}
