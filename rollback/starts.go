package rollback

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/novox/mesh-host/internal/text"
	"strings"
	"time"
)

// Outcome is how one start of a version ended.
type Outcome string

const (
	OutcomeStoodAside  Outcome = "stood-aside" // exited 0 while Choose named another version
	OutcomeFailed      Outcome = "failed"      // non-zero exit, a signal, or exit 0 with nothing to stand aside for
	OutcomeDeadline    Outcome = "deadline"    // unconfirmed at the confirm deadline, killed
	OutcomeHung        Outcome = "hung"        // showed no sign of life for the liveness limit, killed
	OutcomeStopped     Outcome = "stopped"     // asked to stop (the launcher was stopped)
	OutcomeInterrupted Outcome = "interrupted" // the launcher itself died; how the host ended is unknown
)

// failureRule is the outcomes that count toward a version's failure limit: the failure rule,
// written once; the queries over starts.outcome read it.
var failureRule = []Outcome{OutcomeFailed, OutcomeDeadline, OutcomeHung}

// failureOutcomes is the failure rule as an SQL list, for queries over starts.outcome.
func failureOutcomes() string {
	quoted := make([]string, len(failureRule))
	for i, o := range failureRule {
		quoted[i] = "'" + string(o) + "'"
	}
	return "(" + strings.Join(quoted, ", ") + ")"
}

// End is how a start ended.
type End struct {
	Outcome  Outcome
	ExitCode int       // -1 when killed by a signal
	Signal   string    // "killed", "terminated", … when killed by a signal
	Output   string    // the last lines the process wrote to stderr
	At       time.Time // when the process exited; now when zero
}

// BeginStart records that version is being started and returns the start's id, which the
// launcher hands the host (MESH_HOST_START_ID) so the host can confirm exactly this start. It
// prunes the version's starts no reader needs (prune.go).
func (r *Records) BeginStart(ctx context.Context, version string) (int64, error) {
	return r.beginStart(ctx, version, nil)
}

// EndedStart is a start and how it ended.
type EndedStart struct {
	Start int64
	End
}

// BeginStartAfter is BeginStart that also records how prev ended, in the same transaction: the
// launcher, after a host stood aside, starts the next with one commit (one fsync) between the
// old host's exit and the new one's exec, not two, and no reader sees a moment with neither.
func (r *Records) BeginStartAfter(ctx context.Context, version string, prev EndedStart) (int64, error) {
	return r.beginStart(ctx, version, &prev)
}

func (r *Records) beginStart(ctx context.Context, version string, prev *EndedStart) (int64, error) {
	now := us(r.now())
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, r.wrap("begin start", err)
	}
	defer tx.Rollback()
	if prev != nil {
		if err := r.endStart(ctx, tx, prev.Start, prev.End); err != nil {
			return 0, err
		}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO starts (version, started_at, boot_id) VALUES (?, ?, ?)`, version, now, r.boot().ID)
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
	// In the same transaction, so no start is ever recorded without what it makes prunable
	// being pruned: the records stay bounded however often a host crashes.
	if err := r.prune(ctx, tx, version); err != nil {
		return 0, r.wrap("prune the starts of "+version, err)
	}
	return id, r.wrapIf("record start of "+version, tx.Commit())
}

// SetPID records the process id of a start once the process exists, and when it was started.
func (r *Records) SetPID(ctx context.Context, start int64, pid int, at time.Time) error {
	_, err := r.db.ExecContext(ctx, `UPDATE starts SET pid = ?, started_at = ? WHERE id = ?`, pid, us(at), start)
	return r.wrapIf("record pid", err)
}

// EndStart records how a start ended, with the boot clock's reading now (what failure
// counting compares) beside the wall-clock time (what people read).
func (r *Records) EndStart(ctx context.Context, start int64, e End) error {
	return r.endStart(ctx, r.db, start, e)
}

// execer is what endStart writes through: the database, or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (r *Records) endStart(ctx context.Context, db execer, start int64, e End) error {
	var sig any
	if e.Signal != "" {
		sig = e.Signal
	}
	if e.At.IsZero() {
		e.At = r.now()
	}
	b := r.boot()
	_, err := db.ExecContext(ctx, `UPDATE starts SET ended_at = ?, exit_code = ?, signal = ?, outcome = ?, output = ?,
		ended_boot_ns = ?, boot_id = ? WHERE id = ?`,
		us(e.At), e.ExitCode, sig, string(e.Outcome), text.Cut(e.Output, maxOutput), int64(b.Since), b.ID, start)
	return r.wrapIf("record end of start", err)
}

// maxOutput bounds the output a start keeps: the last lines of a host, for status and the
// heartbeat's rollback output.
const maxOutput = 8 << 10

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

// Failure is one counted failure of a version: which start, and how it ended.
type Failure struct {
	Start int64
	End
}

// maxDescribedLine bounds the output line a description carries: enough for a whole log line
// with its reason, small enough for a status line and a heartbeat.
const maxDescribedLine = 512

// Describe says how a start ended in a few words, with its last output line, bounded.
func (e End) Describe() string {
	var s string
	switch {
	case e.Outcome == OutcomeDeadline:
		s = "did not confirm within the confirm deadline"
	case e.Outcome == OutcomeHung:
		s = "showed no sign of life for the liveness limit (hung)"
	case e.Signal != "":
		s = "killed by signal " + e.Signal
	case e.ExitCode == 0:
		s = "exited 0 with nothing newer to stand aside for"
	default:
		s = fmt.Sprintf("exited with status %d", e.ExitCode)
	}
	out := strings.TrimSpace(e.Output)
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if out != "" {
		s += ": " + text.Cut(out, maxDescribedLine)
	}
	return s
}

// failuresAfter lists the failures of version in starts after the start numbered after,
// oldest first. With window > 0 only those that ended within window of now on this boot's
// clock count: the wall clock is never compared.
func (r *Records) failuresAfter(ctx context.Context, version string, after int64, window time.Duration) ([]Failure, error) {
	q := `SELECT id, ended_at, outcome, COALESCE(output, ''), COALESCE(exit_code, 0), COALESCE(signal, '') FROM starts
		WHERE version = ? AND id > ? AND ended_at IS NOT NULL AND outcome IN ` + failureOutcomes()
	args := []any{version, after}
	if window > 0 {
		now := r.boot()
		q += ` AND boot_id = ? AND ended_boot_ns >= ? AND ended_boot_ns <= ?`
		args = append(args, now.ID, int64(now.Since-window), int64(now.Since))
	}
	rows, err := r.db.QueryContext(ctx, q+` ORDER BY id`, args...)
	if err != nil {
		return nil, r.wrap("read failures of "+version, err)
	}
	defer rows.Close()
	var out []Failure
	for rows.Next() {
		var f Failure
		var at sql.NullInt64
		var o string
		if err := rows.Scan(&f.Start, &at, &o, &f.Output, &f.ExitCode, &f.Signal); err != nil {
			return nil, r.wrap("read failures of "+version, err)
		}
		// Redacted as every output read back is: older records may name a bus password.
		f.At, f.Outcome, f.Output = fromUS(at), Outcome(o), text.Redact(f.Output)
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
