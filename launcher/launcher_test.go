package launcher

import (
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
)

type recordingNotifier struct{ states []string }

func (n *recordingNotifier) Notify(s string) { n.states = append(n.states, s) }

func TestConfigDefaultsFillsOnlyWhatIsZero(t *testing.T) {
	d := Config{Root: "/r"}.Defaults()
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
	}.Defaults()
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

func TestNopNotifierDropsEverything(t *testing.T) {
	NopNotifier{}.Notify("READY=1") // must not panic or block
}
