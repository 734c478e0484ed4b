package launcher

import (
	"testing"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

func TestRunningStatusSaysTrialConfirmedRollbackAndDegraded(t *testing.T) {
	p := rollback.Policy{Limit: 3, Interval: 2 * time.Minute}
	now := time.Date(2026, 11, 29, 10, 50, 0, 0, time.Local)
	at := time.Date(2026, 11, 29, 10, 42, 0, 0, time.Local)
	crash := rollback.Failure{End: rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: "panic: boom"}}
	rb := &rollback.Rollback{From: "v1.2.0", To: "v1.1.0", At: at}
	for _, tc := range []struct {
		name           string
		version        string
		s              rollback.Standing
		startConfirmed bool
		last           *rollback.Rollback
		want           string
	}{
		{"a new version on its first trial", "v1.2.0", rollback.Standing{}, false, nil, "running v1.2.0 (trial 1/3)"},
		{"a new version after two failures", "v1.2.0", rollback.Standing{Failures: 2, Last: crash}, false, nil, "running v1.2.0 (trial 3/3)"},
		{"a new version once this start confirmed", "v1.2.0", rollback.Standing{Confirmed: true}, true, nil, "running v1.2.0 (confirmed)"},
		{"a known-good version restarted", "v1.1.0", rollback.Standing{Confirmed: true}, false, nil, "running v1.1.0 (confirmed)"},
		{"the rollback target before it confirms again", "v1.1.0", rollback.Standing{Confirmed: true, RollbackTarget: true}, false, rb,
			"running v1.1.0 (trial 1/3); rolled back from v1.2.0 at 10:42"},
		{"the rollback target once it confirmed again", "v1.1.0", rollback.Standing{Confirmed: true}, true, rb,
			"running v1.1.0 (confirmed); rolled back from v1.2.0 at 10:42"},
		{"a version the last rollback did not go to", "v1.3.0", rollback.Standing{Confirmed: true}, true, rb, "running v1.3.0 (confirmed)"},
		{"a confirmed version that failed recently", "v1.1.0", rollback.Standing{Confirmed: true, Failures: 2, Last: crash}, true, nil,
			"running v1.1.0 (confirmed); degraded: 2 failures recently (last: exited with status 1: panic: boom)"},
		{"a rollback a day old names its date", "v1.1.0", rollback.Standing{Confirmed: true}, true,
			&rollback.Rollback{From: "v1.2.0", To: "v1.1.0", At: at.AddDate(0, 0, -1)},
			"running v1.1.0 (confirmed); rolled back from v1.2.0 at 2026-11-28 10:42"},
		{"output that would break the line is made printable", "v1.1.0",
			rollback.Standing{Confirmed: true, Failures: 1, Last: rollback.Failure{End: rollback.End{ExitCode: 2, Output: "bad\x1b[2Jthing"}}}, true, nil,
			"running v1.1.0 (confirmed); degraded: 1 failure recently (last: exited with status 2: " + txt.Printable("bad\x1b[2Jthing") + ")"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runningStatus(tc.version, tc.s, tc.startConfirmed, tc.last, p, now); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
