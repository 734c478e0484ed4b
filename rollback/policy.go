package rollback

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Policy is the failure policy: how many failures a version may have before it is judged, and
// how long a confirmed version waits before it is restarted.
type Policy struct {
	Limit      int           // failures that make a version reach the limit (3)
	Interval   time.Duration // a confirmed version's failures count within this window (120s)
	BackoffMin time.Duration // the first restart delay after a failure (500ms)
	BackoffMax time.Duration // the cap on the restart delay (60s)
}

// DefaultPolicy is docs/design.md's: 3 failures in 120 s, backoff from 500 ms capped at 60 s.
var DefaultPolicy = Policy{Limit: 3, Interval: 120 * time.Second, BackoffMin: 500 * time.Millisecond, BackoffMax: 60 * time.Second}

// Standing is what the records say about a version that has just failed.
type Standing struct {
	Confirmed      bool    // it has completed a reconcile on this machine at some time
	RollbackTarget bool    // the last rollback went to it and it has not confirmed since
	Failures       int     // failures that count (this one included)
	Last           Failure // the newest of them (zero when there is none)
	HasKnownGood   bool    // a confirmed, not-bad version older than it is on disk
}

// Deadline reports whether the newest failure was the confirm deadline: an unconfirmed version
// that ran that long without completing a reconcile has had its chance.
func (s Standing) Deadline() bool { return s.Last.Outcome == OutcomeDeadline }

// Action is what the launcher does after a failure.
type Action int

const (
	Restart         Action = iota // start Choose's version again after Verdict.Delay
	RollBack                      // mark the version bad, record a rollback, start Choose's version
	StopRolledBack                // the version rolled back to failed too: the machine is the problem
	StopNoKnownGood               // nothing known-good to roll back to; never guess a version
)

func (a Action) String() string {
	return [...]string{"restart", "roll back", "stop: rollback already spent", "stop: nothing to roll back to"}[a]
}

// Verdict is the policy's answer.
type Verdict struct {
	Action Action
	Delay  time.Duration // for Restart
}

// Judge applies docs/design.md's failure rules to a version that has just failed. It is the table
// below, in order; the first row that matches decides. A version is judged when it reaches
// the limit, or — unconfirmed — when it reached the confirm deadline: it ran that long without
// completing a reconcile and has had its chance (decision 0001).
//
//	judged | rollback target | confirmed | known-good older | → action
//	no     | –               | –         | –                | restart after backoff
//	yes    | yes             | –         | –                | stop (rollback once)
//	yes    | no              | yes       | –                | restart after capped backoff
//	yes    | no              | no        | yes              | mark bad, roll back
//	yes    | no              | no        | no               | stop (nothing to roll back to)
func (p Policy) Judge(s Standing) Verdict {
	judged := s.Failures >= p.Limit || s.Deadline() && !s.Confirmed
	switch {
	case !judged:
		return Verdict{Action: Restart, Delay: p.backoff(s.Failures)}
	case s.RollbackTarget:
		return Verdict{Action: StopRolledBack}
	case s.Confirmed:
		return Verdict{Action: Restart, Delay: p.backoff(s.Failures)}
	case s.HasKnownGood:
		return Verdict{Action: RollBack}
	default:
		return Verdict{Action: StopNoKnownGood}
	}
}

// backoff is the delay before restarting after the nth counted failure: BackoffMin doubling,
// capped at BackoffMax. Never zero, so a failing version is never restarted hot.
func (p Policy) backoff(n int) time.Duration {
	d := p.BackoffMin
	if d <= 0 {
		d = DefaultPolicy.BackoffMin
	}
	limit := p.BackoffMax
	if limit <= 0 {
		limit = DefaultPolicy.BackoffMax
	}
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Standing reads what the records say about version after one of its starts failed. Failures
// are counted by the order of starts, and within an interval by the boot clock, never by
// wall-clock differences (see docs/decisions/0001-failure-counting.md). Which count:
//   - the version the last rollback went to, if it had confirmed here but not since: failures
//     in the starts after that rollback;
//   - an unconfirmed version: every failure it has had, because time does not absolve a
//     version that has never worked here;
//   - a confirmed version: failures that ended within the interval on this boot; they only
//     set the backoff;
//   - and for all of them, only starts after an operator restarted the launcher out of its
//     failed state.
func (r *Records) Standing(ctx context.Context, root, version string, p Policy) (Standing, error) {
	var s Standing
	var confirmedAt sql.NullInt64
	var after int64
	err := r.db.QueryRowContext(ctx, `SELECT confirmed_at FROM versions WHERE version = ?`, version).Scan(&confirmedAt)
	if err != nil {
		return s, r.wrap("read standing of "+version, err)
	}
	if err := r.db.QueryRowContext(ctx, `SELECT reset_after_start FROM launcher WHERE id = 1`).Scan(&after); err != nil {
		return s, r.wrap("read launcher state", err)
	}
	s.Confirmed = confirmedAt.Valid

	rbs, err := r.Rollbacks(ctx, 1)
	if err != nil {
		return s, err
	}
	// Only a version that has worked here is on its last chance: a rollback from vN can land on
	// an unconfirmed vN-1 staged beside it (Choose's answer), which must get its own trials and
	// a rollback to the known-good predecessor, not "the machine is the problem".
	if len(rbs) == 1 && rbs[0].To == version && s.Confirmed {
		var confirmedSince int
		err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM starts WHERE version = ? AND confirmed_at IS NOT NULL AND id > ?`,
			version, rbs[0].AfterStart).Scan(&confirmedSince)
		if err != nil {
			return s, r.wrap("read standing of "+version, err)
		}
		if confirmedSince == 0 {
			s.RollbackTarget = true
			after = max(after, rbs[0].AfterStart)
		}
	}
	var window time.Duration
	if s.Confirmed && !s.RollbackTarget {
		window = p.Interval
	}
	fails, err := r.failuresAfter(ctx, version, after, window)
	if err != nil {
		return s, err
	}
	s.Failures = len(fails)
	if len(fails) > 0 {
		s.Last = fails[len(fails)-1]
	}
	pred, err := r.predecessor(ctx, root, version)
	if err != nil {
		return s, err
	}
	s.HasKnownGood = pred != ""
	return s, nil
}

// lastOutput is the stderr tail of the version's most recent ended start.
func (r *Records) lastOutput(ctx context.Context, version string) (string, error) {
	var out sql.NullString
	err := r.db.QueryRowContext(ctx, `SELECT output FROM starts WHERE version = ? AND ended_at IS NOT NULL ORDER BY id DESC LIMIT 1`, version).Scan(&out)
	if err != nil && err != sql.ErrNoRows {
		return "", r.wrap(fmt.Sprintf("read last output of %s", version), err)
	}
	return out.String, nil
}
