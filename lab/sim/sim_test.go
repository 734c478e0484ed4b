package sim

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// consumersOnServer counts the consumers of every stream on the server.
func consumersOnServer(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		n += info.State.Consumers
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

func signedTarget(t *testing.T, key, version string) []byte {
	t.Helper()
	tg, err := wire.NewTarget(key, version, 0, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	return tg.Marshal()
}

// What simulated nodes leave on the server while they follow their four keys: no consumer by
// subscriptions and direct gets (as hosts since decision 0022), four per node by KV watches
// (as hosts before it). Either way a target written later is followed.
func TestSimNodesHoldNoConsumerUnlessToldToWatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		watch bool
		per   int
	}{
		{"subscriptions and direct gets hold none", false, 0},
		{"KV watches hold four per node", true, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := meshtest.Context(t, 60*time.Second)
			b := meshtest.StartBus(t)
			nodes := []string{"n1", "n2", "n3"}
			fleet, err := Start(ctx, Config{
				URLs: []string{b.URL()}, Nodes: nodes, Shards: 2, Running: "v1.0.0", Heartbeat: time.Second,
				StartMin: 10 * time.Millisecond, StartMax: 50 * time.Millisecond, ConfirmAfter: 10 * time.Millisecond,
				Watch: tc.watch, TrustedKeys: []ed25519.PublicKey{meshtest.ReleaseKey.Public},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer fleet.Close()
			if got := consumersOnServer(t, b.Conn.JS); got != tc.per*len(nodes) {
				t.Errorf("%d consumers on the server for %d nodes, want %d", got, len(nodes), tc.per*len(nodes))
			}
			b.Put(b.Names.Targets(), wire.FleetTargetKey, signedTarget(t, wire.FleetTargetKey, "v1.1.0"))
			meshtest.Eventually(t, "every node confirmed the fleet's v1.1.0", func() bool { return fleet.Running("v1.1.0") == len(nodes) })
		})
	}
}

// A node reads its keys again after every reconnect: a target written while its connection was
// down (the server restarted, the shard's next attempt a few seconds away) is acted on once it
// is back, though no notice of the write ever reached it; and one written after is pushed.
func TestSimNodesLoseNoTargetWrittenWhileDisconnected(t *testing.T) {
	ctx := meshtest.Context(t, 60*time.Second)
	b := meshtest.StartBus(t)
	nodes := []string{"n1", "n2"}
	fleet, err := Start(ctx, Config{
		URLs: []string{b.URL()}, Nodes: nodes, Shards: 1, Running: "v1.0.0", Heartbeat: time.Second,
		StartMin: 10 * time.Millisecond, StartMax: 50 * time.Millisecond, ConfirmAfter: 10 * time.Millisecond,
		ReconnectWait: 3 * time.Second, TrustedKeys: []ed25519.PublicKey{meshtest.ReleaseKey.Public},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	gets := fleet.Stats().Gets
	if want := int64(5 * len(nodes)); gets != want {
		t.Errorf("%d direct gets at the start, want %d (five keys per node, the plan's among them)", gets, want)
	}

	b.Stop()
	b.Start()
	key := wire.NodeTargetKey("n1")
	b.Put(b.Names.Targets(), key, signedTarget(t, key, "v1.1.0"))
	if s := fleet.Stats(); s.Reconnects != 0 {
		t.Logf("the shard was back before the write (%d reconnects): it arrives pushed instead", s.Reconnects)
	}
	meshtest.EventuallyWithin(t, "n1 confirmed v1.1.0, written while it was disconnected", 20*time.Second, func() bool { return fleet.Running("v1.1.0") == 1 })
	if s := fleet.Stats(); s.Reconnects < 1 || s.Gets < gets+int64(5*len(nodes)) {
		t.Errorf("stats %+v: want a reconnect followed by a get of every key of every node", s)
	}

	key = wire.NodeTargetKey("n2")
	b.Put(b.Names.Targets(), key, signedTarget(t, key, "v1.1.0"))
	meshtest.Eventually(t, "n2 confirmed v1.1.0, written after the reconnect", func() bool { return fleet.Running("v1.1.0") == 2 })
	if n := consumersOnServer(t, b.Conn.JS); n != 0 {
		t.Errorf("%d consumers on the server after the reconnect, want 0", n)
	}
}
