package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

var runningConfirmed = runningConfirmedReport

// startNode starts a node's launcher (with args) on v1.0.0 built from pkg.
func startNode(t *testing.T, pkg string, args ...string) *Node {
	t.Helper()
	n := newNode(t)
	place(t, n, "v1.0.0", pkg)
	start(t, n, args...)
	return n
}

// confirmedNode starts a node's launcher (with args) on v1.0.0 built from pkg and waits until
// that version runs and has confirmed; rep is the status that showed it.
func confirmedNode(t *testing.T, ctx context.Context, pkg string, args ...string) (n *Node, rep launcher.Report) {
	t.Helper()
	n = startNode(t, pkg, args...)
	rep, err := n.WaitStatus(ctx, "v1.0.0 confirmed", runningConfirmed("v1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	return n, rep
}

// starts reads the records' starts of a version: how the launcher ran it.
func starts(t testing.TB, root, version string) []rollback.Start {
	t.Helper()
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.Starts(context.Background(), version)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// stoppedFailed waits for the node's launcher to stop in its failed state (exit ExitFailed) and
// returns the status it leaves, and status's exit code.
func stoppedFailed(t *testing.T, ctx context.Context, n *Node) (launcher.Report, int) {
	t.Helper()
	code, err := n.Wait(ctx)
	if err != nil || code != launcher.ExitFailed {
		t.Fatalf("launcher exit %d, %v; want %d", code, err, launcher.ExitFailed)
	}
	rep, scode, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep, scode
}

// startsOf is how each start of a version ended ("" while it runs), oldest first.
func startsOf(t testing.TB, root, version string) []string {
	t.Helper()
	var outs []string
	for _, s := range starts(t, root, version) {
		outs = append(outs, string(s.Outcome))
	}
	return outs
}

// 1. A first version confirms; newer versions staged while it runs make it stand aside without
// the launcher restarting; each confirms; versions older than the predecessor are retired.
func TestNewerVersionTakesOverByStandingAsideAndOldOnesRetire(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, _ := confirmedNode(t, ctx, PkgHost)
	launcherPID := n.PID()
	for _, v := range []string{"v1.1.0", "v1.2.0"} {
		place(t, n, v, PkgHost)
		rep, err := n.WaitStatus(ctx, v+" confirmed", runningConfirmed(v))
		if err != nil {
			t.Fatal(err)
		}
		if rep.LauncherPID != launcherPID {
			t.Fatalf("the launcher restarted (pid %d → %d); standing aside must not need that", launcherPID, rep.LauncherPID)
		}
	}
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.KnownGood != "v1.2.0" || rep.Predecessor != "v1.1.0" {
		t.Errorf("known-good %q predecessor %q, want v1.2.0 and v1.1.0", rep.KnownGood, rep.Predecessor)
	}
	old, ok := Version(rep, "v1.0.0")
	if !ok || old.OnDisk {
		t.Errorf("v1.0.0 is older than the predecessor: want its record kept and its directory retired, got %+v", old)
	}
	if _, err := os.Stat(rollback.VersionDir(n.Root, "v1.1.0")); err != nil {
		t.Errorf("the predecessor's directory must stay: %v", err)
	}
	for _, v := range []string{"v1.0.0", "v1.1.0"} {
		if got := startsOf(t, n.Root, v); len(got) != 1 || got[0] != string(rollback.OutcomeStoodAside) {
			t.Errorf("%s starts: %v, want exactly one that stood aside", v, got)
		}
	}
	if code, err := n.Stop(ctx); err != nil || code != 0 {
		t.Fatalf("SIGTERM: exit %d, %v; want 0", code, err)
	}
	if got := startsOf(t, n.Root, "v1.2.0"); len(got) != 1 || got[0] != string(rollback.OutcomeStopped) {
		t.Errorf("v1.2.0 starts after SIGTERM: %v, want one stopped", got)
	}
}

// 2. The host does not exit when nothing changed, across several reconcile intervals.
func TestHostDoesNotStandAsideWhenUnchanged(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, rep := confirmedNode(t, ctx, PkgHost)
	pid := rep.Running.PID
	// Wait until the host has reconciled at least five more times on its 200ms timer, as its
	// store records.
	before := meshtest.ReadReconciles(t, n.Root).Count("timer")
	meshtest.Eventually(t, "five more reconciles on the host's timer", func() bool {
		return meshtest.ReadReconciles(t, n.Root).Count("timer") >= before+5
	})
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Running == nil || rep.Running.PID != pid {
		t.Fatalf("the host was restarted while nothing changed: %+v", rep.Running)
	}
	if got := startsOf(t, n.Root, "v1.0.0"); len(got) != 1 || got[0] != "" {
		t.Errorf("starts of v1.0.0: %q, want one, still running", got)
	}
}

// 3. A version that exits 1 at start is rolled back after the limit, marked bad, its last
// output kept, and never chosen again, also after the launcher restarts.
func TestCrashingVersionIsRolledBackAndNeverChosenAgain(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, _ := confirmedNode(t, ctx, PkgHost)
	place(t, n, "v1.1.0", PkgExit1)
	rep, err := n.WaitStatus(ctx, "rollback to v1.0.0", func(rep launcher.Report) bool {
		return len(rep.Rollbacks) == 1 && Running(rep) == "v1.0.0"
	})
	if err != nil {
		t.Fatal(err)
	}
	rb := rep.Rollbacks[0]
	if rb.From != "v1.1.0" || rb.To != "v1.0.0" || !strings.Contains(rb.Output, "lab fixture exit1") {
		t.Errorf("rollback %+v: want v1.1.0 → v1.0.0 with the fixture's last output", rb)
	}
	bad, _ := Version(rep, "v1.1.0")
	if !bad.Bad || bad.Failures != 3 || !strings.Contains(bad.BadReason, "exited with status 1") {
		t.Errorf("v1.1.0: %+v, want bad after 3 failures with the exit named", bad)
	}
	if code, err := n.Stop(ctx); err != nil || code != 0 {
		t.Fatalf("stop: %d %v", code, err)
	}
	// The bad version's directory may still be there (retire runs on confirm): place it again to
	// be sure, and restart the launcher: it must never run it.
	os.RemoveAll(rollback.VersionDir(n.Root, "v1.1.0"))
	place(t, n, "v1.1.0", PkgExit1)
	start(t, n)
	if _, err := n.WaitStatus(ctx, "v1.0.0 running again", runningConfirmed("v1.0.0")); err != nil {
		t.Fatal(err)
	}
	if got := startsOf(t, n.Root, "v1.1.0"); len(got) != 3 {
		t.Errorf("v1.1.0 was started again after the restart: %v", got)
	}
}

// 4a. The version rolled back to failing as well stops the launcher with status 3.
func TestRollbackTargetFailingToStopsLauncherWithStatus3(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, _ := confirmedNode(t, ctx, PkgFlaky)
	// The machine breaks under v1.0.0 (it only notices at its next start), then a broken v1.1.0
	// arrives: v1.1.0 is rolled back to v1.0.0, which fails too.
	if err := os.WriteFile(filepath.Join(n.Root, "lab-fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	place(t, n, "v1.1.0", PkgExit1)
	rep, scode := stoppedFailed(t, ctx, n)
	if scode != launcher.ExitFailed || !rep.Failed || !strings.Contains(rep.FailedReason, "the machine is the problem") {
		t.Errorf("status exit %d failed=%v reason %q; want 3, failed, machine named", scode, rep.Failed, rep.FailedReason)
	}
	if len(rep.Rollbacks) != 1 {
		t.Errorf("rollbacks %+v, want exactly one: rollback happens once", rep.Rollbacks)
	}
	if good, _ := Version(rep, "v1.0.0"); good.Bad {
		t.Errorf("v1.0.0 worked here before; the machine broke, so it must not be marked bad: %+v", good)
	}
}

// 4b. With no known-good version at all it stops with 3 and says there is nothing to roll back to.
func TestNoKnownGoodStopsWithStatus3AndSaysSo(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := startNode(t, PkgExit1)
	rep, scode := stoppedFailed(t, ctx, n)
	if scode != launcher.ExitFailed || !strings.Contains(rep.FailedReason, "no known-good version to roll back to") {
		t.Errorf("status exit %d reason %q", scode, rep.FailedReason)
	}
	if len(rep.Rollbacks) != 0 {
		t.Errorf("it guessed a version to roll back to: %+v", rep.Rollbacks)
	}
	if got := startsOf(t, n.Root, "v1.0.0"); len(got) != 3 {
		t.Errorf("starts %v, want 3 failures then stop", got)
	}
}

// 5. A version that hangs without confirming is killed at the confirm deadline and, having had
// its chance, rolled back at once (it used to take three deadlines: 30 minutes by default).
func TestHangingVersionIsRolledBackAtItsFirstConfirmDeadline(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, _ := confirmedNode(t, ctx, PkgHost, "--confirm-deadline", "1s")
	place(t, n, "v1.1.0", PkgHang)
	rep, err := n.WaitStatus(ctx, "rollback from the hanging version", func(rep launcher.Report) bool {
		return len(rep.Rollbacks) == 1 && Running(rep) == "v1.0.0"
	})
	if err != nil {
		t.Fatal(err)
	}
	got := startsOf(t, n.Root, "v1.1.0")
	if len(got) != 1 || got[0] != string(rollback.OutcomeDeadline) {
		t.Errorf("starts of the hanging version: %v, want one, killed at the deadline", got)
	}
	if !strings.Contains(rep.Rollbacks[0].Reason, "confirm deadline") {
		t.Errorf("rollback reason %q does not name the deadline", rep.Rollbacks[0].Reason)
	}
}

// 6. A version that exits 0 at once with nothing newer is a failure, never restarted hot.
func TestCleanExitWithNothingNewerCountsAsFailure(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := startNode(t, PkgExit0, "--backoff-min", "300ms")
	code, err := n.Wait(ctx)
	if err != nil || code != launcher.ExitFailed {
		t.Fatalf("launcher exit %d, %v; want %d", code, err, launcher.ExitFailed)
	}
	r, err := rollback.OpenForHost(ctx, n.Root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	starts, err := r.Starts(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 3 {
		t.Fatalf("starts %+v, want 3", starts)
	}
	for i, s := range starts {
		if s.Outcome != rollback.OutcomeFailed || s.ExitCode != 0 {
			t.Errorf("start %d: %+v, want a failure with exit 0", i, s)
		}
		// Not hot: each restart waited at least the backoff (a lower bound, not a timing claim).
		if i > 0 && s.StartedAt.Sub(starts[i-1].EndedAt) < 300*time.Millisecond {
			t.Errorf("start %d came %s after the previous exit: restarted hot", i, s.StartedAt.Sub(starts[i-1].EndedAt))
		}
	}
}

// 7. SIGKILL of the launcher leaves no host running; a second launcher on the same root refuses.
func TestKilledLauncherLeavesNoHostAndSecondLauncherRefuses(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, rep := confirmedNode(t, ctx, PkgHost)
	hostPID := rep.Running.PID

	second := exec.CommandContext(ctx, n.Launcher, "run", "--root", n.Root)
	out, err := second.CombinedOutput()
	if code := second.ProcessState.ExitCode(); code == 0 || !strings.Contains(string(out), "another mesh-launcher") {
		t.Errorf("a second launcher on the same root: exit %d, %v:\n%s", code, err, out)
	}

	if err := n.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.Wait(ctx)
	for syscall.Kill(hostPID, 0) == nil && !isZombie(hostPID) {
		if ctx.Err() != nil {
			t.Fatalf("host pid %d still runs after its launcher was killed", hostPID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new launcher on the root starts cleanly, with the old start recorded as interrupted.
	// The killed host may linger as a zombie, which status's records still name running: only a
	// host of another pid is the new launcher's.
	start(t, n)
	if _, err := n.WaitStatus(ctx, "v1.0.0 running again", func(rep launcher.Report) bool {
		return runningConfirmed("v1.0.0")(rep) && rep.Running.PID != hostPID
	}); err != nil {
		t.Fatal(err)
	}
	if got := startsOf(t, n.Root, "v1.0.0"); got[0] != string(rollback.OutcomeInterrupted) {
		t.Errorf("first start after SIGKILL of its launcher: %q, want interrupted", got[0])
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

// 8. A version whose binary changed after it was first seen is not run, and status says why; a
// leftover staging directory is removed at start.
func TestChangedBinaryIsNotRunAndStagingLeftoversAreRemoved(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := newNode(t)
	place(t, n, "v1.0.0", PkgHost)
	place(t, n, "v1.1.0", PkgHost)
	start(t, n)
	if _, err := n.WaitStatus(ctx, "v1.1.0 confirmed", runningConfirmed("v1.1.0")); err != nil {
		t.Fatal(err)
	}
	if code, err := n.Stop(ctx); err != nil || code != 0 {
		t.Fatalf("stop: %d %v", code, err)
	}
	// Someone replaces v1.1.0's binary in place, and a crash left a staging directory.
	if err := copyFile(build(t, PkgHost, "v1.0.0"), rollback.BinaryPath(n.Root, "v1.1.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(rollback.VersionsDir(n.Root), rollback.StagingPrefix+"crashed")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	start(t, n)
	rep, err := n.WaitStatus(ctx, "v1.0.0 running", func(rep launcher.Report) bool { return Running(rep) == "v1.0.0" })
	if err != nil {
		t.Fatal(err)
	}
	v, _ := Version(rep, "v1.1.0")
	if !strings.Contains(v.Mismatch, "binary changed since it was first seen") {
		t.Errorf("status of v1.1.0 does not say why it is not run: %+v", v)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover staging directory still there: %v", err)
	}
	if !strings.Contains(n.StatusText(ctx), "NOT RUN: binary changed") {
		t.Errorf("human status does not say why v1.1.0 is not run:\n%s", n.StatusText(ctx))
	}
}

// 9. A corrupt records.db gives a clear error naming the file and what to do; no version
// directory is ever deleted because of it.
func TestCorruptRecordsAreReportedAndVersionsKept(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := newNode(t)
	place(t, n, "v1.0.0", PkgHost)
	place(t, n, "v1.1.0", PkgHost)
	records := rollback.RecordsPath(n.Root)
	if err := os.WriteFile(records, []byte(strings.Repeat("not a database\n", 400)), 0o644); err != nil {
		t.Fatal(err)
	}
	// status, with no launcher: names the file and what to do.
	out, _ := exec.CommandContext(ctx, n.Launcher, "status", "--root", n.Root).CombinedOutput()
	for _, want := range []string{records, "moves the corrupt file aside", "versions directory is intact"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("status on a corrupt records.db does not say %q:\n%s", want, out)
		}
	}
	// run: moves it aside, says so, and runs the newest version on trial.
	start(t, n)
	rep, err := n.WaitStatus(ctx, "v1.1.0 running", runningConfirmed("v1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(n.Log(), "records.db.corrupt-") || !strings.Contains(rep.Note, "moved aside") {
		t.Errorf("the launcher did not say where the corrupt file went; note %q, log:\n%s", rep.Note, n.Log())
	}
	for _, v := range []string{"v1.0.0", "v1.1.0"} {
		if _, err := os.Stat(rollback.BinaryPath(n.Root, v)); err != nil {
			t.Errorf("%s was lost: %v", v, err)
		}
	}
	matches, _ := filepath.Glob(records + ".corrupt-*")
	if len(matches) == 0 {
		t.Errorf("the corrupt file was not kept aside")
	}
}

// The launcher makes records.db on a first start (and after moving a corrupt one aside) while
// an operator, a package script or this lab may run `mesh-launcher status` on the same root.
// Both used to convert the fresh file to WAL, and SQLite refused one of them at once: a
// launcher that lost could not run ("database is locked", seen in CI). Real processes: statuses
// run back to back beside each first start.
func TestStatusBesideTheLaunchersFirstStartNeverStopsIt(t *testing.T) {
	t.Parallel()
	const rounds = 20
	for i := range rounds {
		t.Run(fmt.Sprintf("start-%d", i), func(t *testing.T) {
			// Waiting ends when the launcher exits: one that could not run is not waited on.
			ctx, exited := context.WithCancel(meshtest.Context(t, 30*time.Second))
			n := newNode(t)
			place(t, n, "v1.0.0", PkgHost)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							n.Status(ctx) // refusals before the records exist are status's to say
						}
					}
				})
			}
			start(t, n)
			go func() {
				n.Wait(ctx)
				exited()
			}()
			_, err := n.WaitStatus(ctx, "v1.0.0 running", func(rep launcher.Report) bool { return Running(rep) == "v1.0.0" })
			close(stop)
			wg.Wait()
			if err != nil || strings.Contains(n.Log(), "cannot run") {
				t.Fatalf("the launcher did not come up beside status: %v\n%s", err, n.Log())
			}
		})
	}
}
