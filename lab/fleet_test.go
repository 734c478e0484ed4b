package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// startFleet runs a fleet of n nodes for the test, stopped when it ends (with every node's log
// when it failed).
func startFleet(t *testing.T, ctx context.Context, o FleetOptions) *Fleet {
	t.Helper()
	o.Dir, o.Builder = t.TempDir(), bins
	f, err := StartFleet(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range f.Nodes {
				t.Logf("launcher log of %s:\n%s", n.Name, n.Log())
			}
		}
		f.Close()
	})
	return f
}

// The harness the rollout scenarios stand on sees what really happens: every heartbeat of
// every node, and each read of an archive from the object store — a node targeted at a release
// reads it once, a node not targeted never does — and the fleet carries on when its NATS server
// restarts on the same address with its data.
func TestFleetHarnessSeesHeartbeatsAndArchiveReads(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 2*time.Minute)
	f := startFleet(t, ctx, FleetOptions{Nodes: 2})

	if err := f.Ship(ctx, "v1.1.0", PkgHost); err != nil {
		t.Fatal(err)
	}
	if err := f.Release.Target(ctx, "v1.1.0", "node-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Beats.Wait(ctx, "node-1 confirmed on v1.1.0", func(b Beat) bool {
		return b.Node == "node-1" && RunningConfirmed("v1.1.0")(b)
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Reads.Count(ctx, "v1.1.0"); err != nil || n != 1 {
		t.Errorf("the v1.1.0 archive was read %d times (%v), want once: by node-1 only", n, err)
	}
	if c := f.Reads.Created(); c != 0 {
		t.Errorf("the server announced %d consumers on the archives' stream, want none: a node reads by direct gets", c)
	}
	if f.Node("node-2").Has("v1.1.0") || f.Node("node-2").Staged("v1.1.0") != 0 {
		t.Errorf("node-2 fetched v1.1.0 without being targeted")
	}
	if f.Node("node-1").Staged("v1.1.0") != 1 {
		t.Errorf("node-1's log does not say it staged v1.1.0 once:\n%s", f.Node("node-1").Log())
	}
	// node-1's history: v1.0.0, standing aside for v1.1.0, then v1.1.0 — in that order.
	var seen []string
	for _, b := range f.Beats.Of("node-1") {
		step := b.State + " " + b.Running
		if len(seen) == 0 || seen[len(seen)-1] != step {
			seen = append(seen, step)
		}
	}
	if got := strings.Join(seen, ", "); !strings.Contains(got, "running v1.0.0, standing-aside v1.0.0") || !strings.HasSuffix(got, "running v1.1.0") {
		t.Errorf("node-1's heartbeats went %s", got)
	}

	// The server restarts on the same address and store: both hosts heartbeat again, and the
	// observers hear them on their own reconnected connection.
	from := f.Beats.Len()
	if err := f.Bus.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	for _, node := range f.Names() {
		if _, err := f.Beats.WaitAfter(ctx, from, node+" heard after the restart", func(b Beat) bool { return b.Node == node }); err != nil {
			t.Fatal(err)
		}
	}
	if st, ok, err := f.RolloutState(ctx); err != nil || ok {
		t.Errorf("RolloutState with no rollout: %+v, %v, %v", st, ok, err)
	}

	// A background mesh-release, its lines read as they come, stopped with SIGTERM.
	c := NewController(f.Release.Bin, "fleet", "--watch", "--nats", f.Bus.URL())
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLine(ctx, "node-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if last, ok := f.Beats.Last("node-2"); !ok || last.Running != "v1.0.0" || last.State != wire.StateRunning {
		t.Errorf("node-2's last word: %+v", last)
	}
}
