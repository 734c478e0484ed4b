package lab

import (
	"strings"
	"syscall"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// Issue 27, §1.2: a host killed while it waits for its maintenance window is restarted on the
// version it was running, not on the one it waits for, and `mesh-launcher status` says the
// restart was held for the window; an urgent target then ends the wait at once.
func TestACrashRestartWhileWaitingForTheWindowRunsTheVersionThatWasRunning(t *testing.T) {
	t.Parallel()
	// Built before the scenario's clock starts: a loaded machine's build time is not the test's.
	for _, b := range []struct{ pkg, version string }{{PkgLauncher, ToolVersion}, {PkgRelease, ToolVersion}, {PkgHost, "v1.0.0"}, {PkgHost, "v1.1.0"}} {
		build(t, b.pkg, b.version)
	}
	s := newScenario(t, 4*time.Minute, FleetOptions{Nodes: 1})
	s.ship("v1.1.0", PkgHost)
	loc, err := time.LoadLocation("Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	// A window far from now: nothing in this test waits for it.
	opens := time.Now().Add(6 * time.Hour).Truncate(time.Minute).In(loc)
	spec := strings.ToLower(opens.Weekday().String()[:3]) + " " + opens.Format("15:04") + "-" + opens.Add(10*time.Minute).Format("15:04") + " Europe/Brussels"
	rel := func(args ...string) {
		t.Helper()
		out, err := s.f.Release.Run(s.ctx, append(args, "--key", s.f.Release.KeyPath(), "--nats", s.f.Bus.URL())...)
		if err != nil {
			t.Fatalf("mesh-release %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rel("window", "set", "node-1", spec)
	if _, err := s.f.Beats.Wait(s.ctx, "node-1 keeping its window", func(b Beat) bool {
		return b.Node == "node-1" && b.Window != nil && b.Window.Key == wire.NodeWindowKey("node-1")
	}); err != nil {
		t.Fatal(err)
	}
	rel("target", "node-1", "v1.1.0")
	if _, err := s.f.Beats.Wait(s.ctx, "node-1 staged and waiting for its window", func(b Beat) bool {
		return b.Node == "node-1" && b.Window != nil && b.Window.WaitingFor == "v1.1.0" && b.Running == "v1.0.0"
	}); err != nil {
		t.Fatal(err)
	}

	n := s.f.Node("node-1")
	rep, _, err := n.Status(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Running == nil || rep.Running.Version != "v1.0.0" {
		t.Fatalf("before the kill: running %+v, want v1.0.0", rep.Running)
	}
	killed := rep.Running.PID
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rep, err = n.WaitStatus(s.ctx, "the host started again after the kill", func(r launcher.Report) bool {
		return r.Running != nil && r.Running.PID != killed && r.Running.PID != 0
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Running.Version != "v1.0.0" {
		t.Errorf("after the kill the launcher started %s, want v1.0.0 (v1.1.0 waits for the window opening %s)", rep.Running.Version, opens.Format(wire.WindowTimeLayout))
	}
	if rep.WindowWait == nil || rep.WindowWait.Version != "v1.1.0" || rep.WindowWait.Running != "v1.0.0" {
		t.Errorf("status after the kill: window_wait %+v, want v1.1.0 waited for by v1.0.0", rep.WindowWait)
	}
	want := "staged v1.1.0, waiting for the window (opens " + opens.Format(wire.WindowTimeLayout) + ")"
	if st := n.StatusText(s.ctx); !strings.Contains(st, want) {
		t.Errorf("mesh-launcher status does not say %q:\n%s", want, st)
	}
	if got := startsOf(t, n.Root, "v1.1.0"); len(got) != 0 {
		t.Errorf("v1.1.0 was started outside its window: %v", got)
	}

	// An urgent target does not wait: the host held for the window stands aside for it.
	rel("target", "--urgent", "node-1", "v1.1.0")
	if _, err := n.WaitStatus(s.ctx, "v1.1.0 confirmed after the urgent target", runningConfirmed("v1.1.0")); err != nil {
		t.Fatal(err)
	}
	if ww, err := rollback.ReadWindowWait(n.Root); err != nil || ww != nil {
		t.Errorf("window-wait.json after standing aside: %+v, %v", ww, err)
	}
}
