package rollback

import (
	"context"
	"database/sql"
	"time"
)

// Outcome is how one start of a version ended.
type Outcome string

const (
	OutcomeStoodAside  Outcome = "stood-aside" // exited 0 while Choose named another version
	OutcomeFailed      Outcome = "failed"      // non-zero exit, a signal, or exit 0 with nothing to stand aside for
	OutcomeDeadline    Outcome = "deadline"    // unconfirmed at the confirm deadline, killed
	OutcomeStopped     Outcome = "stopped"     // asked to stop (the launcher was stopped)
	OutcomeInterrupted Outcome = "interrupted" // the launcher itself died; how the host ended is unknown
)

// CountsAsFailure reports whether the outcome counts toward a version's failure limit.
func (o Outcome) CountsAsFailure() bool { return o == OutcomeFailed || o == OutcomeDeadline }

// End is how a start ended.
type End struct {
	Outcome  Outcome
	ExitCode int       // -1 when killed by a signal
	Signal   string    // "killed", "terminated", … when killed by a signal
	Output   string    // the last lines the process wrote to stderr
	At       time.Time // when the process exited; now when zero
}

// BeginStart records that version is being started and returns the start's id, which the
// launcher hands the host (MESH_HOST_START_ID) so the host can confirm exactly this start.
func (r *Records) BeginStart(ctx context.Context, version string) (int64, error) {
	now := us(r.now())
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, r.wrap("begin start", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO starts (version, started_at) VALUES (?, ?)`, version, now)
	if err != nil {
		return 0, r.wrap("record start of "+version, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE versions SET first_started = ? WHERE version = ? AND first_started IS NULL`, now, version); err != nil {
		return 0, r.wrap("record start of "+version, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, r.wrap("record start of "+version, err)
	}
	return id, r.wrapIf("record start of "+version, tx.Commit())
}

// SetPID records the process id of a start once the process exists, and when it was started.
func (r *Records) SetPID(ctx context.Context, start int64, pid int, at time.Time) error {
	_, err := r.db.ExecContext(ctx, `UPDATE starts SET pid = ?, started_at = ? WHERE id = ?`, pid, us(at), start)
	return r.wrapIf("record pid", err)
}

// EndStart records how a start ended.
func (r *Records) EndStart(ctx context.Context, start int64, e End) error {
	var sig any
	if e.Signal != "" {
		sig = e.Signal
	}
	if e.At.IsZero() {
		e.At = r.now()
	}
	_, err := r.db.ExecContext(ctx, `UPDATE starts SET ended_at = ?, exit_code = ?, signal = ?, outcome = ?, output = ? WHERE id = ?`,
		us(e.At), e.ExitCode, sig, string(e.Outcome), e.Output, start)
	return r.wrapIf("record end of start", err)
}

// EndInterrupted closes starts a previous launcher left open (it died without seeing them end).
// They are not counted as failures: nobody saw how they ended.
func (r *Records) EndInterrupted(ctx context.Context) (int64, error) {
	res, err := r.db.ExecContext(ctx, `UPDATE starts SET ended_at = ?, outcome = ? WHERE ended_at IS NULL`, us(r.now()), string(OutcomeInterrupted))
	if err != nil {
		return 0, r.wrap("close interrupted starts", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// StartConfirmed reports whether a start has completed a reconcile.
func (r *Records) StartConfirmed(ctx context.Context, start int64) (bool, error) {
	var at sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT confirmed_at FROM starts WHERE id = ?`, start).Scan(&at); err != nil {
		return false, r.wrap("read start", err)
	}
	return at.Valid, nil
}

// Failure is one counted failure of a version.
type Failure struct {
	At      time.Time
	Outcome Outcome
	Output  string
}

// failuresSince lists the failures of version that ended at or after since, oldest first.
func (r *Records) failuresSince(ctx context.Context, version string, since time.Time) ([]Failure, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT ended_at, outcome, COALESCE(output, '') FROM starts
		WHERE version = ? AND ended_at >= ? AND outcome IN (?, ?) ORDER BY ended_at, id`,
		version, us(since), string(OutcomeFailed), string(OutcomeDeadline))
	if err != nil {
		return nil, r.wrap("read failures of "+version, err)
	}
	defer rows.Close()
	var out []Failure
	for rows.Next() {
		var f Failure
		var at sql.NullInt64
		var o string
		if err := rows.Scan(&at, &o, &f.Output); err != nil {
			return nil, r.wrap("read failures of "+version, err)
		}
		f.At, f.Outcome = fromUS(at), Outcome(o)
		out = append(out, f)
	}
	return out, r.wrapIf("read failures of "+version, rows.Err())
}

func (r *Records) wrapIf(what string, err error) error {
	if err == nil {
		return nil
	}
	return r.wrap(what, err)
}
