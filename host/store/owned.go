package store

import (
	"context"
	"fmt"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/sqlitefile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// The owned table is the host's ledger (apply.Ledger): each resource it applied and read back,
// the spec it last applied, whether the host created it (only then may it remove it), and seq,
// the order it was first applied in (removal runs in reverse). It is an addition (see
// additions): an older host ignores it.
const ownedTable = `CREATE TABLE IF NOT EXISTS owned (
		type       TEXT    NOT NULL,
		id         TEXT    NOT NULL,
		spec       BLOB    NOT NULL,
		created    INTEGER NOT NULL,
		seq        INTEGER NOT NULL,
		applied_at INTEGER NOT NULL,
		PRIMARY KEY (type, id)
	)`

var _ apply.Ledger = (*Store)(nil)

// Owned returns every resource the host owns, in the order first applied, specs parsed. A spec
// that no longer parses (written by another version) is returned with Parsed nil: the engine
// keeps such a resource rather than removing what it cannot read.
func (s *Store) Owned(ctx context.Context) ([]apply.Owned, error) {
	out, err := s.OwnedUnparsed(ctx)
	for i := range out {
		if p, err := apply.ParseSpec(out[i].Type, out[i].ID, out[i].Spec); err == nil {
			out[i].Parsed = p
		}
	}
	return out, err
}

// OwnedUnparsed is Owned with Parsed left nil: the engine's drift check compares raw specs
// and parses only what it removes.
func (s *Store) OwnedUnparsed(ctx context.Context) ([]apply.Owned, error) {
	if s.noOwned {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT type, id, spec, created, seq, applied_at FROM owned ORDER BY seq`)
	if err != nil {
		return nil, s.wrap("read owned resources", err)
	}
	defer rows.Close()
	var out []apply.Owned
	for rows.Next() {
		var o apply.Owned
		var at int64
		if err := rows.Scan(&o.Type, &o.ID, &o.Spec, &o.Created, &o.Seq, &at); err != nil {
			return nil, s.wrap("read owned resources", err)
		}
		o.AppliedAt = time.UnixMilli(at)
		out = append(out, o)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("read owned resources", err)
	}
	return out, nil
}

// Record notes, in one statement, that r was applied and read back at at: a new resource gets
// the next seq and created; one already owned keeps its seq and created flag and takes r's spec.
func (s *Store) Record(ctx context.Context, r wire.Resource, created bool, at time.Time) error {
	spec := r.Spec
	if len(spec) == 0 {
		spec = []byte("{}")
	}
	_, err := s.db.ExecContext(ctx, recordOwned, r.Type, r.ID, []byte(spec), created, at.UnixMilli())
	if err != nil {
		return s.wrap(fmt.Sprintf("record %s %q as owned", r.Type, text.Bound(r.ID)), err)
	}
	return nil
}

var _ apply.BatchLedger = (*Store)(nil)

// RecordAll records each of rs as Record does, in one transaction: one commit (one sync of the
// file) for a run of resources the engine applied together. On error none is recorded.
func (s *Store) RecordAll(ctx context.Context, rs []apply.Applied) error {
	if len(rs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("record resources as owned", err)
	}
	defer tx.Rollback()
	// The next seq read once for the run, not once per row (a scan of the table each): a new
	// resource takes it and the ones after it in order, gaps left by the ones already owned.
	var next int64
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(seq), 0) + 1 FROM owned`).Scan(&next); err != nil {
		return s.wrap("record resources as owned", err)
	}
	for i, a := range rs {
		spec := a.Resource.Spec
		if len(spec) == 0 {
			spec = []byte("{}")
		}
		if _, err := tx.ExecContext(ctx, recordOwnedAt, a.Resource.Type, a.Resource.ID, []byte(spec), a.Created, next+int64(i), a.At.UnixMilli()); err != nil {
			return s.wrap(fmt.Sprintf("record %s %q as owned", a.Resource.Type, text.Bound(a.Resource.ID)), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return s.wrap("record resources as owned", err)
	}
	return nil
}

// recordOwned is Record's statement: a new resource gets the next seq and created; one already
// owned keeps its seq and created flag and takes the new spec.
const recordOwned = `INSERT INTO owned (type, id, spec, created, seq, applied_at)
		VALUES (?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM owned), ?)
		ON CONFLICT (type, id) DO UPDATE SET spec = excluded.spec, applied_at = excluded.applied_at`

// recordOwnedAt is recordOwned with the seq a new resource gets given.
const recordOwnedAt = `INSERT INTO owned (type, id, spec, created, seq, applied_at) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (type, id) DO UPDATE SET spec = excluded.spec, applied_at = excluded.applied_at`

// Drop forgets an owned resource (removed or forgotten); one not owned is no error.
func (s *Store) Drop(ctx context.Context, typ, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM owned WHERE type = ? AND id = ?`, typ, id); err != nil {
		return s.wrap(fmt.Sprintf("drop %s %q from owned", typ, text.Bound(id)), err)
	}
	return nil
}

// OwnedCount counts what the host owns, by type (AppliedAt is left for the caller).
func (s *Store) OwnedCount(ctx context.Context) (wire.OwnedCount, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT type, COUNT(*) FROM owned GROUP BY type`)
	if err != nil {
		return wire.OwnedCount{}, s.wrap("count owned resources", err)
	}
	defer rows.Close()
	c := wire.OwnedCount{ByType: map[string]int{}}
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			return wire.OwnedCount{}, s.wrap("count owned resources", err)
		}
		c.ByType[typ] = n
		c.Total += n
	}
	if err := rows.Err(); err != nil {
		return wire.OwnedCount{}, s.wrap("count owned resources", err)
	}
	return c, nil
}

// LastApplied is when a reconcile last completed with every resource applied; ok is false
// when none has (within the kept history).
func (s *Store) LastApplied(ctx context.Context) (at time.Time, ok bool, err error) {
	var ms *int64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(ended_at) FROM reconciles WHERE ok = 1`).Scan(&ms); err != nil {
		return time.Time{}, false, s.wrap("read the last complete reconcile", err)
	}
	if ms == nil {
		return time.Time{}, false, nil
	}
	return time.UnixMilli(*ms), true, nil
}

// OpenReadOnly opens the store at path for reading only, for `mesh-host plan` and `owned`,
// which may run beside a running host: it migrates nothing and closes no reconcile (Open would
// mark the host's running one interrupted). A store with no owned table yet owns nothing.
func OpenReadOnly(ctx context.Context, path string) (*Store, error) {
	db, v, err := sqlitefile.OpenReadOnly(ctx, path)
	if err != nil {
		return nil, wrap(path, "open", err)
	}
	if v > SchemaVersion {
		db.Close()
		return nil, fmt.Errorf("store %s has schema version %d, newer than this host understands (%d)", path, v, SchemaVersion)
	}
	s := &Store{db: db, path: path, now: time.Now}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'owned'`).Scan(&n); err != nil {
		db.Close()
		return nil, s.wrap("look for the owned table", err)
	}
	s.noOwned = n == 0
	return s, nil
}
