package rollback

import (
	"context"
	"database/sql"
	"errors"
	"github.com/novox/mesh-host/internal/text"
	"time"
)

// MarkBad records that version must never run again on this machine, and why.
func (r *Records) MarkBad(ctx context.Context, version, reason string) error {
	_, err := r.db.ExecContext(ctx, `UPDATE versions SET bad_at = COALESCE(bad_at, ?), bad_reason = COALESCE(bad_reason, ?) WHERE version = ?`,
		us(r.now()), text.Cut(reason, maxReason), version)
	return r.wrapIf("mark "+version+" bad", err)
}

// maxReason bounds a reason kept in the records (a bad mark, a rollback, the failed state).
const maxReason = 2 << 10

// WithdrawBad lifts the bad mark of version: the version rolled back to failed too, so the
// machine (or what it was given) is the suspect, not the release — a failure caused by input
// or by the machine never marks a release bad (docs/decisions/0003-…). It returns whether
// there was a mark to lift.
func (r *Records) WithdrawBad(ctx context.Context, version string) (bool, error) {
	res, err := r.db.ExecContext(ctx, `UPDATE versions SET bad_at = NULL, bad_reason = NULL WHERE version = ? AND bad_at IS NOT NULL`, version)
	if err != nil {
		return false, r.wrap("withdraw the bad mark of "+version, err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// IsBad reports whether version is marked bad on this machine, and why. The host asks before
// fetching a target, so a bad version is never staged again.
func (r *Records) IsBad(ctx context.Context, version string) (bool, string, error) {
	var at sql.NullInt64
	var reason sql.NullString
	err := r.db.QueryRowContext(ctx, `SELECT bad_at, bad_reason FROM versions WHERE version = ?`, version).Scan(&at, &reason)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", r.wrap("look up "+version, err)
	}
	return at.Valid, reason.String, nil
}

// Rollback is one recorded rollback.
type Rollback struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Output string    `json:"output,omitempty"` // the failed version's last output lines
	// AfterStart is the newest start when the rollback was recorded: the failures of the
	// version rolled back to are counted from the starts after it.
	AfterStart int64 `json:"-"`
}

// RecordRollback records a rollback from one version to another, keeping the newest
// keepRollbacks.
func (r *Records) RecordRollback(ctx context.Context, rb Rollback) error {
	if rb.At.IsZero() {
		rb.At = r.now()
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return r.wrap("record rollback", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO rollbacks (from_version, to_version, at, reason, output, after_start)
		VALUES (?, ?, ?, ?, ?, (SELECT COALESCE(MAX(id), 0) FROM starts))`,
		rb.From, rb.To, us(rb.At), text.Cut(rb.Reason, maxReason), text.Cut(rb.Output, maxOutput)); err != nil {
		return r.wrap("record rollback", err)
	}
	if err := r.pruneRollbacks(ctx, tx); err != nil {
		return r.wrap("prune rollbacks", err)
	}
	return r.wrapIf("record rollback", tx.Commit())
}

// Rollbacks lists the most recent rollbacks, newest first.
func (r *Records) Rollbacks(ctx context.Context, limit int) ([]Rollback, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT from_version, to_version, at, reason, COALESCE(output, ''), after_start FROM rollbacks ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, r.wrap("read rollbacks", err)
	}
	defer rows.Close()
	var out []Rollback
	for rows.Next() {
		var rb Rollback
		var at sql.NullInt64
		if err := rows.Scan(&rb.From, &rb.To, &at, &rb.Reason, &rb.Output, &rb.AfterStart); err != nil {
			return nil, r.wrap("read rollbacks", err)
		}
		// Records written before output was redacted may hold a bus password, and rollbacks
		// travel in every heartbeat: redact them on the way out too.
		rb.At, rb.Reason, rb.Output = fromUS(at), text.Redact(rb.Reason), text.Redact(rb.Output)
		out = append(out, rb)
	}
	return out, r.wrapIf("read rollbacks", rows.Err())
}

// SetFailed records that the launcher stopped in its failed state, and why.
func (r *Records) SetFailed(ctx context.Context, reason string) error {
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET failed = 1, failed_reason = ?, failed_at = ? WHERE id = 1`, text.Cut(reason, maxReason), us(r.now()))
	return r.wrapIf("record failed state", err)
}

// ClearFailed leaves the failed state: an operator started the launcher again. Failures of
// the starts before this moment no longer count toward a version's limit.
func (r *Records) ClearFailed(ctx context.Context) (was string, err error) {
	var failed bool
	var reason sql.NullString
	if err := r.db.QueryRowContext(ctx, `SELECT failed, failed_reason FROM launcher WHERE id = 1`).Scan(&failed, &reason); err != nil {
		return "", r.wrap("read failed state", err)
	}
	if !failed {
		return "", nil
	}
	_, err = r.db.ExecContext(ctx, `UPDATE launcher SET failed = 0, failed_reason = NULL, reset_at = ?,
		reset_after_start = (SELECT COALESCE(MAX(id), 0) FROM starts) WHERE id = 1`, us(r.now()))
	return reason.String, r.wrapIf("clear failed state", err)
}
