package lab

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/lab/sim"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// simNodes names n simulated nodes.
func simNodes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("sim%05d", i)
	}
	return out
}

// lastHeartbeat reads node's last word from the heartbeat stream.
func lastHeartbeat(ctx context.Context, t testing.TB, st jetstream.Stream, names wire.Names, node string) wire.Heartbeat {
	t.Helper()
	m, err := st.GetLastMsgForSubject(ctx, names.Heartbeat(node))
	if err != nil {
		t.Fatalf("%s's last heartbeat: %v", node, err)
	}
	hb, err := wire.ParseHeartbeat(m.Data)
	if err != nil {
		t.Fatalf("%s's last heartbeat: %v", node, err)
	}
	return hb
}

// Simulated nodes on a 3-server cluster with R3 buckets follow their own key and the fleet key,
// confirm a newer target, ignore an older one, and roll back from a version they are told to
// fail — each seen in the heartbeat stream as a controller sees it.
func TestSimNodesFollowTheirTargetsOnACluster(t *testing.T) {
	ctx := meshtest.Context(t, 60*time.Second)
	cl := startCluster(t, 3)
	c, err := bus.Connect(ctx, cl.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	names := wire.NamesFor("")
	if err := initReplicated(ctx, c.JS, names, 3, 0); err != nil {
		t.Fatal(err)
	}
	nodes := simNodes(6)
	fleet, err := sim.Start(ctx, sim.Config{
		URLs: []string{cl.Servers[0].URL, cl.Servers[1].URL, cl.Servers[2].URL}, Names: names, Nodes: nodes,
		Shards: 3, Running: "v1.0.0", Heartbeat: 200 * time.Millisecond,
		StartMin: 10 * time.Millisecond, StartMax: 100 * time.Millisecond, ConfirmAfter: 50 * time.Millisecond,
		Fails:       func(node, version string) bool { return node == nodes[1] && version == "v1.1.0" },
		TrustedKeys: []ed25519.PublicKey{meshtest.ReleaseKey.Public},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	kv, err := c.JS.KeyValue(ctx, names.Targets())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, version string) {
		t.Helper()
		tg, err := wire.NewTarget(key, version, 0, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, key, tg.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	st, err := c.JS.Stream(ctx, names.HeartbeatStream())
	if err != nil {
		t.Fatal(err)
	}
	says := func(node string, ok func(wire.Heartbeat) bool) func() bool {
		return func() bool { return ok(lastHeartbeat(ctx, t, st, names, node)) }
	}

	put(wire.NodeTargetKey(nodes[0]), "v1.1.0")
	put(wire.NodeTargetKey(nodes[1]), "v1.1.0")
	put(wire.NodeTargetKey(nodes[2]), "v0.9.0")
	meshtest.Eventually(t, nodes[0]+" confirmed v1.1.0", says(nodes[0], func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.KnownGood == "v1.1.0" && hb.Target == "v1.1.0"
	}))
	meshtest.Eventually(t, nodes[1]+" rolled back from v1.1.0", says(nodes[1], func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.0.0" && len(hb.Rollbacks) == 1 && hb.Rollbacks[0].From == "v1.1.0"
	}))
	meshtest.Eventually(t, nodes[2]+" heard its older target", says(nodes[2], func(hb wire.Heartbeat) bool { return hb.Target == "v0.9.0" }))
	if hb := lastHeartbeat(ctx, t, st, names, nodes[2]); hb.Running != "v1.0.0" {
		t.Errorf("%s runs %s after an older target; want v1.0.0 kept", nodes[2], hb.Running)
	}

	// The fleet key reaches every node without its own key; a deleted own key falls back to it.
	put(wire.FleetTargetKey, "v1.2.0")
	if err := kv.Delete(ctx, wire.NodeTargetKey(nodes[2])); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{nodes[2], nodes[3], nodes[4], nodes[5]} {
		meshtest.Eventually(t, n+" confirmed the fleet's v1.2.0", says(n, func(hb wire.Heartbeat) bool {
			return hb.Running == "v1.2.0" && hb.KnownGood == "v1.2.0"
		}))
	}
	if hb := lastHeartbeat(ctx, t, st, names, nodes[0]); hb.Running != "v1.1.0" || hb.Target != "v1.1.0" {
		t.Errorf("%s follows %s/%s; want its own key v1.1.0 over the fleet key", nodes[0], hb.Running, hb.Target)
	}
	if got := fleet.Targeted("v1.1.0"); len(got) != 2 {
		t.Errorf("targeted with v1.1.0: %v; want the two nodes whose own key named it", got)
	}
	if got := fleet.Targeted("v1.2.0"); len(got) != 0 {
		t.Errorf("targeted with v1.2.0: %v; want none (only the fleet key named it)", got)
	}
	if s := fleet.Stats(); s.Heartbeats < int64(len(nodes)) || s.Errors != 0 {
		t.Errorf("stats %+v: want every heartbeat stored", s)
	}

	// As a host does, a node does not act on a target signed by a key it does not trust, nor on
	// one moved from another key.
	stranger, err := wire.NewTarget(wire.NodeTargetKey(nodes[3]), "v1.3.0", 0, time.Now(), time.Hour, meshtest.StrangerKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := wire.NewTarget(wire.NodeTargetKey(nodes[5]), "v1.3.0", 0, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	refused := fleet.Stats().Refused
	for key, tg := range map[string]wire.Target{wire.NodeTargetKey(nodes[3]): stranger, wire.NodeTargetKey(nodes[4]): moved} {
		if _, err := kv.Put(ctx, key, tg.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	meshtest.Eventually(t, "both refused", func() bool { return fleet.Stats().Refused >= refused+2 })
	for _, n := range []string{nodes[3], nodes[4]} {
		if hb := lastHeartbeat(ctx, t, st, names, n); hb.Running != "v1.2.0" || hb.Target != "v1.2.0" {
			t.Errorf("%s follows %s/%s after a target it must refuse; want the fleet's v1.2.0 kept", n, hb.Running, hb.Target)
		}
	}
}

// The scale benchmark's machinery at a tiny size, so CI runs it: 30 simulated nodes over a
// 3-server cluster with R3 buckets; the real controller completes a good rollout batch by batch
// and halts a bad one in the batch holding the nodes that roll it back (runScale asserts it).
func TestSimRolloutCompletesAndHaltsOnACluster(t *testing.T) {
	runScale(t, scaleParams{
		Nodes: 30, Shards: 3, Servers: 3,
		Heartbeat: 250 * time.Millisecond, StartMin: 20 * time.Millisecond, StartMax: 200 * time.Millisecond, ConfirmAfter: 50 * time.Millisecond,
		Canary: 2, Steps: []int{50, 100}, Soak: time.Second, Window: 30 * time.Second, Silent: 10 * time.Second,
		FailBatch: 1, FailCount: 2,
	})
}
