package rollback

import (
	"context"
	"database/sql"
	"math"
	"time"
)

// What records.db keeps (docs/design.md, "What the records keep"). A crash-looping host starts
// up to 1,440 times a day, each start with up to maxOutput of output; kept for ever that was
// gigabytes a year on the disk the node needs to recover. Every start now prunes, in the
// transaction that adds it, the starts of its version that no reader needs:
//
//   - the counting window: every failure the failure rule could still count — those that
//     ended within the policy's interval on this boot, and those after the boundary the rule
//     counts from for an unconfirmed version (the operator's last reset) or for the last
//     rollback's target (that rollback);
//   - the newest keepStarts starts of the version, whatever they were, its newest confirmed
//     start (whether the rollback target confirmed since) and its newest ended start;
//   - open starts (the running one; those a dead launcher left open until it is restarted).
//
// Output is kept only on the version's newest ended start (status's last output of a bad
// version) and its newest failure (the last failure status, STATUS= and reasons describe):
// nothing reads any other. Rollbacks keep their own copy of the failed output, and the newest
// keepRollbacks of them are kept. failures_total counts the failures pruned
// (versions.pruned_failures), so it stays what it was.
const (
	keepStarts    = 5
	keepRollbacks = 10  // the most any reader asks for (status)
	pruneBudget   = 500 // starts deleted by one start at most: a file grown before pruning drains a little at a time
)

// pruneSchema is the records schema that counts pruned failures.
const pruneSchema = 5

// SetPolicy tells the records the policy the launcher judges by, so that pruning keeps every
// failure within its interval. Without it, DefaultPolicy's interval is kept.
func (r *Records) SetPolicy(p Policy) {
	if p.Interval > 0 {
		r.window = p.Interval
	}
}

// pruneSQL is prune's statements, prepared once per Records: BeginStart is on the way from
// one host to the next (the stand-aside gap), and preparing them each time cost more than
// running them.
var pruneSQL = [...]string{
	// 0: what the version's starts and the failure rule's boundaries are now.
	`SELECT
		(SELECT id FROM starts WHERE version = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2),
		(SELECT MAX(id) FROM starts WHERE version = ?1 AND confirmed_at IS NOT NULL),
		(SELECT MAX(id) FROM starts WHERE version = ?1 AND ended_at IS NOT NULL),
		(SELECT MAX(id) FROM starts WHERE version = ?1 AND outcome IN ` + failureOutcomes() + `),
		(SELECT confirmed_at IS NOT NULL FROM versions WHERE version = ?1),
		(SELECT reset_after_start FROM launcher WHERE id = 1),
		(SELECT to_version FROM rollbacks ORDER BY id DESC LIMIT 1),
		COALESCE((SELECT after_start FROM rollbacks ORDER BY id DESC LIMIT 1), 0)`,
	// 1: output nothing reads: every ended start's but the newest's and the newest failure's.
	`UPDATE starts SET output = NULL WHERE version = ?1 AND output IS NOT NULL
		AND ended_at IS NOT NULL AND id IS NOT ?2 AND id IS NOT ?3`,
	// 2: the starts no reader needs, oldest first, at most ?8 of them; whether each was a failure.
	// A start with no boot reading (recorded before schema 2) never counts within the window.
	`DELETE FROM starts WHERE id IN (SELECT id FROM starts WHERE version = ?1 AND id <= ?2
		AND ended_at IS NOT NULL AND id IS NOT ?3 AND id IS NOT ?4
		AND NOT COALESCE(outcome IN ` + failureOutcomes() + ` AND (id > ?5 OR (boot_id = ?6 AND ended_boot_ns >= ?7)), 0)
		ORDER BY id LIMIT ?8)
		RETURNING COALESCE(outcome IN ` + failureOutcomes() + `, 0)`,
	// 3: the failures deleted, so failures_total stays all-time.
	`UPDATE versions SET pruned_failures = pruned_failures + ?2 WHERE version = ?1`,
}

// pruneStmt is pruneSQL[i], prepared on first use, in tx.
func (r *Records) pruneStmt(ctx context.Context, tx *sql.Tx, i int) (*sql.Stmt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pruneStmts[i] == nil {
		st, err := r.db.PrepareContext(ctx, pruneSQL[i])
		if err != nil {
			return nil, err
		}
		r.pruneStmts[i] = st
	}
	return tx.StmtContext(ctx, r.pruneStmts[i]), nil
}

// prune deletes the starts of version that no reader needs and the output nothing reads, in tx
// (BeginStart's, which has just added a start of version and holds the write lock).
func (r *Records) prune(ctx context.Context, tx *sql.Tx, version string) error {
	if r.unpruned || r.schema < pruneSchema {
		return nil // a newer host reading an older launcher's file never writes it this way
	}
	var st [len(pruneSQL)]*sql.Stmt
	for i := range st {
		var err error
		if st[i], err = r.pruneStmt(ctx, tx, i); err != nil {
			return err
		}
		defer st[i].Close() // the transaction's copy; the prepared one stays
	}
	var (
		cut, lastConfirmed, lastEnded, lastFailure sql.NullInt64
		confirmed                                  sql.NullBool
		reset, rbAfter                             int64
		rbTo                                       sql.NullString
	)
	err := st[0].QueryRowContext(ctx, version, keepStarts).Scan(&cut, &lastConfirmed, &lastEnded, &lastFailure, &confirmed, &reset, &rbTo, &rbAfter)
	if err != nil {
		return err
	}
	if _, err := st[1].ExecContext(ctx, version, lastEnded, lastFailure); err != nil {
		return err
	}
	if !cut.Valid || !confirmed.Valid {
		return nil // no more than keepStarts starts, or a version the records do not know
	}
	// Failures after countedAfter may count whatever the window: for an unconfirmed version,
	// all since the reset; for a confirmed one the last rollback went to and that has not
	// confirmed since (its newest confirmed start is kept, so that never turns back), all since
	// the rollback.
	countedAfter := int64(math.MaxInt64)
	switch {
	case !confirmed.Bool:
		countedAfter = reset
	case rbTo.Valid && rbTo.String == version && lastConfirmed.Int64 <= rbAfter:
		countedAfter = max(reset, rbAfter)
	}
	now := r.boot()
	rows, err := st[2].QueryContext(ctx, version, cut.Int64, lastConfirmed, lastEnded, countedAfter, now.ID, int64(now.Since-r.window), pruneBudget)
	if err != nil {
		return err
	}
	defer rows.Close()
	var failures int64
	for rows.Next() {
		var failure bool
		if err := rows.Scan(&failure); err != nil {
			return err
		}
		if failure {
			failures++
		}
	}
	if err := rows.Err(); err != nil || failures == 0 {
		return err
	}
	_, err = st[3].ExecContext(ctx, version, failures)
	return err
}

// pruneRollbacks keeps the newest keepRollbacks rollbacks, in tx (RecordRollback's).
func (r *Records) pruneRollbacks(ctx context.Context, tx *sql.Tx) error {
	if r.unpruned {
		return nil
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM rollbacks WHERE id <= (SELECT id FROM rollbacks ORDER BY id DESC LIMIT 1 OFFSET ?)`, keepRollbacks)
	return err
}

// defaultWindow is the interval pruning keeps failures within until SetPolicy says otherwise.
const defaultWindow = 120 * time.Second
