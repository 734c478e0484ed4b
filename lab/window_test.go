package lab

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// Issue 21, section 3: a real node keeps its maintenance window by its own clock. With a window
// that opens at the next whole minute at least 25s away (so the test waits at most ~85s), a
// rollout of v1.1.0 with a --window shorter than the wait: the node fetches and stages v1.1.0 at
// once, says "staged v1.1.0, waiting for the window (opens …)" in its heartbeat, in
// `mesh-launcher status` and in `mesh-release fleet`, runs v1.0.0 until the window opens, then
// stands aside and confirms v1.1.0; the rollout neither calls it late nor silent, and its
// --follow names the node waiting and when its window opens.
func TestARealNodeStagedWaitsForItsWindowThenStandsAside(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a window opening at the next whole minute (up to ~85s)")
	}
	t.Parallel()
	s := newScenario(t, 4*time.Minute, FleetOptions{Nodes: 1})
	s.ship("v1.1.0", PkgHost)
	loc, err := time.LoadLocation("Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	opens := time.Now().Add(25 * time.Second).Truncate(time.Minute).Add(time.Minute).In(loc)
	spec := strings.ToLower(opens.Weekday().String()[:3]) + " " + opens.Format("15:04") + "-" + opens.Add(10*time.Minute).Format("15:04") + " Europe/Brussels"
	out, err := s.f.Release.Run(s.ctx, "window", "set", "node-1", spec, "--key", s.f.Release.KeyPath(), "--nats", s.f.Bus.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mesh-release window set printed: %s", out)
	if _, err := s.f.Beats.Wait(s.ctx, "node-1 keeping its window", func(b Beat) bool {
		return b.Node == "node-1" && b.Window != nil && b.Window.Key == wire.NodeWindowKey("node-1")
	}); err != nil {
		t.Fatal(err)
	}

	c := s.rollout(append([]string{"start", "v1.1.0", "--follow", "--json"}, rolloutFlags(15*time.Second, 2*time.Second)...)...)
	want := "staged v1.1.0, waiting for the window (opens " + opens.Format(wire.WindowTimeLayout) + ")"
	waiting, err := s.f.Beats.Wait(s.ctx, "node-1 staged and waiting for its window", func(b Beat) bool {
		return b.Node == "node-1" && b.Window != nil && b.Window.WaitingFor == "v1.1.0"
	})
	if err != nil {
		t.Fatal(err)
	}
	if waiting.Window.Waiting != want || waiting.Running != "v1.0.0" {
		t.Errorf("heartbeat: running %s, window %+v; want v1.0.0 and %q", waiting.Running, waiting.Window, want)
	}
	if !time.Now().Before(opens) {
		t.Fatalf("staging took until after the window opened (%s); nothing here shows the node waited", opens)
	}
	n := s.f.Node("node-1")
	if st := n.StatusText(s.ctx); !strings.Contains(st, want) {
		t.Errorf("mesh-launcher status does not say %q:\n%s", want, st)
	}
	if ww, err := rollback.ReadWindowWait(n.Root); err != nil || ww == nil || ww.Version != "v1.1.0" {
		t.Errorf("window-wait.json: %+v, %v", ww, err)
	}
	if table, err := s.f.FleetTable(s.ctx); err != nil || !strings.Contains(table, want) {
		t.Errorf("mesh-release fleet does not say %q (%v):\n%s", want, err, table)
	}
	if _, err := c.WaitEvent(s.ctx, "progress naming node-1 waiting for its window", func(e rollout.Event) bool {
		return len(e.WindowWaiting) == 1 && e.WindowWaiting[0].Node == "node-1" && e.WindowWaiting[0].Opens.Equal(opens) &&
			strings.Contains(e.Message, "node-1 (opens "+opens.Format(wire.WindowTimeLayout)+")")
	}); err != nil {
		t.Fatal(err)
	}

	// The rollout completes: the node was neither late nor silent, though the wait was longer
	// than --window.
	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d, want 0 (completed)", code)
	}
	s.allOn([]string{"node-1"}, "v1.1.0")
	for _, b := range s.f.Beats.Of("node-1") {
		if b.SentAt.Before(opens) && b.Running != "v1.0.0" {
			t.Errorf("node-1 ran %s before its window opened (heartbeat sent %s, window opens %s)", b.Running, b.SentAt.Format(time.TimeOnly), opens.Format(time.TimeOnly))
		}
	}
	if ww, err := rollback.ReadWindowWait(n.Root); err != nil || ww != nil {
		t.Errorf("window-wait.json left after standing aside: %+v, %v", ww, err)
	}
}
