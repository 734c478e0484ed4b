package launcher

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
)

type recordingNotifier struct{ states []string }

func (n *recordingNotifier) Notify(s string) { n.states = append(n.states, s) }

func TestConfigDefaultsFillsOnlyWhatIsZero(t *testing.T) {
	d := Config{Root: "/r"}.withDefaults()
	if d.Root != "/r" {
		t.Errorf("Root = %q", d.Root)
	}
	if d.Policy != rollback.DefaultPolicy {
		t.Errorf("Policy = %+v, want %+v", d.Policy, rollback.DefaultPolicy)
	}
	if d.ConfirmDeadline != 10*time.Minute || d.StopTimeout != 90*time.Second {
		t.Errorf("ConfirmDeadline %v, StopTimeout %v; want 10m, 90s", d.ConfirmDeadline, d.StopTimeout)
	}
	if d.Logger == nil || d.Stderr != os.Stderr || d.Stdout != os.Stdout {
		t.Errorf("Logger %v, Stderr %v, Stdout %v", d.Logger, d.Stderr, d.Stdout)
	}
	if _, ok := d.Notifier.(NopNotifier); !ok {
		t.Errorf("Notifier = %T, want NopNotifier", d.Notifier)
	}

	logger := slog.New(slog.DiscardHandler)
	n := &recordingNotifier{}
	set := Config{
		Root:            "/s",
		Policy:          rollback.Policy{Limit: 5, BackoffMax: 7 * time.Second},
		ConfirmDeadline: time.Second,
		StopTimeout:     2 * time.Second,
		Logger:          logger,
		Notifier:        n,
		Stderr:          os.Stdout,
		Stdout:          os.Stderr,
	}.withDefaults()
	want := rollback.Policy{Limit: 5, Interval: rollback.DefaultPolicy.Interval, BackoffMin: rollback.DefaultPolicy.BackoffMin, BackoffMax: 7 * time.Second}
	if set.Policy != want {
		t.Errorf("Policy = %+v, want %+v (set fields kept, others defaulted)", set.Policy, want)
	}
	if set.ConfirmDeadline != time.Second || set.StopTimeout != 2*time.Second || set.Logger != logger ||
		set.Notifier != Notifier(n) || set.Stderr != os.Stdout || set.Stdout != os.Stderr {
		t.Errorf("Defaults overwrote a set field: %+v", set)
	}
}

func TestErrFailedStateSaysTheReason(t *testing.T) {
	if got := (errFailedState{reason: "nothing to roll back to"}).Error(); got != "nothing to roll back to" {
		t.Errorf("Error() = %q", got)
	}
	if ExitFailed != 3 {
		t.Errorf("ExitFailed = %d, want 3 (the unit's RestartPreventExitStatus=)", ExitFailed)
	}
}

// chanNotifier hands every state to a channel, dropping what nobody reads.
type chanNotifier chan string

func (c chanNotifier) Notify(s string) {
	select {
	case c <- s:
	default:
	}
}

func TestWatchdogIsRelayedWhenSystemdAsksForIt(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	n := make(chanNotifier, 1)
	stop := startWatchdog(context.Background(), n)
	defer stop()
	select {
	case s := <-n:
		if s != "WATCHDOG=1" {
			t.Errorf("relayed %q, want WATCHDOG=1", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("no WATCHDOG=1 relayed")
	}
}

func TestWatchdogIsNotRelayedOutsideSystemd(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("WATCHDOG_PID", "")
	n := make(chanNotifier, 1)
	stop := startWatchdog(context.Background(), n)
	stop()
	select {
	case s := <-n:
		t.Errorf("relayed %q without a watchdog", s)
	default:
	}
}

func TestPrepareClosesInterruptedStartsLeavesFailedStateAndRemovesStaging(t *testing.T) {
	g := newJudgeRig(t, "v1.0.0")
	ctx := context.Background()
	g.choose(t)
	if _, err := g.r.BeginStart(ctx, "v1.0.0"); err != nil { // left open by a launcher that died
		t.Fatal(err)
	}
	if err := g.r.SetFailed(ctx, "nothing to roll back to"); err != nil {
		t.Fatal(err)
	}
	staging := filepath.Join(rollback.VersionsDir(g.root), ".staging-42")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := g.l.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := g.r.Outcomes(ctx, "v1.0.0"); len(got) != 1 || got[0] != string(rollback.OutcomeInterrupted) {
		t.Errorf("Outcomes = %v, want the open start closed as interrupted", got)
	}
	st, err := g.r.Status(ctx, g.root, rollback.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed || st.Running != nil {
		t.Errorf("after prepare: failed %v, running %+v", st.Failed, st.Running)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("staging directory left behind: %v", err)
	}
	if _, err := os.Stat(rollback.BinaryPath(g.root, "v1.0.0")); err != nil {
		t.Errorf("v1.0.0 touched: %v", err)
	}
}
