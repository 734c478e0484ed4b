package host

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

// signed is a target for version under key, numbered seq, expiring at expires, signed by priv.
func signed(t testing.TB, key, version string, seq uint64, expires time.Time, priv ed25519.PrivateKey) wire.Target {
	t.Helper()
	tg := wire.Target{Version: version, Seq: seq, Expires: expires.UTC().Truncate(time.Second).Format(time.RFC3339)}
	if err := tg.Sign(key, priv); err != nil {
		t.Fatal(err)
	}
	return tg
}

// putTarget puts a target (any bytes) under key and returns its revision.
func putTarget(b *meshtest.Bus, key string, value []byte) uint64 {
	return b.Put(b.Names.Targets(), key, value)
}

// withdrawalsBucket makes the withdrawal list's bucket if bus.Init did not.
func withdrawalsBucket(t testing.TB, b *meshtest.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.Conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.Names.Withdrawals(), History: 5, MaxValueSize: wire.MaxWithdrawalsBytes})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		t.Fatal(err)
	}
}

// withdraw adds version to the list under the withdrawals key (read from the bus), signed with
// the test release key, and returns the list and its revision.
func withdraw(t testing.TB, b *meshtest.Bus, version, reason string) (wire.Withdrawals, uint64) {
	t.Helper()
	withdrawalsBucket(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var prev wire.Withdrawals
	if e, err := b.KV(b.Names.Withdrawals()).Get(ctx, wire.WithdrawalsKey); err == nil {
		if prev, err = wire.ParseWithdrawals(e.Value()); err != nil {
			t.Fatal(err)
		}
	}
	w, err := prev.Withdraw(version, reason, time.Now(), meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	return w, b.Put(b.Names.Withdrawals(), wire.WithdrawalsKey, w.Marshal())
}

func refusedAt(what string, rev uint64) func(wire.Heartbeat) bool {
	return func(hb wire.Heartbeat) bool {
		return hb.Refused != nil && hb.Refused.What == what && hb.Refused.Revision == rev
	}
}

// Forged, moved, unsigned and replayed targets are refused and reported, each naming the key
// and why, and the target accepted before stays in force.
func TestForgedAndReplayedTargetsAreRefusedAndTheAcceptedOneStays(t *testing.T) {
	b, hbs, th := linkedHost(t)
	key := wire.NodeTargetKey("n1")
	later := time.Now().Add(time.Hour)
	good := signed(t, key, "v1.1.0", 100, later, meshtest.ReleaseKey.Private)
	putTarget(b, key, good.Marshal())
	meshtest.WaitHeartbeat(t, hbs, "the signed target in force", func(hb wire.Heartbeat) bool { return hb.Target == "v1.1.0" })

	altered := signed(t, key, "v1.2.0", 201, later, meshtest.ReleaseKey.Private)
	altered.Version = "v9.0.0"
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"unsigned", wire.Target{Version: "v9.0.0", Seq: 200, Expires: later.UTC().Format(time.RFC3339)}.Marshal(), "target is not signed"},
		{"signed by a key this node does not trust", signed(t, key, "v9.0.0", 200, later, meshtest.StrangerKey.Private).Marshal(), "does not trust"},
		{"altered after signing", altered.Marshal(), "signature does not verify"},
		{"moved from another node's key", signed(t, wire.NodeTargetKey("n2"), "v9.0.0", 202, later, meshtest.ReleaseKey.Private).Marshal(), "signature does not verify"},
		{"moved from the fleet key", signed(t, wire.FleetTargetKey, "v9.0.0", 203, later, meshtest.ReleaseKey.Private).Marshal(), "signature does not verify"},
		{"an older target put back", signed(t, key, "v1.0.5", 50, later, meshtest.ReleaseKey.Private).Marshal(), "replay: seq 50 ≤ 100 already accepted"},
		{"the same seq with other content", signed(t, key, "v1.3.0", 100, later, meshtest.ReleaseKey.Private).Marshal(), "seq 100 was accepted"},
		{"not a target at all", []byte(`{"version": "v9.0.0"}`), "seq is 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := putTarget(b, key, tc.value)
			hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", refusedAt("target", rev))
			if !strings.Contains(hb.Refused.Error, tc.want) || !strings.Contains(hb.Refused.Error, key) {
				t.Errorf("refusal %q does not name %s and say %q", hb.Refused.Error, key, tc.want)
			}
			if !strings.Contains(hb.Refused.Error, "the target accepted before stays in force (node.n1 v1.1.0, seq 100)") {
				t.Errorf("refusal %q does not say the accepted target stays", hb.Refused.Error)
			}
			if hb.Target != "v1.1.0" {
				t.Errorf("target in force %q after a refusal, want v1.1.0 kept", hb.Target)
			}
		})
	}
	// The accepted target arriving again (as it does after every reconnect) is no refusal; a
	// newer one is accepted.
	again := putTarget(b, key, good.Marshal())
	next := signed(t, key, "v1.2.0", 101, later, meshtest.ReleaseKey.Private)
	putTarget(b, key, next.Marshal())
	hb := meshtest.WaitHeartbeat(t, hbs, "the next target", func(hb wire.Heartbeat) bool { return hb.Target == "v1.2.0" })
	if hb.Refused != nil && hb.Refused.Revision == again {
		t.Errorf("the accepted target arriving again was refused: %+v", hb.Refused)
	}
	if strings.Contains(th.logs.String(), "v9.0.0\" key=") {
		t.Errorf("a refused target was acted on:\n%s", th.logs.String())
	}
}

// The highest seq accepted per key survives a restart: a target from before it is a replay.
func TestATargetReplayedAfterARestartIsRefused(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	root := newRoot(t, "v1.0.0")
	key := wire.FleetTargetKey
	later := time.Now().Add(time.Hour)
	old := signed(t, key, "v1.1.0", 10, later, meshtest.ReleaseKey.Private)
	putTarget(b, key, old.Marshal())
	putTarget(b, key, signed(t, key, "v1.2.0", 11, later, meshtest.ReleaseKey.Private).Marshal())
	th := startHost(t, root, "n1", b.URL())
	meshtest.WaitHeartbeat(t, hbs, "seq 11 in force", func(hb wire.Heartbeat) bool { return hb.Target == "v1.2.0" })
	th.stop()
	rev := putTarget(b, key, old.Marshal()) // while the node is away
	startHost(t, root, "n1", b.URL())
	hb := meshtest.WaitHeartbeat(t, hbs, "the replay refused", refusedAt("target", rev))
	if !strings.Contains(hb.Refused.Error, "replay: seq 10 ≤ 11") || hb.Target != "" {
		t.Errorf("after a restart: target %q, refusal %+v; want the replay refused and nothing in force (the accepted target is no longer on the bus)", hb.Target, hb.Refused)
	}
}

// An expired target is reported in every heartbeat and not acted on — nothing is fetched for it
// — and a target signed again clears it; a target that expires while in force stops being
// acted on then.
func TestAnExpiredTargetIsReportedNotActedOnAndASignedAgainOneClearsIt(t *testing.T) {
	b, hbs, th := linkedHost(t, func(c *config.Config) {
		c.TrustedKeys = []string{base64.StdEncoding.EncodeToString(meshtest.ReleaseKey.Public)} // delivery on
		c.HeartbeatInterval = config.Duration(200 * time.Millisecond)
	})
	key := wire.NodeTargetKey("n1")
	expired := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	putTarget(b, key, signed(t, key, "v1.5.0", 1, expired, meshtest.ReleaseKey.Private).Marshal())
	hb := meshtest.WaitHeartbeat(t, hbs, "the expired target", func(hb wire.Heartbeat) bool { return hb.TargetExpiredSince != nil })
	if !hb.TargetExpiredSince.Equal(expired) || hb.Target != "v1.5.0" {
		t.Errorf("heartbeat target %q expired since %v, want v1.5.0 since %s", hb.Target, hb.TargetExpiredSince, expired)
	}
	// Every heartbeat says so, and none shows a fetch: v1.5.0 is not published, so a fetch would
	// report its failure.
	for range 3 {
		hb := meshtest.WaitHeartbeat(t, hbs, "another heartbeat", func(wire.Heartbeat) bool { return true })
		if hb.TargetExpiredSince == nil || hb.Fetch != nil {
			t.Fatalf("heartbeat while the target is expired: expired since %v, fetch %+v", hb.TargetExpiredSince, hb.Fetch)
		}
	}
	if strings.Contains(th.logs.String(), "host version not delivered") {
		t.Errorf("the expired target was fetched:\n%s", th.logs.String())
	}

	// Signed again (a higher seq, a later expiry): acted on, and the heartbeat no longer says it
	// expired. It expires 2 s from now, while in force.
	soon := time.Now().Add(3 * time.Second)
	putTarget(b, key, signed(t, key, "v1.5.0", 2, soon, meshtest.ReleaseKey.Private).Marshal())
	hb = meshtest.WaitHeartbeat(t, hbs, "the target signed again, acted on", func(hb wire.Heartbeat) bool {
		return hb.TargetExpiredSince == nil && hb.Fetch != nil && hb.Fetch.Version == "v1.5.0"
	})
	hb = meshtest.WaitHeartbeat(t, hbs, "the target expired while in force", func(hb wire.Heartbeat) bool { return hb.TargetExpiredSince != nil })
	if want := soon.UTC().Truncate(time.Second); !hb.TargetExpiredSince.Equal(want) {
		t.Errorf("expired since %v, want %s", hb.TargetExpiredSince, want)
	}
	if !strings.Contains(th.logs.String(), "the target in force has expired") {
		t.Errorf("the host did not say the target expired:\n%s", th.logs.String())
	}
}

// confirmedRoot is a root where the launcher confirmed each of versions in turn (oldest first),
// as after v1.0.0 ran and then v1.1.0 replaced it.
func confirmedRoot(t testing.TB, versions ...string) string {
	t.Helper()
	ctx := context.Background()
	root := newRoot(t, versions[0])
	r, _, err := rollback.OpenForLauncher(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, v := range versions {
		if i > 0 {
			placeFake(t, root, v)
		}
		if ch, err := r.Choose(ctx, root); err != nil || ch.Version != v {
			t.Fatalf("choose %q, %v; want %s", ch.Version, err, v)
		}
		start, err := r.BeginStart(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Confirm(ctx, root, v, start); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// records opens the root's records as the host does, for the test to read.
func records(t testing.TB, root string) *rollback.Records {
	t.Helper()
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A host running a withdrawn version marks it bad (no failure, no rollback) and stands aside
// for what Choose names next; other withdrawn versions on disk are marked bad too.
func TestAWithdrawnRunningVersionStandsAsideForTheOneBefore(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	root := confirmedRoot(t, "v1.0.0", "v1.1.0")
	th := startHostAs(t, root, "n1", b.URL(), "v1.1.0")
	meshtest.WaitHeartbeat(t, hbs, "v1.1.0 confirmed", func(hb wire.Heartbeat) bool { return hb.LastReconcile != nil })
	withdraw(t, b, "v1.1.0", "leaks memory under load")
	select {
	case <-th.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the withdrawn host did not stand aside:\n%s", th.logs.String())
	}
	if th.err != nil || th.res.StoodAsideFor != "v1.0.0" {
		t.Fatalf("Run = %+v, %v; want it to stand aside for v1.0.0", th.res, th.err)
	}
	r := records(t, root)
	ctx := context.Background()
	if bad, reason, _ := r.IsBad(ctx, "v1.1.0"); !bad || reason != "withdrawn: leaks memory under load" {
		t.Errorf("v1.1.0 bad %v %q, want bad as withdrawn", bad, reason)
	}
	if rbs, _ := r.Rollbacks(ctx, 10); len(rbs) != 0 {
		t.Errorf("a withdrawal recorded rollbacks: %+v", rbs)
	}
	if ch, _ := r.Choose(ctx, root); ch.Version != "v1.0.0" {
		t.Errorf("Choose = %q, want v1.0.0", ch.Version)
	}
}

// With nothing else on disk, a host running a withdrawn version keeps running it and says so;
// it is not marked bad, so the launcher is never left with nothing to run.
func TestAWithdrawnVersionWithNothingToStepDownToKeepsRunningAndSaysSo(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	root := confirmedRoot(t, "v1.1.0")
	th := startHostAs(t, root, "n1", b.URL(), "v1.1.0")
	meshtest.WaitHeartbeat(t, hbs, "the first reconcile", func(hb wire.Heartbeat) bool { return hb.LastReconcile != nil })
	_, rev := withdraw(t, b, "v1.1.0", "leaks memory")
	hb := meshtest.WaitHeartbeat(t, hbs, "the note", refusedAt("withdrawals", rev))
	if !strings.Contains(hb.Refused.Error, "no other version is on disk to step down to") || !strings.Contains(hb.Refused.Error, "leaks memory") {
		t.Errorf("note %q", hb.Refused.Error)
	}
	b.Declare("n1", decl("n1", "")) // a reconcile, and the stand-aside check after it
	meshtest.Eventually(t, "a declaration reconcile", func() bool { return th.reconciles().Count("declaration") == 1 })
	select {
	case <-th.done:
		t.Fatalf("the host stopped: %+v %v", th.res, th.err)
	case <-time.After(300 * time.Millisecond):
	}
	if bad, _, _ := records(t, root).IsBad(context.Background(), "v1.1.0"); bad {
		t.Error("the only version was marked bad: the launcher would have nothing to run")
	}
}

// A withdrawn version is never fetched: a target naming it is refused, though its release is
// published (and published again); a forged or replayed withdrawal list is refused and changes
// nothing; the accepted list is applied after a restart before the bus answers.
func TestAWithdrawnTargetIsNeverFetchedAndForgedListsAreRefused(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	root := newRoot(t, "v1.0.0")
	keyStr := base64.StdEncoding.EncodeToString(meshtest.ReleaseKey.Public)
	th := startHost(t, root, "n1", b.URL(), func(c *config.Config) { c.TrustedKeys = []string{keyStr} })
	w1, _ := withdraw(t, b, "v1.2.0", "corrupts the store")
	meshtest.Eventually(t, "the list applied", func() bool { _, ok := th.h.isWithdrawn("v1.2.0"); return ok })

	for i, tc := range []struct {
		name  string
		value func() []byte
		want  string
	}{
		{"unsigned", func() []byte {
			w := wire.Withdrawals{Seq: w1.Seq + 1, Withdrawn: nil}
			return w.Marshal()
		}, "not signed"},
		{"signed by a stranger", func() []byte {
			w := wire.Withdrawals{Seq: w1.Seq + 1}
			if err := w.Sign(meshtest.StrangerKey.Private); err != nil {
				t.Fatal(err)
			}
			return w.Marshal()
		}, "does not trust"},
		{"the list from before, replayed", func() []byte {
			w := wire.Withdrawals{Seq: w1.Seq - 1}
			if err := w.Sign(meshtest.ReleaseKey.Private); err != nil {
				t.Fatal(err)
			}
			return w.Marshal()
		}, fmt.Sprintf("replay: seq %d ≤ %d", w1.Seq-1, w1.Seq)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := b.Put(b.Names.Withdrawals(), wire.WithdrawalsKey, tc.value())
			hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", refusedAt("withdrawals", rev))
			if !strings.Contains(hb.Refused.Error, tc.want) {
				t.Errorf("refusal %d %q does not say %q", i, hb.Refused.Error, tc.want)
			}
			if _, ok := th.h.isWithdrawn("v1.2.0"); !ok {
				t.Error("a refused list undid the withdrawal")
			}
		})
	}

	// v1.2.0 published, then targeted: refused as withdrawn, never fetched.
	publishFake(t, b, "v1.2.0")
	key := wire.NodeTargetKey("n1")
	rev := putTarget(b, key, signed(t, key, "v1.2.0", 1, time.Now().Add(time.Hour), meshtest.ReleaseKey.Private).Marshal())
	hb := meshtest.WaitHeartbeat(t, hbs, "the withdrawn target refused", refusedAt("target", rev))
	if !strings.Contains(hb.Refused.Error, "v1.2.0 is withdrawn (corrupts the store)") || hb.Fetch != nil {
		t.Errorf("refusal %q, fetch %+v", hb.Refused.Error, hb.Fetch)
	}
	// Restarted with no bus: the list is known from the store.
	th.stop()
	b.Stop()
	th = startHost(t, root, "n1", "")
	meshtest.Eventually(t, "the host running", func() bool { return th.reconciles().Count("start") >= 2 })
	if _, ok := th.h.isWithdrawn("v1.2.0"); !ok {
		t.Error("after a restart without the bus the host forgot the withdrawal")
	}
}

// publishFake publishes version as a release signed by the test release key (its binary is
// not one that runs: these tests never get as far as running it).
func publishFake(t testing.TB, b *meshtest.Bus, version string) {
	t.Helper()
	publishFakeFor(t, b, version, runtime.GOARCH)
}

// publishFakeFor is publishFake for linux (or this OS) on goarch: a schema 1 manifest of one
// platform.
func publishFakeFor(t testing.TB, b *meshtest.Bus, version, goarch string) {
	t.Helper()
	publishFakeSigned(t, b, version, goarch, meshtest.ReleaseKey)
}

// publishFakeSigned is publishFakeFor signed by key.
func publishFakeSigned(t testing.TB, b *meshtest.Bus, version, goarch string, key meshtest.KeyPair) {
	t.Helper()
	bin := []byte("fake mesh-host " + version)
	var a bytes.Buffer
	if err := archive.Pack(&a, bytes.NewReader(bin), int64(len(bin))); err != nil {
		t.Fatal(err)
	}
	m := wire.Manifest{
		Schema: wire.ManifestSchema, Version: version, OS: runtime.GOOS, Arch: goarch,
		Object: wire.ObjectName(version, runtime.GOOS, goarch), Size: int64(a.Len()),
		Digest: digest.FromBytes(a.Bytes()), BinaryDigest: digest.FromBytes(bin),
		Created: time.Now().UTC().Format(time.RFC3339),
	}
	if err := m.Sign(key.Private); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	obs, err := b.Conn.JS.ObjectStore(ctx, b.Names.Archives())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, m.Object, a.Bytes()); err != nil {
		t.Fatal(err)
	}
	b.Put(b.Names.Releases(), version, m.Marshal())
}
