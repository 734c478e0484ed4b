package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// rescuesTable keeps every rescue (docs/decisions/0048): the local state set aside and derived
// again from the mesh. A row with ended_at NULL is a rescue still to run: the host's first
// reconcile of a declaration ends it, so a host stopped before that rescues on its next start.
const rescuesTable = `CREATE TABLE IF NOT EXISTS rescues (
	id          INTEGER PRIMARY KEY AUTOINCREMENT,
	reason      TEXT    NOT NULL,
	moved_to    TEXT    NOT NULL,
	began_at    INTEGER NOT NULL,
	ended_at    INTEGER,
	ok          INTEGER,
	adopted     INTEGER NOT NULL DEFAULT 0,
	changed     INTEGER NOT NULL DEFAULT 0,
	failed      INTEGER NOT NULL DEFAULT 0,
	not_adopted TEXT    NOT NULL DEFAULT '[]',
	set_aside   TEXT    NOT NULL DEFAULT '[]'
)`

// Rescue is one rescue as recorded. Ended is zero while it is still to run.
type Rescue struct {
	ID      int64
	Reason  string // why: "mesh-host rescue", or what was wrong with store.db
	MovedTo string // where the old local state went
	Began   time.Time
	Ended   time.Time
	OK      bool // the reconcile that ended it applied the whole declaration
	Adopted int  // resources found in their declared state and owned as they were
	Changed int  // resources created or changed to match
	Failed  int  // resources that could not be inspected or applied
	// NotAdopted names what could not be adopted (changed or failed), bounded by the writer.
	NotAdopted []string
	// SetAside names the versions whose binaries no longer matched their digests.
	SetAside []string
}

// BeginRescue records a rescue to run: the host's next reconcile of a declaration adopts what is
// in state and ends it (EndRescue). setAside names versions set aside already.
func (s *Store) BeginRescue(ctx context.Context, reason, movedTo string, setAside []string) error {
	aside, _ := json.Marshal(nonNil(setAside))
	_, err := s.db.ExecContext(ctx, `INSERT INTO rescues (reason, moved_to, began_at, set_aside) VALUES (?, ?, ?, ?)`,
		reason, movedTo, s.now().UnixMilli(), string(aside))
	return s.wrapCommit("record the rescue", err)
}

// PendingRescue is the rescue still to run, if any.
func (s *Store) PendingRescue(ctx context.Context) (Rescue, bool, error) {
	return s.rescue(ctx, `WHERE ended_at IS NULL ORDER BY id DESC LIMIT 1`)
}

// LastRescue is the newest rescue, ended or not.
func (s *Store) LastRescue(ctx context.Context) (Rescue, bool, error) {
	return s.rescue(ctx, `ORDER BY id DESC LIMIT 1`)
}

// EndRescue records how the pending rescue went: r's outcome, counts and names.
func (s *Store) EndRescue(ctx context.Context, r Rescue) error {
	na, _ := json.Marshal(nonNil(r.NotAdopted))
	_, err := s.db.ExecContext(ctx, `UPDATE rescues SET ended_at = ?, ok = ?, adopted = ?, changed = ?, failed = ?, not_adopted = ?
		WHERE ended_at IS NULL`, s.now().UnixMilli(), r.OK, r.Adopted, r.Changed, r.Failed, string(na))
	return s.wrapCommit("record the rescue's end", err)
}

func (s *Store) rescue(ctx context.Context, tail string) (Rescue, bool, error) {
	var r Rescue
	var began int64
	var ended sql.NullInt64
	var ok sql.NullBool
	var na, aside string
	err := s.db.QueryRowContext(ctx, `SELECT id, reason, moved_to, began_at, ended_at, ok, adopted, changed, failed, not_adopted, set_aside
		FROM rescues `+tail).Scan(&r.ID, &r.Reason, &r.MovedTo, &began, &ended, &ok, &r.Adopted, &r.Changed, &r.Failed, &na, &aside)
	if errors.Is(err, sql.ErrNoRows) {
		return Rescue{}, false, nil
	}
	if err != nil {
		return Rescue{}, false, s.wrap("read the rescues", err)
	}
	r.Began = time.UnixMilli(began)
	if ended.Valid {
		r.Ended = time.UnixMilli(ended.Int64)
	}
	r.OK = ok.Valid && ok.Bool
	_ = json.Unmarshal([]byte(na), &r.NotAdopted) // written by this file; a bad row reads as none
	_ = json.Unmarshal([]byte(aside), &r.SetAside)
	return r, true, nil
}

// CarryTrust copies into s what a store set aside knew of the signed values it accepted (their
// sequence numbers, so no older one is taken again) and the versions withdrawn, when that store
// can still be read. What it cannot read is left: the bus sends the current values again.
func (s *Store) CarryTrust(ctx context.Context, oldPath string) error {
	old, v, err := sqlitefile.OpenReadOnly(ctx, oldPath)
	if err != nil {
		return err
	}
	defer old.Close()
	if v < 1 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("carry the accepted values", err)
	}
	defer tx.Rollback()
	copyRows := func(sel, ins string, n int) error {
		rows, err := old.QueryContext(ctx, sel)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			vals := make([]any, n)
			ptrs := make([]any, n)
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, ins, vals...); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	if err := copyRows(`SELECT what, key, seq, signature, at FROM accepted`,
		`INSERT OR IGNORE INTO accepted (what, key, seq, signature, at) VALUES (?, ?, ?, ?, ?)`, 5); err != nil {
		return s.wrap("carry the accepted values", err)
	}
	if err := copyRows(`SELECT version, reason, at, seq FROM withdrawn`,
		`INSERT OR IGNORE INTO withdrawn (version, reason, at, seq) VALUES (?, ?, ?, ?)`, 4); err != nil {
		return s.wrap("carry the withdrawn versions", err)
	}
	return s.wrapCommit("carry the accepted values", tx.Commit())
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
