package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A node upgrades by a delta of the real host: v1.0.1 is built with `mesh-release build
// --delta-from` the build directory of v1.0.0 (the binary the node runs), published with the
// key, and targeted; the node fetches the delta, not the archive, rebuilds the binary, stages
// it, stands aside and confirms it, its heartbeats saying the delta and the bytes moved — at
// most 10% of the archive.
func TestHostUpgradesByADeltaOfItsOwnBinary(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 120*time.Second)
	_, rel, n, hbs := deliveringNode(t, ctx, "v1.0.0")

	base, err := rel.Build(ctx, "v1.0.0", build(t, PkgHost, "v1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := rel.Publish(ctx, base); err != nil {
		t.Fatal(err)
	}
	next := build(t, PkgHost, "v1.0.1")
	dir := filepath.Join(rel.Out, "v1.0.1")
	out, err := rel.Run(ctx, "build", "--version", "v1.0.1", "--binary", next, "--key", rel.KeyPath(), "-o", dir,
		"--no-launcher", "--delta-from", base)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "delta from v1.0.0: ") {
		t.Errorf("build does not say it wrote the delta:\n%s", out)
	}
	// publish with the key adds deltas against the 3 newest published versions; v1.0.0, the
	// one there is, is listed already.
	if _, err := rel.Run(ctx, "publish", dir, "--nats", rel.NATS, "--key", rel.KeyPath()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nativeBuild(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Deltas) != 1 || m.Deltas[0].BaseVersion != "v1.0.0" || !strings.Contains(m.Deltas[0].Object, "delta") {
		t.Fatalf("manifest schema %d, deltas %+v", m.Schema, m.Deltas)
	}
	if _, err := os.Stat(filepath.Join(dir, m.Deltas[0].Object)); err != nil {
		t.Fatalf("the delta is not beside the archive: %v", err)
	}
	if err := rel.Target(ctx, "v1.0.1", "lab"); err != nil {
		t.Fatal(err)
	}
	var fetch *wire.Fetch
	meshtest.WaitHeartbeat(t, hbs, "standing aside for the version rebuilt from the delta", func(hb wire.Heartbeat) bool {
		if hb.Fetch != nil && hb.Fetch.Version == "v1.0.1" {
			fetch = hb.Fetch
		}
		return hb.State == wire.StateStandingAside && hb.StandingAsideFor == "v1.0.1"
	})
	d := m.Deltas[0]
	// The last fetch heard is of the delta, all of it: verifying (rebuilding) or staged.
	if fetch == nil || (fetch.State != "staged" && fetch.State != "verifying") || fetch.Delta != "v1.0.0" || fetch.Moved != d.Size || fetch.Total != d.Size {
		t.Errorf("the heartbeats' fetch %+v; want staged from the delta of v1.0.0, %d bytes moved", fetch, d.Size)
	}
	if d.Size*10 > m.Size {
		t.Errorf("the delta moved %d bytes, over 10%% of the %d-byte archive", d.Size, m.Size)
	}
	meshtest.WaitHeartbeat(t, hbs, "v1.0.1 confirmed", func(hb wire.Heartbeat) bool { return hb.Running == "v1.0.1" && hb.KnownGood == "v1.0.1" })
	got, err := os.ReadFile(rollback.BinaryPath(n.Root, "v1.0.1"))
	want, _ := os.ReadFile(next)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("versions/v1.0.1/mesh-host is not the built binary (%v)", err)
	}
	if !strings.Contains(n.Log(), "delta_from=v1.0.0") {
		t.Errorf("the host's log does not say it staged from the delta:\n%s", n.Log())
	}
	t.Logf("v1.0.0 → v1.0.1: delta %d bytes, archive %d bytes (%.1f%%)", d.Size, m.Size, 100*float64(d.Size)/float64(m.Size))
}

// A rollout of a release listing deltas adds up the bytes its nodes moved: each node of a
// fleet on v1.0.0 fetches the delta of v1.0.1 (a few KB), and the rollout's completed event,
// its state and `rollout status` say what the fleet moved — more than nothing, less than one
// archive.
func TestARolloutOfADeltaReleaseSaysTheBytesTheFleetMoved(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 150*time.Second, FleetOptions{Nodes: 2})
	s.f.Release.Launcher = "" // releases without a launcher: the nodes have none recorded, so one would come whole
	base, err := s.f.BuildRelease(s.ctx, "v1.0.0", PkgHost)
	if err != nil {
		t.Fatal(err)
	}
	next, err := s.f.Opts.Builder.Build(s.ctx, PkgHost, "v1.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.f.Release.Out, "v1.0.1")
	if _, err := s.f.Release.Run(s.ctx, "build", "--version", "v1.0.1", "--binary", next, "--key", s.f.Release.KeyPath(),
		"-o", dir, "--no-launcher", "--delta-from", base); err != nil {
		t.Fatal(err)
	}
	if err := s.f.Release.Publish(s.ctx, dir); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nativeBuild(raw)
	if err != nil || len(m.Deltas) != 1 {
		t.Fatalf("manifest: %+v, %v", m.Deltas, err)
	}
	c := s.rollout("start", "v1.0.1", "--canary", "1", "--steps", "100%", "--soak", "1s", "--json",
		"--window", "60s", "--alive", "1m", "--silent-after", "30s")
	done := s.event(c, rollout.EventCompleted, 0)
	st := s.waitState("completed", func(st rollout.State) bool { return st.Status == rollout.StatusCompleted })
	if done.BytesMoved <= 0 || done.BytesMoved > 2*m.Deltas[0].Size || st.BytesMoved != done.BytesMoved {
		t.Errorf("the fleet moved %d bytes (state %d); want more than 0 and at most 2 deltas of %d bytes (the archive is %d)",
			done.BytesMoved, st.BytesMoved, m.Deltas[0].Size, m.Size)
	}
	if !strings.Contains(done.Message, "; the nodes moved ") {
		t.Errorf("the completed line does not say what the nodes moved: %q", done.Message)
	}
	out, err := s.f.Release.Run(s.ctx, "rollout", "status", "--nats", s.f.Bus.URL())
	if err != nil || !strings.Contains(out, "  moved ") {
		t.Errorf("rollout status does not say what the fleet moved (%v):\n%s", err, out)
	}
	t.Logf("the fleet moved %d bytes for 2 nodes; one archive is %d", done.BytesMoved, m.Size)
}

// nativeBuild is this machine's platform's build in a manifest.json of any schema.
func nativeBuild(raw []byte) (wire.Build, error) {
	m, err := wire.ParseManifest(raw)
	if err != nil {
		return wire.Build{}, err
	}
	return m.For(wire.NodePlatform("linux", runtime.GOARCH, ""))
}
