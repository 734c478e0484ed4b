package launcher

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// judgeRig is a launcher on a temp root with real records, but no processes: enough to test how
// it judges an exit and what it does after a failure.
type judgeRig struct {
	root string
	r    *rollback.Records
	l    *Launcher
	n    *recordingNotifier
}

func newJudgeRig(t *testing.T, versions ...string) *judgeRig {
	t.Helper()
	root := t.TempDir()
	for _, v := range versions {
		stageVersion(t, root, v)
	}
	r, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	n := &recordingNotifier{}
	cfg := Config{
		Root:     root,
		Policy:   rollback.Policy{Limit: 3, Interval: time.Hour, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond},
		Logger:   slog.New(slog.DiscardHandler),
		Notifier: n,
	}.withDefaults()
	return &judgeRig{root: root, r: r, l: &Launcher{cfg: cfg, log: cfg.Logger, records: r}, n: n}
}

func stageVersion(t *testing.T, root, v string) {
	t.Helper()
	if err := os.MkdirAll(rollback.VersionDir(root, v), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rollback.BinaryPath(root, v), []byte("binary "+v), 0o755); err != nil {
		t.Fatal(err)
	}
}

// choose runs Choose, recording digests, and returns its answer.
func (g *judgeRig) choose(t *testing.T) string {
	t.Helper()
	ch, err := g.r.Choose(context.Background(), g.root)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Version
}

// fail records n failed starts of v.
func (g *judgeRig) fail(t *testing.T, v string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		id, err := g.r.BeginStart(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.r.EndStart(ctx, id, rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: "panic: " + v}); err != nil {
			t.Fatal(err)
		}
	}
}

func (g *judgeRig) confirm(t *testing.T, v string) {
	t.Helper()
	ctx := context.Background()
	id, err := g.r.BeginStart(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.r.Confirm(ctx, g.root, v, id); err != nil {
		t.Fatal(err)
	}
	if err := g.r.EndStart(ctx, id, rollback.End{Outcome: rollback.OutcomeStoodAside}); err != nil {
		t.Fatal(err)
	}
}

func TestJudgeExitCleanExitWhileChooseNamesAnotherVersionIsStandingAside(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	g.choose(t)
	stageVersion(t, g.root, "v2.0.0")
	got, next, err := g.l.judgeExit(context.Background(), "v1.0.0", rollback.End{ExitCode: 0})
	if err != nil || got != rollback.OutcomeStoodAside {
		t.Errorf("judgeExit = %v, %v; want stood-aside", got, err)
	}
	if next == nil || next.Version != "v2.0.0" {
		t.Errorf("judgeExit passed on %+v, want the choice it judged by (v2.0.0), to start next", next)
	}
}

func TestJudgeExitCleanExitWhileChooseNamesTheSameVersionIsAFailure(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	g.choose(t)
	got, _, err := g.l.judgeExit(context.Background(), "v1.0.0", rollback.End{ExitCode: 0})
	if err != nil || got != rollback.OutcomeFailed {
		t.Errorf("judgeExit = %v, %v; want failed", got, err)
	}
}

func TestJudgeExitNonZeroIsAFailureEvenWithSomethingNewer(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0", "v2.0.0")
	for _, code := range []int{1, 2, -1} {
		got, _, err := g.l.judgeExit(context.Background(), "v1.0.0", rollback.End{ExitCode: code})
		if err != nil || got != rollback.OutcomeFailed {
			t.Errorf("judgeExit(exit %d) = %v, %v; want failed", code, got, err)
		}
	}
}

func TestAfterFailureBelowLimitRestarts(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	g.choose(t)
	g.fail(t, "v1.0.0", 1)
	if _, err := g.l.afterFailure(context.Background(), "v1.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); err != nil {
		t.Fatalf("afterFailure = %v, want a restart", err)
	}
	if bad, _, _ := g.r.IsBad(context.Background(), "v1.0.0"); bad {
		t.Error("a version below the limit was marked bad")
	}
	if len(g.n.states) == 0 || !strings.Contains(g.n.states[len(g.n.states)-1], "restarting") {
		t.Errorf("notified %q, want a restarting status", g.n.states)
	}
}

func TestAfterFailureOfUnconfirmedVersionAtLimitRollsBackToKnownGood(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	ctx := context.Background()
	g.choose(t)
	g.confirm(t, "v1.0.0")
	stageVersion(t, g.root, "v2.0.0")
	if v := g.choose(t); v != "v2.0.0" {
		t.Fatalf("Choose = %s", v)
	}
	g.fail(t, "v2.0.0", 3)
	end := rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: "loading\npanic: v2.0.0"}
	next, err := g.l.afterFailure(ctx, "v2.0.0", end)
	if err != nil {
		t.Fatalf("afterFailure = %v, want a rollback", err)
	}
	if next == nil || next.Version != "v1.0.0" {
		t.Errorf("afterFailure passed on %+v, want the choice the rollback recorded (v1.0.0), to start next", next)
	}
	bad, reason, err := g.r.IsBad(ctx, "v2.0.0")
	if err != nil || !bad || !strings.Contains(reason, "3 times") || !strings.Contains(reason, "panic: v2.0.0") {
		t.Errorf("IsBad = %v, %q, %v; want bad, saying how often and the last line", bad, reason, err)
	}
	rbs, err := g.r.Rollbacks(ctx, 10)
	if err != nil || len(rbs) != 1 {
		t.Fatalf("Rollbacks = %+v, %v", rbs, err)
	}
	if rb := rbs[0]; rb.From != "v2.0.0" || rb.To != "v1.0.0" || rb.Output != end.Output || rb.Reason != reason {
		t.Errorf("rollback = %+v, want v2.0.0 → v1.0.0 with the failed version's output", rb)
	}
	if v := g.choose(t); v != "v1.0.0" {
		t.Errorf("Choose after the rollback = %s, want v1.0.0", v)
	}
}

func TestAfterFailureOfRollbackTargetAtLimitStopsInFailedState(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	ctx := context.Background()
	g.choose(t)
	g.confirm(t, "v1.0.0")
	stageVersion(t, g.root, "v2.0.0")
	g.choose(t)
	g.fail(t, "v2.0.0", 3)
	if _, err := g.l.afterFailure(ctx, "v2.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	g.fail(t, "v1.0.0", 3)
	_, err := g.l.afterFailure(ctx, "v1.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1})
	var fs errFailedState
	if !errors.As(err, &fs) || !strings.Contains(fs.reason, "machine is the problem") || !strings.Contains(fs.reason, "v1.0.0") {
		t.Errorf("afterFailure = %v, want the failed state: the machine is the problem", err)
	}
	if bad, _, _ := g.r.IsBad(ctx, "v1.0.0"); bad {
		t.Error("the version rolled back to was marked bad: only a second rollback would need that")
	}
	if rbs, _ := g.r.Rollbacks(ctx, 10); len(rbs) != 1 {
		t.Errorf("Rollbacks = %+v, want only the one", rbs)
	}
}

func TestAfterFailureWithNothingKnownGoodStopsAndNeverGuesses(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0", "v2.0.0")
	ctx := context.Background()
	g.choose(t)
	g.fail(t, "v2.0.0", 3)
	_, err := g.l.afterFailure(ctx, "v2.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1})
	var fs errFailedState
	if !errors.As(err, &fs) || !strings.Contains(fs.reason, "no known-good version to roll back to") {
		t.Errorf("afterFailure = %v, want the failed state: nothing to roll back to", err)
	}
	if bad, _, _ := g.r.IsBad(ctx, "v2.0.0"); bad {
		t.Error("v2.0.0 was marked bad though nothing was rolled back to")
	}
	if rbs, _ := g.r.Rollbacks(ctx, 10); len(rbs) != 0 {
		t.Errorf("Rollbacks = %+v, want none", rbs)
	}
}

func TestAfterFailureOfConfirmedVersionAtLimitRestarts(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	ctx := context.Background()
	g.choose(t)
	g.confirm(t, "v1.0.0")
	g.fail(t, "v1.0.0", 5)
	if _, err := g.l.afterFailure(ctx, "v1.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); err != nil {
		t.Errorf("afterFailure = %v, want a restart: a confirmed version is not the suspect", err)
	}
	if bad, _, _ := g.r.IsBad(ctx, "v1.0.0"); bad {
		t.Error("a confirmed version was marked bad")
	}
}

// cancelOnNotify stops the launcher as soon as it says it is restarting.
type cancelOnNotify struct {
	cancel context.CancelFunc
	said   string
}

func (c *cancelOnNotify) Notify(s string) {
	if strings.Contains(s, "restarting") {
		c.said = s
		c.cancel()
	}
}

func TestAfterFailureRestartBackoffEndsWhenStopped(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	g.l.cfg.Policy.BackoffMin, g.l.cfg.Policy.BackoffMax = time.Hour, time.Hour
	g.choose(t)
	g.fail(t, "v1.0.0", 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := &cancelOnNotify{cancel: cancel}
	g.l.cfg.Notifier = n
	if _, err := g.l.afterFailure(ctx, "v1.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); err != nil {
		t.Errorf("afterFailure = %v", err)
	}
	if !strings.Contains(n.said, "restarting in 1h0m0s") {
		t.Errorf("said %q, want the hour's backoff", n.said)
	}
}

func TestAfterFailureOfUnconfirmedIntermediateVersionRollsBackAgainToKnownGood(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	ctx := context.Background()
	g.choose(t)
	g.confirm(t, "v1.0.0")
	stageVersion(t, g.root, "v2.0.0") // staged together, v2 never ran
	stageVersion(t, g.root, "v3.0.0")
	g.choose(t)
	g.fail(t, "v3.0.0", 3)
	if _, err := g.l.afterFailure(ctx, "v3.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); err != nil {
		t.Fatal(err)
	}
	if v := g.choose(t); v != "v2.0.0" {
		t.Fatalf("Choose after the first rollback = %s, want v2.0.0", v)
	}
	g.fail(t, "v2.0.0", 3)
	if _, err := g.l.afterFailure(ctx, "v2.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); err != nil {
		t.Fatalf("afterFailure = %v; want v2.0.0, never confirmed, rolled back to the known-good v1.0.0", err)
	}
	if v := g.choose(t); v != "v1.0.0" {
		t.Errorf("Choose = %s, want v1.0.0", v)
	}
	// v1.0.0 is now the one on its last chance.
	g.fail(t, "v1.0.0", 3)
	var fs errFailedState
	if _, err := g.l.afterFailure(ctx, "v1.0.0", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1}); !errors.As(err, &fs) {
		t.Errorf("afterFailure of v1.0.0 at the limit = %v, want the failed state", err)
	}
}

// While the host waits for its maintenance window, the version that waits is what the launcher
// would start: a clean exit of it then is not standing aside (nothing is chosen in its place),
// and a restart runs it again; once the wait is gone the newer version is the stand-aside's.
func TestJudgeExitWhileTheNewerVersionWaitsForTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wait    bool
		outcome rollback.Outcome
		next    string
	}{
		{"waiting: a clean exit is a failure", true, rollback.OutcomeFailed, ""},
		{"not waiting: a clean exit stands aside for the newer", false, rollback.OutcomeStoodAside, "v2.0.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newJudgeRig(t, "v1.0.0")
			g.choose(t)
			stageVersion(t, g.root, "v2.0.0")
			if tc.wait {
				w := &rollback.WindowWait{Version: "v2.0.0", Opens: time.Now().Add(time.Hour), Window: "mon 02:00-03:00 UTC", Running: "v1.0.0"}
				if err := rollback.WriteWindowWait(g.root, w); err != nil {
					t.Fatal(err)
				}
			}
			got, next, err := g.l.judgeExit(context.Background(), "v1.0.0", rollback.End{ExitCode: 0})
			if err != nil || got != tc.outcome {
				t.Errorf("judgeExit = %v, %v; want %v", got, err, tc.outcome)
			}
			if (next == nil && tc.next != "") || (next != nil && next.Version != tc.next) {
				t.Errorf("judgeExit passed on %+v, want %q", next, tc.next)
			}
			if ch, err := g.l.choose(context.Background()); err != nil || (tc.wait && ch.Version != "v1.0.0") {
				t.Errorf("a restart chooses %s, %v", ch.Version, err)
			}
		})
	}
}
