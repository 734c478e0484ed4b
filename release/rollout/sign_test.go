package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A controller without a target key cannot set a target a host would obey, so it is not made;
// neither is an abort, which sets its batch's targets back.
func TestAControllerOrAnAbortWithoutATargetKeyIsRefused(t *testing.T) {
	b := meshtest.StartBus(t)
	if _, err := New(Config{JS: b.Conn.JS}); !errors.Is(err, targets.ErrNoKey) {
		t.Errorf("New without a key: %v", err)
	}
	if _, err := New(Config{JS: b.Conn.JS, Key: testSigner.Key, TargetTTL: time.Second}); err == nil || !strings.Contains(err.Error(), "--target-ttl 1s") {
		t.Errorf("New with a TTL under a minute: %v", err)
	}
	if _, err := Abort(meshtest.Context(t, 10*time.Second), b.Conn.JS, b.Names, "alice", targets.Signer{}); !errors.Is(err, targets.ErrNoKey) {
		t.Errorf("Abort without a key: %v", err)
	}
}

// A withdrawn version is never rolled out: start refuses it, saying when and why it was
// withdrawn, and writes nothing.
func TestStartRefusesAWithdrawnVersionWithTheReason(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	startSim(t, b, sixNodes()...)
	ctx := meshtest.Context(t, 30*time.Second)
	if _, err := targets.Withdraw(ctx, b.Conn.JS, b.Names, "v1.1.0", "corrupts the cache on upgrade", meshtest.ReleaseKey.Private, nil); err != nil {
		t.Fatal(err)
	}
	_, err := newController(t, connect(t, b), nil, "").Start(ctx, testOptions("v1.1.0"))
	if !errors.Is(err, targets.ErrWithdrawn) || !strings.Contains(err.Error(), `"corrupts the cache on upgrade"`) {
		t.Fatalf("start: %v; want it refused as withdrawn, with the reason", err)
	}
	if _, ok, err := Current(ctx, b.Conn.JS, b.Names); ok || err != nil {
		t.Errorf("a rollout was stored: %v, %v", ok, err)
	}
	for _, n := range []string{wire.FleetTargetKey, wire.NodeTargetKey("node-1")} {
		if _, _, ok := targetKey(t, b, n); ok {
			t.Errorf("%s was set", n)
		}
	}
}

// The watch skips a withdrawn version, saying so, and on start rolls out the newest one that is
// not withdrawn.
func TestWatchSkipsAWithdrawnVersionAndRollsOutTheNewestOtherOne(t *testing.T) {
	b := meshtest.StartBus(t)
	startSim(t, b, sixNodes()...)
	publishRelease(t, b, "v1.1.0")
	publishRelease(t, b, "v1.2.0")
	ctx := meshtest.Context(t, 60*time.Second)
	if _, err := targets.Withdraw(ctx, b.Conn.JS, b.Names, "v1.2.0", "leaks file descriptors", meshtest.ReleaseKey.Private, nil); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	defer func() { ev.dump(t) }()
	c := newController(t, connect(t, b), ev, "watch")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Watch(wctx, testOptions("")) }()
	waitEvent(t, ev, EventSkipped, func(e Event) bool {
		return e.Version == "v1.2.0" && strings.Contains(e.Message, `v1.2.0 is not rolled out: it is withdrawn (at `) && strings.Contains(e.Message, `"leaks file descriptors"`)
	})
	waitEvent(t, ev, EventCompleted, func(e Event) bool { return e.Version == "v1.1.0" })
	// A version withdrawn before it is published is skipped when it is.
	if _, err := targets.Withdraw(ctx, b.Conn.JS, b.Names, "v1.3.0", "", meshtest.ReleaseKey.Private, nil); err != nil {
		t.Fatal(err)
	}
	publishRelease(t, b, "v1.3.0")
	waitEvent(t, ev, EventSkipped, func(e Event) bool {
		return e.Version == "v1.3.0" && strings.Contains(e.Message, "it is withdrawn")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(ev.kinds(EventStarted)); n != 1 {
		t.Errorf("%d rollouts started; want only v1.1.0's", n)
	}
}

// While a controller drives a rollout it signs again the targets of its key that are close to
// expiring, whether it set them or not: a node waiting in a later batch keeps a valid target.
func TestAControllerKeepsTheTargetsOfItsKeyFromExpiringWhileItRuns(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	ns := sixNodes()
	ns[0].takes["v1.1.0"] = hangs // the canary batch waits out its window
	startSim(t, b, ns...)
	// The fleet key, set long ago with a minute of validity left.
	old, err := wire.NewTarget(wire.FleetTargetKey, "v1.0.0", 0, time.Now().Add(-time.Hour), time.Hour+time.Minute/4, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	b.Put(b.Names.Targets(), wire.FleetTargetKey, old.Marshal())
	ctx := meshtest.Context(t, 60*time.Second)
	c := newController(t, connect(t, b), nil, "")
	c.cfg.TargetTTL = time.Minute // due with less than 30s left
	o := testOptions("v1.1.0")
	o.CanaryNodes, o.Window = []string{"node-1", "node-2"}, 30*time.Second
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := runAsync(rctx, c, st.ID)
	meshtest.Eventually(t, "the fleet key signed again", func() bool {
		e, err := b.KV(b.Names.Targets()).Get(ctx, wire.FleetTargetKey)
		if err != nil {
			return false
		}
		tg, err := wire.ParseTarget(e.Value())
		return err == nil && tg.Seq > old.Seq && time.Until(tg.ExpiresAt()) > 50*time.Second && tg.Version == "v1.0.0"
	})
	cancel()
	<-done
}
