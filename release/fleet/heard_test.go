package fleet

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// LastHeard answers for one node without reading the fleet; Heard lists every node heard.
func TestLastHeardAndHeardAnswerFromTheStream(t *testing.T) {
	c := meshtest.StartBus(t)
	ctx := context.Background()
	if nodes, err := Heard(ctx, c.Conn.JS, names); err != nil || len(nodes) != 0 {
		t.Fatalf("an empty stream: %v, %v", nodes, err)
	}
	heartbeat(t, c, "web-02", "v1.0.0")
	heartbeat(t, c, "web-01", "v1.0.0")
	heartbeat(t, c, "web-01", "v1.1.0")
	for _, tc := range []struct {
		node string
		ok   bool
	}{{"web-01", true}, {"web-02", true}, {"web-10", false}} {
		at, ok, err := LastHeard(ctx, c.Conn.JS, names, tc.node)
		if err != nil || ok != tc.ok || ok == at.IsZero() || (ok && time.Since(at) > time.Minute) {
			t.Errorf("LastHeard(%s) = %v, %v, %v; want ok=%v and a recent time when ok", tc.node, at, ok, err, tc.ok)
		}
	}
	if nodes, err := Heard(ctx, c.Conn.JS, names); err != nil || !reflect.DeepEqual(nodes, []string{"web-01", "web-02"}) {
		t.Errorf("Heard = %v, %v", nodes, err)
	}
	bare := meshtest.StartBus(t, meshtest.NoBuckets())
	if _, _, err := LastHeard(ctx, bare.Conn.JS, names, "web-01"); err == nil || !strings.Contains(err.Error(), "mesh-release init") {
		t.Errorf("no stream: %v; want it to say to run init", err)
	}
}

// The issue: a fleet of one read "1 nodes".
func TestFleetSummaryCountsInTheRightNumber(t *testing.T) {
	now := time.Now()
	for n, want := range map[int]string{0: "0 nodes, 0 silent", 1: "1 node, 0 silent", 2: "2 nodes, 0 silent"} {
		var es []Entry
		for i := 0; i < n; i++ {
			node := fmt.Sprintf("n%d", i)
			es = append(es, Entry{Node: node, Heard: now, Heartbeat: wire.Heartbeat{Node: node, State: wire.StateRunning}})
		}
		var buf bytes.Buffer
		if err := WriteText(&buf, Rows(es, now, 0), 0); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "\n"+want+" (") {
			t.Errorf("%d nodes: %q, want %q", n, buf.String(), want)
		}
	}
}
