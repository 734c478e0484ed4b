package targets

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// put writes a target for version under key signed by key with ttl of validity left (negative:
// expired that long ago) and returns its revision.
func put(t *testing.T, b *meshtest.Bus, key, version string, signer meshtest.KeyPair, left time.Duration) uint64 {
	t.Helper()
	now := time.Now()
	tg, err := wire.NewTarget(key, version, 0, now.Add(-time.Hour), time.Hour+left, signer.Private)
	if err != nil {
		t.Fatal(err)
	}
	return b.Put(b.Names.Targets(), key, tg.Marshal())
}

// keepRunning runs Keep on its own lasting connection until the test ends.
func keepRunning(t *testing.T, b *meshtest.Bus, ttl time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := bus.Connect(meshtest.Context(t, 10*time.Second), b.URL(), "", bus.Lasting(nil))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Keep(ctx, c.JS, b.Names, meshtest.ReleaseKey.Private, ttl, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Keep ended with %v; want the context's end", err)
		}
		c.Close()
	})
}

// waitResigned waits until key holds a target of version, verifying with the release key, with
// more than min of validity left, and returns it.
func waitResigned(t *testing.T, b *meshtest.Bus, key, version string, min time.Duration) wire.Target {
	t.Helper()
	var got wire.Target
	meshtest.Eventually(t, key+" signed again", func() bool {
		e, err := b.KV(b.Names.Targets()).Get(context.Background(), key)
		if err != nil {
			return false
		}
		got, err = wire.ParseTarget(e.Value())
		return err == nil && time.Until(got.ExpiresAt()) > min
	})
	if got.Version != version {
		t.Errorf("%s names %s after signing again; want %s kept", key, got.Version, version)
	}
	if err := got.Verify(key, wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()); err != nil {
		t.Errorf("%s: %v", key, err)
	}
	return got
}

// Keep re-signs the targets of its key that have less than half the TTL left (the expired
// ones too), keeping their version and numbering them after; it leaves alone targets with more
// left, targets of another key and unsigned ones; and it keeps doing so for targets set after
// it started and after the bus restarted.
func TestKeepSignsAgainTheTargetsOfItsKeyBeforeTheyExpire(t *testing.T) {
	b := meshtest.StartBus(t)
	const ttl = time.Minute // due with less than 30s left
	put(t, b, wire.NodeTargetKey("due"), "v1.1.0", meshtest.ReleaseKey, 20*time.Second)
	put(t, b, wire.FleetTargetKey, "v1.0.0", meshtest.ReleaseKey, -time.Minute)
	leave := map[string]uint64{
		wire.NodeTargetKey("fresh"):    put(t, b, wire.NodeTargetKey("fresh"), "v1.1.0", meshtest.ReleaseKey, 50*time.Second),
		wire.NodeTargetKey("foreign"):  put(t, b, wire.NodeTargetKey("foreign"), "v1.1.0", meshtest.SecondKey, 10*time.Second),
		wire.NodeTargetKey("unsigned"): b.Put(b.Names.Targets(), wire.NodeTargetKey("unsigned"), []byte(`{"version":"v1.1.0"}`)),
	}
	beforeSeq := func(key string) uint64 {
		e, _ := b.KV(b.Names.Targets()).Get(context.Background(), key)
		tg, _ := wire.ParseTarget(e.Value())
		return tg.Seq
	}
	dueSeq, fleetSeq := beforeSeq(wire.NodeTargetKey("due")), beforeSeq(wire.FleetTargetKey)

	keepRunning(t, b, ttl)
	if got := waitResigned(t, b, wire.NodeTargetKey("due"), "v1.1.0", 50*time.Second); got.Seq <= dueSeq {
		t.Errorf("seq %d after %d", got.Seq, dueSeq)
	}
	if got := waitResigned(t, b, wire.FleetTargetKey, "v1.0.0", 50*time.Second); got.Seq <= fleetSeq {
		t.Errorf("fleet seq %d after %d", got.Seq, fleetSeq)
	}
	for key, rev := range leave {
		if e, err := b.KV(b.Names.Targets()).Get(context.Background(), key); err != nil || e.Revision() != rev {
			t.Errorf("%s: revision %v (%v); want %d left alone", key, e, err, rev)
		}
	}

	// A target set after Keep started, and one set after the bus restarted.
	put(t, b, wire.NodeTargetKey("later"), "v1.2.0", meshtest.ReleaseKey, 5*time.Second)
	waitResigned(t, b, wire.NodeTargetKey("later"), "v1.2.0", 50*time.Second)
	b.Stop()
	b.Start()
	put(t, b, wire.NodeTargetKey("after-restart"), "v1.2.0", meshtest.ReleaseKey, 5*time.Second)
	waitResigned(t, b, wire.NodeTargetKey("after-restart"), "v1.2.0", 50*time.Second)
}

// Two Keeps on one bus (serve and a rollout controller) never fight: each due target is signed
// again and stays its version, whichever wins.
func TestTwoKeepsSignEachTargetAgainWithoutLosingIt(t *testing.T) {
	b := meshtest.StartBus(t)
	keys := []string{wire.FleetTargetKey}
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		keys = append(keys, wire.NodeTargetKey(n))
	}
	for _, k := range keys {
		put(t, b, k, "v1.3.0", meshtest.ReleaseKey, time.Second)
	}
	keepRunning(t, b, time.Minute)
	keepRunning(t, b, time.Minute)
	for _, k := range keys {
		waitResigned(t, b, k, "v1.3.0", 50*time.Second)
	}
}

// Keep refuses at once what it cannot work with: no key, a TTL out of bounds, no bucket.
func TestKeepRefusesAMissingKeyABadTTLAndAMissingBucket(t *testing.T) {
	b := meshtest.StartBus(t, meshtest.NoBuckets())
	ctx := meshtest.Context(t, 20*time.Second)
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"no key", func() error { return Keep(ctx, b.Conn.JS, b.Names, nil, time.Hour, nil) }, "no target key"},
		{"a TTL under a minute", func() error {
			return Keep(ctx, b.Conn.JS, b.Names, meshtest.ReleaseKey.Private, time.Second, nil)
		}, "--target-ttl 1s"},
		{"no targets bucket", func() error {
			return Keep(ctx, b.Conn.JS, b.Names, meshtest.ReleaseKey.Private, time.Hour, nil)
		}, "create the buckets with `mesh-release init`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.err(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Keep: %v; want %q", err, tc.want)
			}
		})
	}
}
