package targets

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// probe is a target every test here puts due: once the keeper signed it again, a pass judged
// every window and the list (a pass takes them first).
var probe = wire.NodeTargetKey("probe")

// keepSigned runs KeepSigned with s on its own lasting connection until the test ends.
func keepSigned(t *testing.T, b *meshtest.Bus, s Signer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := bus.Connect(meshtest.Context(t, 10*time.Second), b.URL(), "", bus.Lasting(nil))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- KeepSigned(ctx, c.JS, b.Names, s, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("KeepSigned ended with %v; want the context's end", err)
		}
		c.Close()
	})
}

// A withdrawal list of the keeper's key with less than half of the period it was signed for
// left is signed again: a higher seq, the same withdrawals, valid that period again from now,
// by every key of the keeper; a list with time left, one of another key and one that never
// expires are left as they are.
func TestKeepSignsTheWithdrawalListAgainBeforeItExpires(t *testing.T) {
	const period = time.Minute
	for _, tc := range []struct {
		name     string
		signer   meshtest.KeyPair
		signedAt time.Duration // before now
		ttl      time.Duration // 0: no expiry
		more     bool          // the keeper signs with a second key too
		renewed  bool
	}{
		{"due: 10s of its minute left", meshtest.ReleaseKey, 50 * time.Second, period, false, true},
		{"due, signed again by both keys of a threshold of two", meshtest.ReleaseKey, 50 * time.Second, period, true, true},
		{"expired already", meshtest.ReleaseKey, 2 * period, period, false, true},
		{"not due: 50s of its minute left", meshtest.ReleaseKey, 10 * time.Second, period, false, false},
		{"another key's", meshtest.StrangerKey, 50 * time.Second, period, false, false},
		{"a list that never expires", meshtest.ReleaseKey, 50 * time.Second, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			at := time.Now().Add(-tc.signedAt)
			first, err := wire.Withdrawals{}.WithdrawFor("v1.2.0", "leaks fds", at, tc.ttl, tc.signer.Private)
			if err != nil {
				t.Fatal(err)
			}
			list, err := first.WithdrawFor("v1.3.0", "crashes on arm64", at, tc.ttl, tc.signer.Private)
			if err != nil {
				t.Fatal(err)
			}
			rev := b.Put(b.Names.Withdrawals(), wire.WithdrawalsKey, list.Marshal())
			put(t, b, probe, "v1.0.0", meshtest.ReleaseKey, time.Second)
			s := Signer{Key: meshtest.ReleaseKey.Private, TTL: 7 * 24 * time.Hour}
			if tc.more {
				s.More = append(s.More, meshtest.SecondKey.Private)
			}
			keepSigned(t, b, s)
			kv := b.KV(b.Names.Withdrawals())
			if !tc.renewed {
				// A pass judges the windows and the list before the targets: once the probe
				// target is signed again, the list was judged.
				waitResigned(t, b, probe, "v1.0.0", 30*time.Second)
				if e, err := kv.Get(context.Background(), wire.WithdrawalsKey); err != nil || e.Revision() != rev {
					t.Fatalf("the list was written (%v, revision %d, was %d)", err, e.Revision(), rev)
				}
				return
			}
			var got wire.Withdrawals
			meshtest.Eventually(t, "the list signed again", func() bool {
				e, err := kv.Get(context.Background(), wire.WithdrawalsKey)
				if err != nil || e.Revision() == rev {
					return false
				}
				got, err = wire.ParseWithdrawals(e.Value())
				return err == nil
			})
			if got.Seq <= list.Seq || !slices.Equal(got.Withdrawn, list.Withdrawn) {
				t.Errorf("signed again as seq %d %+v; want a seq above %d and the same withdrawals %+v", got.Seq, got.Withdrawn, list.Seq, list.Withdrawn)
			}
			if left := time.Until(got.ExpiresAt()); left < period-10*time.Second || left > period {
				t.Errorf("valid %s from now; want the minute it was signed for", left)
			}
			wantKeys := []string{wire.KeyID(meshtest.ReleaseKey.Public)}
			if tc.more {
				wantKeys = append(wantKeys, wire.KeyID(meshtest.SecondKey.Public))
			}
			var keys []string
			for _, sg := range got.List() {
				keys = append(keys, sg.KeyID)
			}
			if !slices.Equal(keys, wantKeys) || (tc.more != (got.KeyID == "")) {
				t.Errorf("signed by %v (key_id %q); want %v", keys, got.KeyID, wantKeys)
			}
			trust := wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey))
			if err := got.Verify(trust, time.Now()); err != nil {
				t.Error(err)
			}
		})
	}
}

// A window of the keeper's key nearing its expiry is signed again with the same schedule and
// nodes, a higher seq and the period it was signed for; another key's window is left.
func TestKeepSignsTheWindowsOfItsKeyAgainBeforeTheyExpire(t *testing.T) {
	b := meshtest.StartBus(t)
	spec, err := wire.ParseWindowSpec("mon-fri 02:00-04:00 Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	const period = time.Minute
	at := time.Now().Add(-50 * time.Second)
	ours, err := wire.NewWindow("window.node.web-01", []string{"web-01", "web-02"}, spec, 0, at, period, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := wire.NewWindow(wire.FleetWindowKey, nil, spec, 0, at, period, meshtest.StrangerKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	b.Put(b.Names.Targets(), "window.node.web-01", ours.Marshal())
	theirsRev := b.Put(b.Names.Targets(), wire.FleetWindowKey, theirs.Marshal())
	put(t, b, probe, "v1.0.0", meshtest.ReleaseKey, time.Second)
	keepSigned(t, b, Signer{Key: meshtest.ReleaseKey.Private, TTL: 7 * 24 * time.Hour})
	kv := b.KV(b.Names.Targets())
	var got wire.Window
	meshtest.Eventually(t, "the window signed again", func() bool {
		e, err := kv.Get(context.Background(), "window.node.web-01")
		if err != nil {
			return false
		}
		got, err = wire.ParseWindow(e.Value())
		return err == nil && got.Seq > ours.Seq
	})
	if got.String() != ours.String() || !slices.Equal(got.Nodes, ours.Nodes) {
		t.Errorf("signed again as %s for %v; want %s for %v", got, got.Nodes, ours, ours.Nodes)
	}
	if left := time.Until(got.ExpiresAt()); left < period-10*time.Second || left > period {
		t.Errorf("valid %s from now; want the minute it was signed for", left)
	}
	if err := got.Verify("window.node.web-01", wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()); err != nil {
		t.Error(err)
	}
	waitResigned(t, b, probe, "v1.0.0", 30*time.Second) // the pass that judged every window is over
	if e, err := kv.Get(context.Background(), wire.FleetWindowKey); err != nil || e.Revision() != theirsRev {
		t.Errorf("another key's window was written (%v)", err)
	}
}

// The period a document was signed for is read from its seq (the milliseconds it was signed
// at) to its expiry; a seq that is no such time gives the fallback.
func TestThePeriodADocumentWasSignedForIsReadFromItsSeq(t *testing.T) {
	exp := time.Date(2026, 12, 9, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		seq  uint64
		want time.Duration
	}{
		{"signed a week before", uint64(exp.Add(-7 * 24 * time.Hour).UnixMilli()), 7 * 24 * time.Hour},
		{"milliseconds rounded to the second", uint64(exp.Add(-time.Hour - 300*time.Millisecond).UnixMilli()), time.Hour},
		{"a seq after the expiry", uint64(exp.Add(time.Hour).UnixMilli()), 42 * time.Hour},
		{"a small seq (prev + 1)", 7, 42 * time.Hour},
	} {
		if got := period(tc.seq, exp, 42*time.Hour); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
