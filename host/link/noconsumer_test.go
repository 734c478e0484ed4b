package link

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// consumersOnServer counts the consumers on every stream of the bus, as the server holds them.
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

// A node follows its declaration, its target and the withdrawal list through a server restart
// with no JetStream consumer on the server (decision 0022; 4 per node before): what is written
// while its link is down — here just after the server is back, before the link's next attempt —
// arrives once it reconnects, and what is written later is pushed, not polled.
func TestLinkFollowsItsKeysThroughARestartWithNoConsumerOnTheServer(t *testing.T) {
	b := meshtest.StartBus(t)
	withdrawalsBucket(t, b.Conn.JS)
	r1 := b.Put(names.Declarations(), "n1", decl("n1"))
	const nodes = 3
	links := make([]*Link, nodes)
	for i := range links {
		links[i] = openLink(t, b.URL(), []string{"n1", "n2", "n3"}[i])
	}
	// n1's link waits a second between attempts: the writes below land while it is down.
	slow, err := Open(context.Background(), Options{URLs: []string{b.URL()}, Node: "n1", Names: names,
		ReconnectWait: time.Second, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	links[0].Close()
	links[0] = slow
	l := links[0]
	// The keys report in any order.
	for gotDecl, gotTarget, deadline := false, false, time.After(15*time.Second); !gotDecl || !gotTarget; {
		select {
		case ev := <-l.Events():
			switch ev := ev.(type) {
			case DeclarationArrived:
				gotDecl = gotDecl || ev.Revision == r1
			case TargetChanged:
				gotTarget = gotTarget || ev.Key == ""
			}
		case <-deadline:
			t.Fatalf("before the restart: declaration %v, no target %v", gotDecl, gotTarget)
		}
	}
	for _, other := range links[1:] {
		waitFor[TargetChanged](t, other, "no target yet", func(e TargetChanged) bool { return e.Key == "" })
	}
	if n := consumersOnServer(t, b.Conn.JS); n != 0 {
		t.Fatalf("%d consumers on the server for %d connected nodes, want 0", n, nodes)
	}
	t.Logf("consumers on the server with %d nodes connected and following their keys: 0 (0 per node)", nodes)

	b.Stop()
	waitFor[Disconnected](t, l, "disconnected", nil)
	b.Start()
	// Written before the link is back (its next attempt is a second away).
	r2 := b.Put(names.Declarations(), "n1", decl("n1"))
	tr := b.Put(names.Targets(), wire.NodeTargetKey("n1"), target(t, wire.NodeTargetKey("n1"), "v1.2.0"))
	if l.Connected() {
		t.Log("the link was back before the writes: they arrive pushed instead")
	}
	w, err := wire.Withdrawals{}.Withdraw("v1.0.1", "broken", time.Now(), meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	wr := b.Put(names.Withdrawals(), wire.WithdrawalsKey, w.Marshal())
	var (
		gotDecl, gotW bool
		gotTarget     bool
	)
	deadline := time.After(30 * time.Second)
	for !gotDecl || !gotW || !gotTarget {
		select {
		case ev := <-l.Events():
			switch ev := ev.(type) {
			case DeclarationArrived:
				if ev.Revision == r1 {
					t.Errorf("revision %d reported twice", r1)
				}
				gotDecl = gotDecl || ev.Revision == r2
			case TargetChanged:
				gotTarget = gotTarget || (ev.Key == wire.NodeTargetKey("n1") && ev.Revision == tr)
			case WithdrawalsArrived:
				gotW = gotW || ev.Revision == wr
			}
		case <-deadline:
			t.Fatalf("after the restart: declaration %v, target %v, withdrawals %v", gotDecl, gotTarget, gotW)
		}
	}
	// Pushed: a write after the link is back arrives without anything asking.
	r3 := b.Put(names.Declarations(), "n1", decl("n1"))
	waitFor[DeclarationArrived](t, l, "the declaration written after the reconnect", func(e DeclarationArrived) bool { return e.Revision == r3 })
	b.Delete(names.Targets(), wire.NodeTargetKey("n1"))
	waitFor[TargetChanged](t, l, "the node target deleted", func(e TargetChanged) bool { return e.Key == "" })
	if n := consumersOnServer(t, b.Conn.JS); n != 0 {
		t.Errorf("%d consumers on the server after the restart, want 0", n)
	}
}
