package lab

import (
	"strings"
	"testing"
	"time"
)

// Issue 18, item 4, with real processes: `rollout start --follow` while its canary soaks says
// the soak's time left (it printed "0/1 soaked" every 2s); and once its controller is killed,
// `rollout status` says the rollout is paused — its lease lapsed — not running.
func TestRolloutFollowSaysTheSoaksTimeLeftAndStatusSaysPausedOnceTheControllerIsKilled(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 2})
	s.ship("v1.1.0", PkgHost)
	c := s.rollout("start", "v1.1.0", "--canary", "1", "--steps", "100%", "--soak", "60s", "--follow",
		"--window", "20s", "--alive", "1m", "--silent-after", "5s", "--lease", "6s")
	line, err := c.WaitLine(s.ctx, "of the soak left")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, "batch 1/2 (canary): 1/1 confirmed, 0/1 soaked; ") || !strings.Contains(line, "; about ") {
		t.Errorf("the progress line while soaking is %q; want the batch, its counts and about how long is left", line)
	}
	status := func() string {
		out, err := s.f.Release.Run(s.ctx, "rollout", "status", "--nats", s.f.Bus.URL())
		if err != nil {
			t.Fatalf("rollout status: %v\n%s", err, out)
		}
		return out
	}
	if out := status(); !strings.Contains(out, "status      running, batch 1/2 (canary)") {
		t.Errorf("with its controller alive, status does not say running:\n%s", out)
	}
	if err := c.Kill(s.ctx); err != nil {
		t.Fatal(err)
	}
	// The controller is gone once its lease (6s) lapses: status says so, then.
	var out string
	for !strings.Contains(out, "status      paused, batch 1/2 (canary)") {
		if s.ctx.Err() != nil {
			t.Fatalf("status never said the rollout is paused; last:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
		out = status()
	}
	if !strings.Contains(out, "lease lapsed): `mesh-release rollout resume` continues it") {
		t.Errorf("a paused rollout's status does not say how to continue it:\n%s", out)
	}
	t.Logf("follow printed:\n%s\nstatus once the controller was killed:\n%s", c.Output(), out)
}
