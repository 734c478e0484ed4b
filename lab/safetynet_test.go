package lab

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A host that writes a 10 MB line and 100 MB in all used to be killed by its own launcher: the
// relay stopped at 1 MiB and closed the pipe, and the next write died of SIGPIPE. Whatever the
// host writes is drained; lines are cut with a marker; the version confirms.
func TestHostOutputOfAnyLengthIsDrainedAndTheVersionConfirms(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 120*time.Second)
	n, _ := confirmedNode(t, ctx, PkgHost)
	place(t, n, "v1.1.0", PkgLoud)
	rep, err := n.WaitStatus(ctx, "v1.1.0 confirmed", runningConfirmed("v1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(rep, "v1.1.0"); v.FailuresTotal != 0 || v.Bad {
		t.Errorf("v1.1.0 after writing 100 MB: %+v, want no failure", v)
	}
	if got := startsOf(t, n.Root, "v1.1.0"); len(got) != 1 || got[0] != "" {
		t.Errorf("starts of v1.1.0: %q, want one, still running", got)
	}
	log := n.Log()
	if !strings.Contains(log, "[line cut: ") || !strings.Contains(log, "wrote 100 MB; running as the real host now") {
		t.Errorf("the launcher's log lacks the cut marker or the host's line after the flood")
	}
	if len(log) > 4<<20 {
		t.Errorf("the launcher relayed %d bytes for 100 MB in two lines: lines are not cut", len(log))
	}
}

// A host frozen with SIGSTOP used to leave the unit active and status "healthy" for good: the
// watchdog was relayed whatever the host did. A host silent on its liveness pipe for the
// liveness limit is killed as hung and, confirmed, restarted; status says degraded meanwhile.
func TestFrozenHostIsKilledAsHungAndRestarted(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, _ := confirmedNode(t, ctx, PkgHost, "--liveness-limit", "1500ms", "--backoff-min", "2s")
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	frozen := rep.Running.PID
	if err := syscall.Kill(frozen, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// From the kill on (and for the failure interval after), status says the node is degraded
	// and why.
	if _, err = n.WaitStatus(ctx, "degraded, naming the hang", func(r launcher.Report) bool {
		return r.State == launcher.StateDegraded && strings.Contains(r.DegradedReason, "hung")
	}); err != nil {
		t.Fatal(err)
	}
	if _, code, _ := n.Status(ctx); code != launcher.ExitDegraded {
		t.Errorf("status exit %d while degraded, want %d", code, launcher.ExitDegraded)
	}
	rep, err = n.WaitStatus(ctx, "v1.0.0 running again", func(r launcher.Report) bool {
		return Running(r) == "v1.0.0" && r.Running.PID != frozen
	})
	if err != nil {
		t.Fatal(err)
	}
	got := startsOf(t, n.Root, "v1.0.0")
	if len(got) != 2 || got[0] != string(rollback.OutcomeHung) {
		t.Errorf("starts of v1.0.0: %q, want the frozen one ended hung, then a new one", got)
	}
	if v, _ := Version(rep, "v1.0.0"); v.Bad || !v.Confirmed {
		t.Errorf("v1.0.0 after a hang: %+v; a confirmed version is restarted, never marked bad", v)
	}
}

// When the machine breaks, a good release staged on it fails too and is rolled back; then the
// version rolled back to fails as well. The machine was the problem, so the release's bad mark
// is withdrawn: once the machine is fixed and the launcher restarted, the release runs.
func TestReleaseMarkedBadByABrokenMachineIsTriedAgainOnceItIsFixed(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 90*time.Second)
	n, _ := confirmedNode(t, ctx, PkgFlaky)
	broken := filepath.Join(n.Root, "lab-fail")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	place(t, n, "v1.1.0", PkgFlaky)
	code, err := n.Wait(ctx)
	if err != nil || code != launcher.ExitFailed {
		t.Fatalf("launcher exit %d, %v; want %d", code, err, launcher.ExitFailed)
	}
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(rep, "v1.1.0"); v.Bad {
		t.Errorf("v1.1.0 failed only because the machine broke, but stays marked bad: %+v", v)
	}
	if !strings.Contains(rep.FailedReason, "v1.1.0 is no longer marked bad") {
		t.Errorf("failed reason %q does not say the bad mark was withdrawn", rep.FailedReason)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	start(t, n)
	if _, err := n.WaitStatus(ctx, "v1.1.0 confirmed on the fixed machine", runningConfirmed("v1.1.0")); err != nil {
		t.Fatal(err)
	}
}
