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

// DefaultPolicy is DESIGN.md's: 3 failures in 120 s, backoff from 500 ms capped at 60 s.
var DefaultPolicy = Policy{Limit: 3, Interval: 120 * time.Second, BackoffMin: 500 * time.Millisecond, BackoffMax: 60 * time.Second}

// Standing is what the records say about a version that has just failed.
type Standing struct {
	Confirmed      bool // it has completed a reconcile on this machine at some time
	RollbackTarget bool // the last rollback went to it and it has not confirmed since
	Failures       int  // failures that count (this one included)
	HasKnownGood   bool // a confirmed, not-bad version older than it is on disk
}

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

// Judge applies DESIGN.md's failure rules to a version that has just failed. It is the table
// below, in order; the first row that matches decides.
//
//	reached limit | rollback target | confirmed | known-good older | → action
//	no            | –               | –         | –                | restart after backoff
//	yes           | yes             | –         | –                | stop (rollback once)
//	yes           | no              | yes       | –                | restart after capped backoff
//	yes           | no              | no        | yes              | mark bad, roll back
//	yes           | no              | no        | no               | stop (nothing to roll back to)
func (p Policy) Judge(s Standing) Verdict {
	switch {
	case s.Failures < p.Limit:
		return Verdict{Action: Restart, Delay: p.Backoff(s.Failures)}
	case s.RollbackTarget:
		return Verdict{Action: StopRolledBack}
	case s.Confirmed:
		return Verdict{Action: Restart, Delay: p.Backoff(s.Failures)}
	case s.HasKnownGood:
		return Verdict{Action: RollBack}
	default:
		return Verdict{Action: StopNoKnownGood}
	}
}

// Backoff is the delay before restarting after the nth counted failure: BackoffMin doubling,
// capped at BackoffMax. Never zero, so a failing version is never restarted hot.
func (p Policy) Backoff(n int) time.Duration {
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

// Standing reads what the records say about version after one of its starts failed. Which
// failures count (see docs/decisions/0001-failure-counting.md):
//   - the version the last rollback went to, if it had confirmed here but not since: failures
//     since that rollback
//     (or since an operator restarted the launcher out of its failed state, if later);
//   - an unconfirmed version: every failure since it was first seen (or since an operator
//     restarted the launcher out of its failed state), because time does not absolve a version
//     that has never worked here — a hang is only judged after the confirm deadline, which is
//     longer than the interval;
//   - a confirmed version: failures within the interval; they only set the backoff.
func (r *Records) Standing(ctx context.Context, root, version string, p Policy) (Standing, error) {
	var s Standing
	var confirmedAt, firstSeen, resetAt sql.NullInt64
	err := r.db.QueryRowContext(ctx, `SELECT confirmed_at, first_seen FROM versions WHERE version = ?`, version).Scan(&confirmedAt, &firstSeen)
	if err != nil {
		return s, r.wrap("read standing of "+version, err)
	}
	if err := r.db.QueryRowContext(ctx, `SELECT reset_at FROM launcher WHERE id = 1`).Scan(&resetAt); err != nil {
		return s, r.wrap("read launcher state", err)
	}
	s.Confirmed = confirmedAt.Valid

	since := fromUS(firstSeen)
	rbs, err := r.Rollbacks(ctx, 1)
	if err != nil {
		return s, err
	}
	// Only a version that has worked here is on its last chance: a rollback from vN can land on
	// an unconfirmed vN-1 staged beside it (Choose's answer), which must get its own trials and
	// a rollback to the known-good predecessor, not "the machine is the problem".
	if len(rbs) == 1 && rbs[0].To == version && s.Confirmed {
		var confirmedSince int
		err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM starts WHERE version = ? AND confirmed_at >= ?`, version, us(rbs[0].At)).Scan(&confirmedSince)
		if err != nil {
			return s, r.wrap("read standing of "+version, err)
		}
		if confirmedSince == 0 {
			s.RollbackTarget = true
			since = rbs[0].At
		}
	}
	// An operator restarting the launcher out of its failed state gives fresh trials, to the
	// rollback target too (it is still on its last chance: reaching the limit stops again).
	if resetAt.Valid && resetAt.Int64 > us(since) {
		since = fromUS(resetAt)
	}
	if s.Confirmed && !s.RollbackTarget {
		since = r.now().Add(-p.Interval)
	}
	fails, err := r.failuresSince(ctx, version, since)
	if err != nil {
		return s, err
	}
	s.Failures = len(fails)
	pred, err := r.Predecessor(ctx, root, version)
	if err != nil {
		return s, err
	}
	s.HasKnownGood = pred != ""
	return s, nil
}

// LastOutput is the stderr tail of the version's most recent ended start.
func (r *Records) LastOutput(ctx context.Context, version string) (string, error) {
	var out sql.NullString
	err := r.db.QueryRowContext(ctx, `SELECT output FROM starts WHERE version = ? AND ended_at IS NOT NULL ORDER BY id DESC LIMIT 1`, version).Scan(&out)
	if err != nil && err != sql.ErrNoRows {
		return "", r.wrap(fmt.Sprintf("read last output of %s", version), err)
	}
	return out.String, nil
}
