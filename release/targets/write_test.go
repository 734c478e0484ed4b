package targets

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func testSigner(ttl time.Duration) Signer {
	return Signer{Key: meshtest.ReleaseKey.Private, TTL: ttl}
}

func trusted(keys ...meshtest.KeyPair) []ed25519.PublicKey {
	out := make([]ed25519.PublicKey, len(keys))
	for i, k := range keys {
		out[i] = k.Public
	}
	return out
}

// read reads key and fails the test unless it holds a target.
func read(t *testing.T, b *meshtest.Bus, key string) (wire.Target, uint64) {
	t.Helper()
	e, err := b.KV(b.Names.Targets()).Get(meshtest.Context(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	tg, err := wire.ParseTarget(e.Value())
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return tg, e.Revision()
}

// Every target Update writes verifies for the key it is stored under, with the signer's key
// only, whatever the key held before, and is numbered after what it replaced.
func TestUpdateWritesASignedTargetNumberedAfterWhatTheKeyHeld(t *testing.T) {
	future := uint64(time.Now().Add(time.Hour).UnixMilli())
	for _, tc := range []struct {
		name    string
		before  func(b *meshtest.Bus, key string)
		minSeq  uint64 // the seq written must be above this
		fromNow bool   // the seq is at least now in Unix milliseconds
	}{
		{"an absent key", func(*meshtest.Bus, string) {}, 0, true},
		{"a deleted key", func(b *meshtest.Bus, key string) {
			b.Put(b.Names.Targets(), key, wire.Target{Version: "v0.9.0", Seq: 5, Expires: "2030-01-01T00:00:00Z"}.Marshal())
			b.Delete(b.Names.Targets(), key)
		}, 0, true},
		{"an unsigned target from before signing", func(b *meshtest.Bus, key string) {
			b.Put(b.Names.Targets(), key, []byte(`{"version":"v0.9.0"}`))
		}, 0, true},
		{"a target numbered ahead of this clock", func(b *meshtest.Bus, key string) {
			b.Put(b.Names.Targets(), key, wire.Target{Version: "v0.9.0", Seq: future, Expires: "2030-01-01T00:00:00Z"}.Marshal())
		}, future, false},
		{"an unreadable value that carries a seq", func(b *meshtest.Bus, key string) {
			b.Put(b.Names.Targets(), key, []byte(`{"version":"not a version","seq":`+itoa(future)+`}`))
		}, future, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			ctx := meshtest.Context(t, 20*time.Second)
			key := wire.NodeTargetKey("web-01")
			tc.before(b, key)
			w := Writer{KV: b.KV(b.Names.Targets()), Signer: testSigner(time.Hour)}
			before := uint64(time.Now().UnixMilli())
			res, err := w.Update(ctx, key, nil, func(Current) Decision { return SetTo("v1.1.0") })
			if err != nil || !res.Wrote {
				t.Fatalf("update: %+v, %v", res, err)
			}
			got, rev := read(t, b, key)
			if rev != res.Rev || !bytes.Equal(got.Marshal(), res.Target.Marshal()) {
				t.Errorf("the key holds %+v at %d; Update said %+v at %d", got, rev, res.Target, res.Rev)
			}
			if err := got.Verify(key, wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()); err != nil {
				t.Errorf("the target written does not verify: %v", err)
			}
			if err := got.Verify(wire.FleetTargetKey, wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()); !errors.Is(err, wire.ErrTargetBadSignature) {
				t.Errorf("moved to the fleet key it verifies: %v", err)
			}
			if err := got.Verify(key, wire.LegacyTrust(nil, trusted(meshtest.StrangerKey)), time.Now()); !errors.Is(err, wire.ErrTargetUnknownKey) {
				t.Errorf("it verifies with a key that did not sign it: %v", err)
			}
			if got.Version != "v1.1.0" || got.Seq <= tc.minSeq || (tc.fromNow && got.Seq < before) {
				t.Errorf("target %+v: want v1.1.0, seq above %d (and from now: %v, %d)", got, tc.minSeq, tc.fromNow, before)
			}
			if left := time.Until(got.ExpiresAt()); left <= 58*time.Minute || left > time.Hour {
				t.Errorf("expires in %s; want the signer's hour", left)
			}
		})
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// A write decided on a value that changed since it was read is not made over the new value: the
// key is read again and the decision taken again on what it holds now.
func TestUpdateDecidesAgainWhenTheKeyChangedSinceItWasRead(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 20*time.Second)
	key := wire.NodeTargetKey("web-01")
	w := Writer{KV: b.KV(b.Names.Targets()), Signer: testSigner(time.Hour)}
	if _, err := w.Update(ctx, key, nil, func(Current) Decision { return SetTo("v1.0.0") }); err != nil {
		t.Fatal(err)
	}
	stale, err := w.Read(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Someone else sets v1.2.0 after the read.
	if _, err := w.Update(ctx, key, nil, func(Current) Decision { return SetTo("v1.2.0") }); err != nil {
		t.Fatal(err)
	}
	var seen []string
	res, err := w.Update(ctx, key, &stale, func(c Current) Decision {
		seen = append(seen, c.Target.Version)
		if c.Names("v1.0.0") {
			return SetTo("v0.9.0") // restore, as a halt does, only where the key still names its version
		}
		return Leave()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0] != "v1.0.0" || seen[1] != "v1.2.0" || res.Wrote {
		t.Errorf("decided on %v, wrote %v; want v1.0.0, then v1.2.0 read again and left", seen, res.Wrote)
	}
	if got, _ := read(t, b, key); got.Version != "v1.2.0" {
		t.Errorf("the key names %s; want the other writer's v1.2.0 kept", got.Version)
	}

	// A deletion is compare-and-set too.
	stale, _ = w.Read(ctx, key)
	if _, err := w.Update(ctx, key, nil, func(Current) Decision { return SetTo("v1.3.0") }); err != nil {
		t.Fatal(err)
	}
	res, err = w.Update(ctx, key, &stale, func(c Current) Decision {
		if c.Names("v1.2.0") {
			return Delete()
		}
		return Leave()
	})
	if err != nil || res.Deleted {
		t.Fatalf("delete on a stale read: %+v, %v", res, err)
	}
	if got, _ := read(t, b, key); got.Version != "v1.3.0" {
		t.Errorf("the key names %s; want v1.3.0 kept", got.Version)
	}
	res, err = w.Update(ctx, key, nil, func(c Current) Decision { return Delete() })
	if err != nil || !res.Deleted {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	if _, err := b.KV(b.Names.Targets()).Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

// A signer without a key, or with no validity, signs nothing; NewSigner holds --target-ttl to
// its bounds and names the flag.
func TestASignerWithoutAKeyOrValiditySignsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  ed25519.PrivateKey
		ttl  time.Duration
		want string
	}{
		{"no key", nil, time.Hour, "--key: no target key"},
		{"a short key", ed25519.PrivateKey(make([]byte, 12)), time.Hour, "--key: no target key"},
		{"too short a validity", meshtest.ReleaseKey.Private, time.Second, "--target-ttl 1s: want between 1m0s and"},
		{"too long a validity", meshtest.ReleaseKey.Private, 11 * 365 * 24 * time.Hour, "--target-ttl 96360h0m0s: want between"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewSigner(tc.key, tc.ttl)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSigner: %v; want %q", err, tc.want)
			}
		})
	}
	if _, err := (Signer{TTL: time.Hour}).Sign(wire.FleetTargetKey, "v1.0.0", 0); !errors.Is(err, ErrNoKey) {
		t.Errorf("Sign without a key: %v", err)
	}
}
