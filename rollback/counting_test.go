package rollback

import (
	"context"
	"database/sql"
	"testing"
	"time"
)

// The clock stepped back a day once hid five failures of an unconfirmed version (they ended
// "before" it was first seen), and no rollback happened. Starts are counted by their order and
// the boot clock, so stepping the wall clock either way changes nothing.
func TestFailureCountingIgnoresTheWallClockSteppingEitherWay(t *testing.T) {
	for _, tc := range []struct {
		name string
		step time.Duration
	}{
		{"stepped back a day", -24 * time.Hour},
		{"stepped forward a day", 24 * time.Hour},
		{"stepped back a year", -365 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("unconfirmed version reaches the limit and is rolled back", func(t *testing.T) {
				root, r, c := seenV1(t)
				confirm(t, r, root, "v1.0.0")
				stage(t, root, "v1.1.0", "")
				see(t, r, root)
				c.stepWall(tc.step)
				for i := 0; i < 5; i++ {
					startEnded(t, r, c, "v1.1.0", OutcomeFailed)
				}
				s := standing(t, r, root, "v1.1.0")
				if s.Failures != 5 {
					t.Fatalf("Failures = %d after five failures with the clock %s, want 5", s.Failures, tc.name)
				}
				if got := DefaultPolicy.Judge(s).Action; got != RollBack {
					t.Errorf("Judge = %v, want roll back", got)
				}
			})
			t.Run("confirmed version counts failures within the interval on the boot clock", func(t *testing.T) {
				root, r, c := seenV1(t)
				confirm(t, r, root, "v1.0.0")
				startEnded(t, r, c, "v1.0.0", OutcomeFailed)
				c.stepWall(tc.step)
				startEnded(t, r, c, "v1.0.0", OutcomeFailed)
				if s := standing(t, r, root, "v1.0.0"); s.Failures != 2 {
					t.Errorf("Failures = %d, want 2: both ended seconds apart on this boot", s.Failures)
				}
				c.advance(DefaultPolicy.Interval + time.Second)
				if s := standing(t, r, root, "v1.0.0"); s.Failures != 0 {
					t.Errorf("Failures = %d an interval later, want 0", s.Failures)
				}
			})
			t.Run("rollback target counts the starts after the rollback", func(t *testing.T) {
				root, r, c := rolledBack(t)
				c.stepWall(tc.step)
				for i := 0; i < 3; i++ {
					startEnded(t, r, c, "v1.0.0", OutcomeFailed)
				}
				s := standing(t, r, root, "v1.0.0")
				if !s.RollbackTarget || s.Failures != 3 {
					t.Fatalf("Standing = %+v, want the rollback target with 3 failures", s)
				}
				if got := DefaultPolicy.Judge(s).Action; got != StopRolledBack {
					t.Errorf("Judge = %v, want stop: rollback already spent", got)
				}
			})
		})
	}
}

func TestConfirmedVersionsFailuresOfAnEarlierBootDoNotCount(t *testing.T) {
	root, r, c := seenV1(t)
	confirm(t, r, root, "v1.0.0")
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	c.reboot()
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 1 {
		t.Errorf("Failures = %d, want 1: the two before the reboot are not within the interval", s.Failures)
	}
}

func TestOperatorResetCountsByStartsNotTime(t *testing.T) {
	root, r, c := seenV1(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	}
	if err := r.SetFailed(ctx, "nothing to roll back to"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ClearFailed(ctx); err != nil {
		t.Fatal(err)
	}
	c.stepWall(-24 * time.Hour) // the reset's time is now "in the future"
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 1 {
		t.Errorf("Failures = %d, want 1: the one failure after the reset", s.Failures)
	}
}

// An unconfirmed version that ran its whole confirm deadline has had its chance: it is judged
// at once (rolled back, or the launcher stops when there is nothing to go back to), not after
// three deadlines (decision 0001).
func TestJudgeRollsBackAnUnconfirmedVersionAtItsFirstDeadline(t *testing.T) {
	deadline := Failure{End: End{Outcome: OutcomeDeadline}}
	crash := Failure{End: End{Outcome: OutcomeFailed, ExitCode: 1}}
	hung := Failure{End: End{Outcome: OutcomeHung, Signal: "killed"}}
	for _, tc := range []struct {
		name string
		s    Standing
		want Action
	}{
		{"first deadline, known-good → roll back", Standing{Failures: 1, Last: deadline, HasKnownGood: true}, RollBack},
		{"first deadline, nothing known-good → stop", Standing{Failures: 1, Last: deadline}, StopNoKnownGood},
		{"crash then deadline → roll back", Standing{Failures: 2, Last: deadline, HasKnownGood: true}, RollBack},
		{"deadline then crash, below the limit → restart", Standing{Failures: 2, Last: crash, HasKnownGood: true}, Restart},
		{"first hang before confirming → restart, judged like a crash", Standing{Failures: 1, Last: hung, HasKnownGood: true}, Restart},
		{"third hang before confirming → roll back", Standing{Failures: 3, Last: hung, HasKnownGood: true}, RollBack},
		{"hang after confirming, at the limit → restart", Standing{Failures: 3, Last: hung, Confirmed: true}, Restart},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DefaultPolicy.Judge(tc.s).Action; got != tc.want {
				t.Errorf("Judge(%+v) = %v, want %v", tc.s, got, tc.want)
			}
		})
	}
}

func TestStandingNamesTheNewestFailure(t *testing.T) {
	root, r, c := seenV1(t)
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	startEnded(t, r, c, "v1.0.0", OutcomeDeadline)
	s := standing(t, r, root, "v1.0.0")
	if s.Failures != 2 || !s.Deadline() || s.Last.Output != "last words of v1.0.0" {
		t.Errorf("Standing = %+v, want 2 failures, the newest the deadline with its output", s)
	}
}

func TestWithdrawBadLetsTheVersionBeChosenAgain(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	stage(t, root, "v1.1.0", "")
	r, _ := openRecords(t, root)
	ctx := context.Background()
	see(t, r, root)
	if err := r.MarkBad(ctx, "v1.1.0", "failed 3 times"); err != nil {
		t.Fatal(err)
	}
	if ch := see(t, r, root); ch.Version != "v1.0.0" {
		t.Fatalf("Choose = %q with v1.1.0 bad, want v1.0.0", ch.Version)
	}
	for i, want := range []bool{true, false} {
		lifted, err := r.WithdrawBad(ctx, "v1.1.0")
		if err != nil || lifted != want {
			t.Fatalf("WithdrawBad #%d = %v, %v; want %v", i+1, lifted, err, want)
		}
	}
	if ch := see(t, r, root); ch.Version != "v1.1.0" {
		t.Errorf("Choose = %q after the mark was withdrawn, want v1.1.0", ch.Version)
	}
}

func TestStatusShowsFailuresThatCountNowAndTheLifetimeTotal(t *testing.T) {
	root, r, c := seenV1(t)
	ctx := context.Background()
	confirm(t, r, root, "v1.0.0")
	for i := 0; i < 7; i++ {
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	}
	c.advance(DefaultPolicy.Interval + time.Second)
	startEnded(t, r, c, "v1.0.0", OutcomeHung)
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	v := st.Versions[0]
	if v.Failures != 1 || v.FailuresTotal != 8 || v.LastFailure == "" {
		t.Errorf("status of v1.0.0 = %+v, want 1 failure counting now, 8 in all, the last described", v)
	}
}

func TestStatusHasNoFailedReasonWhenNotFailed(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	if err := r.SetFailed(ctx, "the machine is the problem"); err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil || !st.Failed || st.FailedReason == "" {
		t.Fatalf("failed status = %+v, %v", st, err)
	}
	if _, err := r.ClearFailed(ctx); err != nil {
		t.Fatal(err)
	}
	st, err = r.Status(ctx, root, DefaultPolicy)
	if err != nil || st.Failed || st.FailedReason != "" {
		t.Errorf("status after the failed state was left: failed %v, reason %q; want no reason", st.Failed, st.FailedReason)
	}
}

// A records.db of schema 1 (launchers before failure counting by starts) is migrated: a
// rollback and a reset recorded then are placed after the starts that began before them.
func TestSchema1RecordsAreMigratedWithRollbacksPlacedAmongStarts(t *testing.T) {
	root := newRoot(t)
	path := RecordsPath(root)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		migrations[0],
		`PRAGMA user_version = 1`,
		`INSERT INTO versions (version, digest, first_seen, confirmed_at) VALUES ('v1.0.0', 'sha256:` + zeros64 + `', 100, 200)`,
		`INSERT INTO starts (id, version, started_at, ended_at, outcome) VALUES (1, 'v1.0.0', 150, 160, 'failed'), (2, 'v1.0.0', 300, 310, 'failed')`,
		`INSERT INTO rollbacks (from_version, to_version, at, reason) VALUES ('v1.1.0', 'v1.0.0', 250, 'r')`,
		`UPDATE launcher SET reset_at = 320`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	r, _ := openRecords(t, root)
	rbs, err := r.Rollbacks(context.Background(), 1)
	if err != nil || len(rbs) != 1 || rbs[0].AfterStart != 1 {
		t.Fatalf("rollbacks after migration = %+v, %v; want the rollback after start 1", rbs, err)
	}
	var reset int64
	if err := r.db.QueryRow(`SELECT reset_after_start FROM launcher`).Scan(&reset); err != nil || reset != 2 {
		t.Errorf("reset_after_start = %d, %v; want 2", reset, err)
	}
}

const zeros64 = "0000000000000000000000000000000000000000000000000000000000000000"
