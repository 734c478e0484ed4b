package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func newRelease(t *testing.T, b *meshtest.Bus) *Release {
	t.Helper()
	return &Release{Bin: build(t, PkgRelease, "v0.0.0-lab"), KeyDir: t.TempDir(), Out: t.TempDir(), NATS: b.URL()}
}

// deliveringNode starts a bus, a release side with its key, and node "lab" trusting that key,
// linked to the bus and heartbeating every 500ms, on version built from the real host; it
// returns once a heartbeat shows that version confirmed.
func deliveringNode(t *testing.T, ctx context.Context, version string) (*meshtest.Bus, *Release, *Node, <-chan wire.Heartbeat) {
	t.Helper()
	b := meshtest.StartBus(t)
	rel := newRelease(t, b)
	pub, err := rel.Keygen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hbs := b.Heartbeats("lab")
	n := newNode(t, "MESH_HOST_NATS_URL="+b.URL(), "MESH_HOST_TRUSTED_KEYS="+pub, "MESH_HOST_HEARTBEAT_INTERVAL=500ms")
	place(t, n, version, PkgHost)
	start(t, n)
	meshtest.WaitHeartbeat(t, hbs, version+" confirmed", func(hb wire.Heartbeat) bool { return hb.KnownGood == version })
	return b, rel, n, hbs
}

// The running host delivers its successor: a version built, signed and published with
// mesh-release, then targeted, is fetched, verified, preflighted and staged by the host, which
// stands aside for it; the launcher runs it and it confirms. A later release that passes
// preflight but crashes when run is rolled back, and the host it was rolled back to refuses to
// fetch it again although it is still the target.
func TestHostDeliversItsSuccessorAndNeverRefetchesABadOne(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 120*time.Second)
	_, rel, n, hbs := deliveringNode(t, ctx, "v1.0.0")

	if err := rel.Ship(ctx, "v1.1.0", build(t, PkgHost, "v1.1.0")); err != nil {
		t.Fatal(err)
	}
	if err := rel.Target(ctx, "v1.1.0", "lab"); err != nil {
		t.Fatal(err)
	}
	var fetch *wire.Fetch // the delivery's progress, as heartbeats carried it
	aside := meshtest.WaitHeartbeat(t, hbs, "standing aside for the delivered version", func(hb wire.Heartbeat) bool {
		if hb.Fetch != nil {
			fetch = hb.Fetch
		}
		return hb.State == wire.StateStandingAside
	})
	if aside.StandingAsideFor != "v1.1.0" || aside.Target != "v1.1.0" || len(aside.Staged) != 1 || aside.Staged[0] != "v1.1.0" {
		t.Errorf("standing aside for %q with target %q, staged %v", aside.StandingAsideFor, aside.Target, aside.Staged)
	}
	if fetch == nil || fetch.Version != "v1.1.0" || fetch.Total == 0 || fetch.Bytes != fetch.Total || fetch.Percent != 100 {
		t.Errorf("heartbeats did not carry the fetch's progress: %+v", fetch)
	}
	meshtest.WaitHeartbeat(t, hbs, "v1.1.0 confirmed", func(hb wire.Heartbeat) bool { return hb.Running == "v1.1.0" && hb.KnownGood == "v1.1.0" })
	manifest, err := os.ReadFile(rel.Out + "/v1.1.0/manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nativeBuild(manifest)
	if err != nil {
		t.Fatal(err)
	}
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(rep, "v1.1.0"); v.Digest != string(m.BinaryDigest) {
		t.Errorf("records hold digest %s for v1.1.0, the signed manifest says %s", v.Digest, m.BinaryDigest)
	}

	// v1.2.0 passes preflight and crashes when run: rolled back, marked bad, never fetched again.
	if err := rel.Ship(ctx, "v1.2.0", build(t, PkgCrashRun, "v1.2.0")); err != nil {
		t.Fatal(err)
	}
	if err := rel.Target(ctx, "v1.2.0", "lab"); err != nil {
		t.Fatal(err)
	}
	hb := meshtest.WaitHeartbeat(t, hbs, "the rollback reported and the bad target refused", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && len(hb.Rollbacks) > 0 && hb.Refused != nil && hb.Refused.What == "target"
	})
	if hb.Rollbacks[0].From != "v1.2.0" || !strings.Contains(hb.Rollbacks[0].Output, "lab fixture crashrun") {
		t.Errorf("rollback in the heartbeat: %+v", hb.Rollbacks[0])
	}
	if !strings.Contains(hb.Refused.Error, "bad") {
		t.Errorf("refusal %q does not say the target is marked bad", hb.Refused.Error)
	}
	// Several heartbeat intervals later it has still not been fetched or staged again: no
	// heartbeat in between shows a fetch of it, and it is not on disk.
	meshtest.WaitHeartbeat(t, hbs, "a heartbeat sent 2s after the refusal", func(later wire.Heartbeat) bool {
		if later.Fetch != nil && later.Fetch.Version == "v1.2.0" {
			t.Errorf("the bad target is fetched again: %+v", later.Fetch)
		}
		return later.SentAt.Sub(hb.SentAt) >= 2*time.Second
	})
	if _, err := os.Stat(rollback.VersionDir(n.Root, "v1.2.0")); !os.IsNotExist(err) {
		t.Errorf("the bad version is on disk again: %v", err)
	}
	staged := 0
	for _, line := range strings.Split(n.Log(), "\n") {
		if strings.Contains(line, `msg="host version staged"`) && strings.Contains(line, "component=deliver version=v1.2.0") {
			staged++
		}
	}
	if c := staged; c != 1 {
		t.Errorf("v1.2.0 was staged %d times, want once: a bad target is never fetched again", c)
	}
	if got := startsOf(t, n.Root, "v1.2.0"); len(got) != 3 {
		t.Errorf("v1.2.0 started %d times, want exactly the 3 that judged it", len(got))
	}
}
