// Package store is the host's own memory, ROOT/store.db.
//
// It keeps the declaration it holds and its revision, the declarations it refused, every reconcile
// it ran, the highest sequence number of each signed value it accepted (targets, the withdrawal
// list) and the versions withdrawn. The host owns this file; nothing else writes it. It lets a host
// restarted without the bus reconcile what it held, refuse a replayed target, and keep a withdrawn
// version out.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/novox/mesh-host/internal/sqlitefile"
	"github.com/novox/mesh-host/wire"
)

// FileName is the store's file name under the host's root.
const FileName = "store.db"

// keepHistory is how many reconciles and refusals are kept; older rows are pruned.
const keepHistory = 1000

// SchemaVersion is the newest schema this package writes (PRAGMA user_version): one per
// migration.
const SchemaVersion = 1

// migrations[v] moves the schema from version v to v+1.
var migrations = [SchemaVersion]string{
	`CREATE TABLE held (
		id          INTEGER PRIMARY KEY CHECK (id = 1),
		declaration BLOB    NOT NULL,
		revision    INTEGER NOT NULL,
		held_at     INTEGER NOT NULL
	);
	CREATE TABLE refusals (
		id       INTEGER PRIMARY KEY AUTOINCREMENT,
		what     TEXT    NOT NULL,
		revision INTEGER NOT NULL,
		reason   TEXT    NOT NULL,
		at       INTEGER NOT NULL
	);
	CREATE TABLE reconciles (
		id         INTEGER PRIMARY KEY AUTOINCREMENT,
		trigger    TEXT    NOT NULL,
		started_at INTEGER NOT NULL,
		ended_at   INTEGER,
		ok         INTEGER,
		error      TEXT    NOT NULL DEFAULT ''
	);`,
}

// additions are tables added after schema 1 without raising the schema version, created at
// every open when missing. A host steps down to an older version (a rollback, a withdrawal), and
// an older host refuses a store whose schema is newer than it knows: raising the version for a
// table an older host simply ignores would stop the very step down that must work. So a change
// an older host can ignore (a new table) is an addition; only a change it cannot ignore raises
// SchemaVersion.
var additions = []string{
	// The newest signed value accepted per (what, key): what is "target" (key node.<id> or
	// fleet) or "withdrawals" (key list). seq is the uint64 sequence number stored as its
	// int64 bit pattern and compared in Go.
	`CREATE TABLE IF NOT EXISTS accepted (
		what      TEXT    NOT NULL,
		key       TEXT    NOT NULL,
		seq       INTEGER NOT NULL,
		signature TEXT    NOT NULL,
		at        INTEGER NOT NULL,
		PRIMARY KEY (what, key)
	)`,
	// Every version withdrawn by an accepted list, kept when a later list leaves it out (a
	// withdrawal is never undone): the reason and time of its first withdrawal.
	`CREATE TABLE IF NOT EXISTS withdrawn (
		version TEXT    PRIMARY KEY,
		reason  TEXT    NOT NULL,
		at      TEXT    NOT NULL,
		seq     INTEGER NOT NULL
	)`,
	ownedTable,   // the host's ledger: owned.go
	rescuesTable, // the rescues: rescue.go
}

// ErrCorrupt is wrapped by errors about a store.db that is not a readable SQLite database.
var ErrCorrupt = errors.New("store database is corrupt")

// ErrNewerSchema is wrapped by the error about a store.db of a schema this host cannot read.
var ErrNewerSchema = errors.New("store schema is newer than this host understands")

// Store is ROOT/store.db.
type Store struct {
	db      *sql.DB
	path    string
	now     func() time.Time
	noOwned bool // opened read-only before any host made the owned table
}

// Reconcile is one reconcile as recorded. Ended is zero while it runs.
type Reconcile struct {
	ID      int64
	Trigger wire.Trigger
	Started time.Time
	Ended   time.Time
	OK      bool
	Error   string
}

// Duration is how long the reconcile took (zero while it runs).
func (r Reconcile) Duration() time.Duration {
	if r.Ended.IsZero() {
		return 0
	}
	return r.Ended.Sub(r.Started)
}

// Wire is the reconcile as a heartbeat reports it.
func (r Reconcile) Wire() *wire.LastReconcile {
	return &wire.LastReconcile{At: r.Ended.UTC(), Trigger: r.Trigger, OK: r.OK, Error: r.Error, DurationMS: r.Duration().Milliseconds()}
}

// Refusal is a declaration (or target) the host refused.
type Refusal struct {
	What     string
	Revision uint64
	Reason   string
	At       time.Time
}

// Wire is the refusal as a heartbeat reports it.
func (r Refusal) Wire() *wire.Refusal {
	return &wire.Refusal{What: r.What, Revision: r.Revision, Error: r.Reason, At: r.At.UTC()}
}

// Open opens the store at path, creating or migrating it. A reconcile left running by a host
// that stopped mid-way is closed as failed ("interrupted"). A file that is not a SQLite
// database yields an error wrapping ErrCorrupt that names the file and the fix.
func Open(ctx context.Context, path string) (*Store, error) {
	// The store keeps what the host applied, file contents among it: Create makes it 0600, with
	// its -wal and -shm.
	db, found, err := sqlitefile.Create(ctx, path, migrations[:])
	if err != nil {
		return nil, wrap(path, "open", err)
	}
	if found > SchemaVersion {
		db.Close()
		return nil, fmt.Errorf("store %s has schema version %d (this host reads up to %d): %w: run the newer mesh-host, or `mesh-host rescue` to set it aside and derive the store again from the bus", path, found, SchemaVersion, ErrNewerSchema)
	}
	s := &Store{db: db, path: path, now: time.Now}
	for _, q := range additions {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, s.wrap("add tables", err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE reconciles SET ended_at = started_at, ok = 0,
		error = 'interrupted: the host stopped during this reconcile' WHERE ended_at IS NULL`); err != nil {
		db.Close()
		return nil, s.wrap("close interrupted reconciles", err)
	}
	return s, nil
}

// wrap names the file in every database error, and marks corruption with the fix.
func (s *Store) wrap(what string, err error) error { return wrap(s.path, what, err) }

func wrap(path, what string, err error) error {
	if sqlitefile.IsCorrupt(err) {
		return fmt.Errorf("store %s is not a readable SQLite database (%s): %w: %w — stop the host and move %s aside (store.MoveAside does it); the host then starts with an empty store and takes its declaration from the bus again",
			path, what, ErrCorrupt, err, path)
	}
	return fmt.Errorf("store %s: %s: %w", path, what, err)
}

// MoveAside renames a corrupt store at path (and its -wal and -shm files) to
// <path>.corrupt-<UTC time> and returns the new name, so that Open makes a fresh one.
func MoveAside(path string, now time.Time) (string, error) {
	aside, err := sqlitefile.MoveAside(path, now)
	if err != nil {
		return "", fmt.Errorf("%w; move it away by hand", err)
	}
	return aside, nil
}

// Path is the store's file path.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Held returns the declaration the host holds and its KV revision; ok is false when it holds
// none yet.
func (s *Store) Held(ctx context.Context) (decl []byte, revision uint64, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT declaration, revision FROM held WHERE id = 1`).Scan(&decl, &revision)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, s.wrap("read the held declaration", err)
	}
	return decl, revision, true, nil
}

// Hold replaces the held declaration with decl at revision, atomically: a crash leaves either
// the old one or the new one.
func (s *Store) Hold(ctx context.Context, decl []byte, revision uint64) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO held (id, declaration, revision, held_at) VALUES (1, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET declaration = excluded.declaration, revision = excluded.revision, held_at = excluded.held_at`,
		decl, int64(revision), s.now().UnixMilli())
	if err != nil {
		return s.wrap("hold declaration", err)
	}
	return nil
}

// RecordRefusal records that the declaration (what = "declaration"), target ("target") or
// withdrawal list ("withdrawals") at revision was refused, and why. The held declaration is
// untouched.
func (s *Store) RecordRefusal(ctx context.Context, what string, revision uint64, reason string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("record refusal", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO refusals (what, revision, reason, at) VALUES (?, ?, ?, ?)`,
		what, int64(revision), reason, s.now().UnixMilli())
	if err != nil {
		return s.wrap("record refusal", err)
	}
	id, _ := res.LastInsertId()
	if _, err := tx.ExecContext(ctx, `DELETE FROM refusals WHERE id <= ?`, id-keepHistory); err != nil {
		return s.wrap("prune refusals", err)
	}
	return s.wrapCommit("record refusal", tx.Commit())
}

// SettleRefusals forgets the refusals of what at revisions up to through: what they refused was
// replaced by, or put right in, the value at through, which the host took. The heartbeat reports
// the last refusal, and one no longer true must not stay in it.
func (s *Store) SettleRefusals(ctx context.Context, what string, through uint64) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM refusals WHERE what = ? AND revision <= ?`, what, int64(through)); err != nil {
		return s.wrap("settle refusals", err)
	}
	return nil
}

// LastRefusal returns the most recent refusal; ok is false when there is none.
func (s *Store) LastRefusal(ctx context.Context) (r Refusal, ok bool, err error) {
	var rev, at int64
	err = s.db.QueryRowContext(ctx, `SELECT what, revision, reason, at FROM refusals ORDER BY id DESC LIMIT 1`).Scan(&r.What, &rev, &r.Reason, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Refusal{}, false, nil
	}
	if err != nil {
		return Refusal{}, false, s.wrap("read the last refusal", err)
	}
	r.Revision, r.At = uint64(rev), time.UnixMilli(at)
	return r, true, nil
}

// BeginReconcile records that a reconcile started for trigger and returns its id for
// EndReconcile.
func (s *Store) BeginReconcile(ctx context.Context, trigger wire.Trigger) (int64, error) {
	if !trigger.Known() {
		return 0, fmt.Errorf("store: unknown reconcile trigger %q", trigger)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.wrap("record reconcile start", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO reconciles (trigger, started_at) VALUES (?, ?)`, trigger, s.now().UnixMilli())
	if err != nil {
		return 0, s.wrap("record reconcile start", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, s.wrap("record reconcile start", err)
	}
	// Pruned here as well as at the end: a host that crashes during every reconcile never
	// ends one, and would add a row per start for ever.
	if _, err := tx.ExecContext(ctx, `DELETE FROM reconciles WHERE id <= ?`, id-keepHistory); err != nil {
		return 0, s.wrap("prune reconciles", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, s.wrap("record reconcile start", err)
	}
	return id, nil
}

// EndReconcile records how reconcile id ended; errText is empty when ok.
func (s *Store) EndReconcile(ctx context.Context, id int64, ok bool, errText string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("record reconcile end", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE reconciles SET ended_at = ?, ok = ?, error = ? WHERE id = ? AND ended_at IS NULL`,
		s.now().UnixMilli(), ok, errText, id)
	if err != nil {
		return s.wrap("record reconcile end", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("store %s: reconcile %d is not running (never begun, or already ended)", s.path, id)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM reconciles WHERE id <= ?`, id-keepHistory); err != nil {
		return s.wrap("prune reconciles", err)
	}
	return s.wrapCommit("record reconcile end", tx.Commit())
}

// LastReconcile returns the most recent reconcile that ended; ok is false before the first.
func (s *Store) LastReconcile(ctx context.Context) (r Reconcile, ok bool, err error) {
	rs, err := s.reconciles(ctx, `WHERE ended_at IS NOT NULL ORDER BY id DESC LIMIT 1`)
	if err != nil || len(rs) == 0 {
		return Reconcile{}, false, err
	}
	return rs[0], true, nil
}

// Reconciles returns up to limit reconciles, newest first, including one still running.
func (s *Store) Reconciles(ctx context.Context, limit int) ([]Reconcile, error) {
	return s.reconciles(ctx, `ORDER BY id DESC LIMIT ?`, limit)
}

func (s *Store) reconciles(ctx context.Context, tail string, args ...any) ([]Reconcile, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, trigger, started_at, ended_at, ok, error FROM reconciles `+tail, args...)
	if err != nil {
		return nil, s.wrap("read reconciles", err)
	}
	defer rows.Close()
	var out []Reconcile
	for rows.Next() {
		var r Reconcile
		var started int64
		var ended sql.NullInt64
		var ok sql.NullBool
		if err := rows.Scan(&r.ID, &r.Trigger, &started, &ended, &ok, &r.Error); err != nil {
			return nil, s.wrap("read reconciles", err)
		}
		r.Started = time.UnixMilli(started)
		if ended.Valid {
			r.Ended = time.UnixMilli(ended.Int64)
		}
		r.OK = ok.Valid && ok.Bool
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("read reconciles", err)
	}
	return out, nil
}

func (s *Store) wrapCommit(what string, err error) error {
	if err != nil {
		return s.wrap(what, err)
	}
	return nil
}
