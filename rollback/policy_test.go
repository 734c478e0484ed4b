package rollback

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestJudgeFollowsTheFailureTable(t *testing.T) {
	p := Policy{Limit: 3, Interval: 2 * time.Minute, BackoffMin: time.Second, BackoffMax: 8 * time.Second}
	tests := []struct {
		name      string
		s         Standing
		want      Action
		wantDelay time.Duration
	}{
		// Row 1: below the limit → restart after backoff, whatever else is true.
		{"below limit, unconfirmed, nothing known-good → restart", Standing{Failures: 1}, Restart, time.Second},
		{"below limit, second failure → restart, backoff doubled", Standing{Failures: 2}, Restart, 2 * time.Second},
		{"below limit, rollback target → restart", Standing{Failures: 2, RollbackTarget: true, Confirmed: true, HasKnownGood: true}, Restart, 2 * time.Second},
		{"below limit, confirmed → restart", Standing{Failures: 1, Confirmed: true}, Restart, time.Second},
		{"zero failures → restart", Standing{}, Restart, time.Second},
		// Row 2: at the limit and the rollback target → stop, rollback already spent.
		{"limit, rollback target, confirmed → stop rolled back", Standing{Failures: 3, RollbackTarget: true, Confirmed: true, HasKnownGood: true}, StopRolledBack, 0},
		{"limit, rollback target, unconfirmed, no known-good → stop rolled back", Standing{Failures: 3, RollbackTarget: true}, StopRolledBack, 0},
		{"over limit, rollback target → stop rolled back", Standing{Failures: 7, RollbackTarget: true}, StopRolledBack, 0},
		// Row 3: at the limit, not the rollback target, confirmed → restart after capped backoff.
		{"limit, confirmed, known-good older → restart", Standing{Failures: 3, Confirmed: true, HasKnownGood: true}, Restart, 4 * time.Second},
		{"limit, confirmed, nothing older → restart", Standing{Failures: 3, Confirmed: true}, Restart, 4 * time.Second},
		{"far over limit, confirmed → restart at the cap", Standing{Failures: 50, Confirmed: true}, Restart, 8 * time.Second},
		// Row 4: at the limit, unconfirmed, known-good older → roll back.
		{"limit, unconfirmed, known-good older → roll back", Standing{Failures: 3, HasKnownGood: true}, RollBack, 0},
		{"over limit, unconfirmed, known-good older → roll back", Standing{Failures: 4, HasKnownGood: true}, RollBack, 0},
		// Row 5: at the limit, unconfirmed, nothing known-good → stop.
		{"limit, unconfirmed, nothing known-good → stop", Standing{Failures: 3}, StopNoKnownGood, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := p.Judge(tt.s)
			if v.Action != tt.want {
				t.Errorf("Judge(%+v).Action = %v, want %v", tt.s, v.Action, tt.want)
			}
			if v.Delay != tt.wantDelay {
				t.Errorf("Judge(%+v).Delay = %v, want %v", tt.s, v.Delay, tt.wantDelay)
			}
		})
	}
}

func TestJudgeHonoursTheConfiguredLimit(t *testing.T) {
	p := DefaultPolicy
	p.Limit = 1
	if got := p.Judge(Standing{Failures: 1, HasKnownGood: true}).Action; got != RollBack {
		t.Errorf("limit 1, first failure: %v, want roll back", got)
	}
	p.Limit = 5
	if got := p.Judge(Standing{Failures: 4, HasKnownGood: true}).Action; got != Restart {
		t.Errorf("limit 5, fourth failure: %v, want restart", got)
	}
}

func TestActionStringsSayWhatHappens(t *testing.T) {
	for a, want := range map[Action]string{
		Restart: "restart", RollBack: "roll back",
		StopRolledBack: "stop: rollback already spent", StopNoKnownGood: "stop: nothing to roll back to",
	} {
		if a.String() != want {
			t.Errorf("%d.String() = %q, want %q", a, a.String(), want)
		}
	}
}

func TestBackoffDoublesFromMinimumAndIsCapped(t *testing.T) {
	p := Policy{BackoffMin: 500 * time.Millisecond, BackoffMax: 60 * time.Second}
	tests := []struct {
		n    int
		want time.Duration
	}{
		{-1, 500 * time.Millisecond},
		{0, 500 * time.Millisecond},
		{1, 500 * time.Millisecond},
		{2, time.Second},
		{3, 2 * time.Second},
		{4, 4 * time.Second},
		{7, 32 * time.Second},
		{8, 60 * time.Second}, // 64s, capped
		{10, 60 * time.Second},
		{1000, 60 * time.Second},
	}
	for _, tt := range tests {
		if got := p.Backoff(tt.n); got != tt.want {
			t.Errorf("Backoff(%d) = %v, want %v", tt.n, got, tt.want)
		}
	}
}

func TestBackoffIsNeverZeroAndNeverAboveTheCap(t *testing.T) {
	for _, p := range []Policy{
		DefaultPolicy,
		{BackoffMin: time.Millisecond, BackoffMax: time.Hour},
		{BackoffMin: time.Second, BackoffMax: 100 * time.Millisecond}, // cap below the minimum: the cap wins
		{BackoffMin: 3 * time.Second, BackoffMax: 10 * time.Second},
	} {
		prev := time.Duration(0)
		for n := 0; n <= 200; n++ {
			d := p.Backoff(n)
			if d <= 0 {
				t.Fatalf("%+v: Backoff(%d) = %v, never zero", p, n, d)
			}
			if d > p.BackoffMax {
				t.Fatalf("%+v: Backoff(%d) = %v, above the cap", p, n, d)
			}
			if d < prev {
				t.Fatalf("%+v: Backoff(%d) = %v shrank from %v", p, n, d, prev)
			}
			prev = d
		}
		if p.Backoff(200) != p.BackoffMax {
			t.Errorf("%+v: Backoff(200) = %v, want the cap", p, p.Backoff(200))
		}
	}
}

func TestDefaultPolicyIsThreeFailuresInTwoMinutes(t *testing.T) {
	want := Policy{Limit: 3, Interval: 120 * time.Second, BackoffMin: 500 * time.Millisecond, BackoffMax: 60 * time.Second}
	if DefaultPolicy != want {
		t.Errorf("DefaultPolicy = %+v, want %+v", DefaultPolicy, want)
	}
}

// standing reads the standing of version with the default policy.
func standing(t *testing.T, r *Records, root, version string) Standing {
	t.Helper()
	s, err := r.Standing(context.Background(), root, version, DefaultPolicy)
	if err != nil {
		t.Fatalf("Standing %s: %v", version, err)
	}
	return s
}

func TestStandingOfUnconfirmedVersionCountsEveryFailureSinceFirstSeen(t *testing.T) {
	root, r, c := seenV1(t)
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
		c.advance(10 * time.Minute) // far apart: much longer than the interval
	}
	s := standing(t, r, root, "v1.0.0")
	if s.Failures != 3 || s.Confirmed || s.RollbackTarget || s.HasKnownGood {
		t.Errorf("Standing = %+v, want 3 failures, unconfirmed, no rollback target, nothing known-good", s)
	}
	if got := DefaultPolicy.Judge(s).Action; got != StopNoKnownGood {
		t.Errorf("Judge = %v, want stop: nothing to roll back to", got)
	}
}

func TestStandingCountsDeadlineAsFailure(t *testing.T) {
	root, r, c := seenV1(t)
	startEnded(t, r, c, "v1.0.0", OutcomeDeadline)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 2 {
		t.Errorf("Failures = %d, want 2 (a deadline kill is a failure)", s.Failures)
	}
}

func TestStandingNeverCountsStoppedInterruptedOrStoodAside(t *testing.T) {
	for _, o := range []Outcome{OutcomeStopped, OutcomeInterrupted, OutcomeStoodAside} {
		t.Run(string(o), func(t *testing.T) {
			if o.CountsAsFailure() {
				t.Errorf("%s counts as a failure", o)
			}
			root, r, c := seenV1(t)
			for i := 0; i < 5; i++ {
				startEnded(t, r, c, "v1.0.0", o)
			}
			if s := standing(t, r, root, "v1.0.0"); s.Failures != 0 {
				t.Errorf("Failures = %d after five %s starts, want 0", s.Failures, o)
			}
		})
	}
	for _, o := range []Outcome{OutcomeFailed, OutcomeDeadline} {
		if !o.CountsAsFailure() {
			t.Errorf("%s does not count as a failure", o)
		}
	}
}

func TestStandingOfUnconfirmedVersionForgetsFailuresBeforeOperatorReset(t *testing.T) {
	root, r, c := seenV1(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	}
	if err := r.SetFailed(ctx, "nothing to roll back to"); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Hour)
	if was, err := r.ClearFailed(ctx); err != nil || was != "nothing to roll back to" {
		t.Fatalf("ClearFailed = %q, %v", was, err)
	}
	c.advance(time.Second)
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 0 {
		t.Errorf("Failures = %d right after the reset, want 0", s.Failures)
	}
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 1 {
		t.Errorf("Failures = %d after one failure since the reset, want 1", s.Failures)
	}
}

func TestStandingClearFailedWhenNotFailedDoesNotReset(t *testing.T) {
	root, r, c := seenV1(t)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	c.advance(time.Hour)
	// A launcher restarted while healthy (e.g. a reboot) gives no fresh trials.
	if was, err := r.ClearFailed(context.Background()); err != nil || was != "" {
		t.Fatalf("ClearFailed = %q, %v; want nothing to clear", was, err)
	}
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 2 {
		t.Errorf("Failures = %d, want 2", s.Failures)
	}
}

func TestStandingOfConfirmedVersionCountsOnlyFailuresWithinInterval(t *testing.T) {
	root, r, c := seenV1(t)
	confirm(t, r, root, "v1.0.0")
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	c.advance(30 * time.Second)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	c.advance(DefaultPolicy.Interval + time.Second) // both are now older than the interval
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	s := standing(t, r, root, "v1.0.0")
	if !s.Confirmed || s.RollbackTarget || s.Failures != 1 {
		t.Errorf("Standing = %+v, want confirmed with 1 failure within the interval", s)
	}
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	s = standing(t, r, root, "v1.0.0")
	if s.Failures != 3 {
		t.Fatalf("Failures = %d, want 3", s.Failures)
	}
	if v := DefaultPolicy.Judge(s); v.Action != Restart || v.Delay <= 0 {
		t.Errorf("Judge = %+v, want restart after a backoff: a confirmed version is never rolled back", v)
	}
}

// rolledBack sets up: v1 confirmed, v2 failed the limit without confirming, marked bad, and
// the launcher rolled back to v1. v1 also failed twice long before the rollback.
func rolledBack(t *testing.T) (string, *Records, *clock) {
	t.Helper()
	root, r, c := seenV1(t)
	ctx := context.Background()
	confirm(t, r, root, "v1.0.0")
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	c.advance(time.Hour)
	stage(t, root, "v2.0.0", "")
	see(t, r, root)
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v2.0.0", OutcomeFailed)
	}
	s := standing(t, r, root, "v2.0.0")
	if v := DefaultPolicy.Judge(s); v.Action != RollBack {
		t.Fatalf("v2 standing %+v judged %v, want roll back", s, v.Action)
	}
	if err := r.MarkBad(ctx, "v2.0.0", "failed 3 times"); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordRollback(ctx, Rollback{From: "v2.0.0", To: "v1.0.0", Reason: "failed 3 times"}); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	return root, r, c
}

func TestStandingOfRollbackTargetCountsFailuresSinceTheRollback(t *testing.T) {
	root, r, c := rolledBack(t)
	s := standing(t, r, root, "v1.0.0")
	if !s.RollbackTarget || !s.Confirmed || s.Failures != 0 {
		t.Fatalf("Standing = %+v, want rollback target, confirmed, no failures since the rollback", s)
	}
	for i := 1; i <= 3; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
		c.advance(10 * time.Minute) // far apart: the interval does not absolve a rollback target
		s = standing(t, r, root, "v1.0.0")
		if s.Failures != i || !s.RollbackTarget {
			t.Fatalf("after %d failures: Standing = %+v", i, s)
		}
	}
	if got := DefaultPolicy.Judge(s).Action; got != StopRolledBack {
		t.Errorf("Judge = %v, want stop: rollback already spent", got)
	}
}

func TestStandingOfRollbackTargetIsNormalOnceItConfirmsAgain(t *testing.T) {
	root, r, c := rolledBack(t)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	c.advance(time.Second)
	confirm(t, r, root, "v1.0.0")
	c.advance(10 * time.Minute)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	s := standing(t, r, root, "v1.0.0")
	if s.RollbackTarget || !s.Confirmed || s.Failures != 1 {
		t.Errorf("Standing = %+v, want a normal confirmed version with 1 failure within the interval", s)
	}
	for i := 0; i < 4; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	}
	if got := DefaultPolicy.Judge(standing(t, r, root, "v1.0.0")).Action; got != Restart {
		t.Errorf("Judge = %v, want restart", got)
	}
}

func TestStandingOfRollbackTargetEndsWhenALaterRollbackGoesElsewhere(t *testing.T) {
	root, r, c := rolledBack(t)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	if err := r.RecordRollback(context.Background(), Rollback{From: "v4.0.0", To: "v3.0.0", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	if s := standing(t, r, root, "v1.0.0"); s.RollbackTarget {
		t.Errorf("Standing = %+v: only the last rollback's target is on its last chance", s)
	}
}

func TestStandingOfRollbackTargetRestartsCountAfterOperatorReset(t *testing.T) {
	root, r, c := rolledBack(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	}
	if got := DefaultPolicy.Judge(standing(t, r, root, "v1.0.0")).Action; got != StopRolledBack {
		t.Fatalf("Judge = %v, want stop: rollback already spent", got)
	}
	if err := r.SetFailed(ctx, "the machine is the problem"); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Hour)
	// The operator fixes the machine and starts the launcher again: v1 gets its trials afresh.
	if _, err := r.ClearFailed(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	s := standing(t, r, root, "v1.0.0")
	if s.Failures != 1 {
		t.Errorf("Standing = %+v, want 1 failure since the operator's restart", s)
	}
	if got := DefaultPolicy.Judge(s).Action; got != Restart {
		t.Errorf("Judge = %v after one failure since the operator's restart, want restart", got)
	}
	// Still its last chance: reaching the limit again stops again.
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	s = standing(t, r, root, "v1.0.0")
	if !s.RollbackTarget || DefaultPolicy.Judge(s).Action != StopRolledBack {
		t.Errorf("Standing = %+v judged %v, want stop: rollback already spent", s, DefaultPolicy.Judge(s).Action)
	}
}

func TestStandingHasKnownGoodOnlyForAConfirmedNotBadOlderVersionOnDisk(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(t *testing.T, root string, r *Records)
		want  bool
	}{
		{"nothing else", func(t *testing.T, root string, r *Records) {}, false},
		{"older confirmed", func(t *testing.T, root string, r *Records) {
			stage(t, root, "v1.0.0", "")
			see(t, r, root)
			confirm(t, r, root, "v1.0.0")
		}, true},
		{"older unconfirmed", func(t *testing.T, root string, r *Records) {
			stage(t, root, "v1.0.0", "")
			see(t, r, root)
		}, false},
		{"older confirmed but bad", func(t *testing.T, root string, r *Records) {
			stage(t, root, "v1.0.0", "")
			see(t, r, root)
			confirm(t, r, root, "v1.0.0")
			if err := r.MarkBad(ctx, "v1.0.0", "r"); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"older confirmed but retired from disk", func(t *testing.T, root string, r *Records) {
			stage(t, root, "v1.0.0", "")
			see(t, r, root)
			confirm(t, r, root, "v1.0.0")
			if err := os.RemoveAll(VersionDir(root, "v1.0.0")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"only a newer confirmed", func(t *testing.T, root string, r *Records) {
			stage(t, root, "v3.0.0", "")
			see(t, r, root)
			confirm(t, r, root, "v3.0.0")
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRoot(t)
			r, _ := openRecords(t, root)
			tt.setup(t, root, r)
			stage(t, root, "v2.0.0", "")
			if _, err := r.candidate(ctx, root, "v2.0.0"); err != nil {
				t.Fatal(err)
			}
			if s := standing(t, r, root, "v2.0.0"); s.HasKnownGood != tt.want {
				t.Errorf("HasKnownGood = %v, want %v", s.HasKnownGood, tt.want)
			}
		})
	}
}

func TestStandingOfUnknownVersionIsAnError(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	if _, err := r.Standing(context.Background(), root, "v9.9.9", DefaultPolicy); err == nil {
		t.Error("Standing of a version never seen succeeded")
	}
}

func TestLastOutputIsOfTheMostRecentEndedStart(t *testing.T) {
	_, r, c := seenV1(t)
	ctx := context.Background()
	if out, err := r.LastOutput(ctx, "v1.0.0"); err != nil || out != "" {
		t.Errorf("LastOutput with no starts = %q, %v", out, err)
	}
	id, _ := r.BeginStart(ctx, "v1.0.0")
	if err := r.EndStart(ctx, id, End{Outcome: OutcomeFailed, ExitCode: 1, Output: "first\nsecond"}); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	if _, err := r.BeginStart(ctx, "v1.0.0"); err != nil { // still running: not ended
		t.Fatal(err)
	}
	if out, err := r.LastOutput(ctx, "v1.0.0"); err != nil || out != "first\nsecond" {
		t.Errorf("LastOutput = %q, %v; want the ended start's output", out, err)
	}
}

func TestStandingOfUnconfirmedVersionRolledBackToIsJudgedAsUnconfirmed(t *testing.T) {
	// v1 confirmed; v2 and v3 staged together; v3 fails the limit and Choose's answer after
	// marking it bad is v2, which has never run here. v2 is not on its last chance: at the limit
	// it is rolled back to v1 in turn.
	root, r, c := seenV1(t)
	ctx := context.Background()
	confirm(t, r, root, "v1.0.0")
	stage(t, root, "v2.0.0", "")
	stage(t, root, "v3.0.0", "")
	see(t, r, root)
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v3.0.0", OutcomeFailed)
	}
	if err := r.MarkBad(ctx, "v3.0.0", "bad"); err != nil {
		t.Fatal(err)
	}
	if ch := see(t, r, root); ch.Version != "v2.0.0" {
		t.Fatalf("Choose = %s, want v2.0.0", ch.Version)
	}
	if err := r.RecordRollback(ctx, Rollback{From: "v3.0.0", To: "v2.0.0", Reason: "bad"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v2.0.0", OutcomeFailed)
	}
	s := standing(t, r, root, "v2.0.0")
	if s.RollbackTarget || s.Confirmed || s.Failures != 3 || !s.HasKnownGood {
		t.Errorf("Standing = %+v, want an unconfirmed version with 3 failures and a known-good predecessor", s)
	}
	if got := DefaultPolicy.Judge(s).Action; got != RollBack {
		t.Errorf("Judge = %v, want roll back (to v1.0.0)", got)
	}
}
