package rollback

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// SchemaVersion is the records schema this build knows. Changes are additive only: a newer
// host reads a file an older launcher made, and never migrates it.
const SchemaVersion = 2

// migrations[i] takes the schema from version i to i+1.
var migrations = []string{
	`CREATE TABLE versions (
		version       TEXT PRIMARY KEY,
		digest        TEXT NOT NULL,      -- sha256:… of versions/<v>/mesh-host when first seen
		first_seen    INTEGER NOT NULL,   -- unix microseconds, as every time here
		first_started INTEGER,
		confirmed_at  INTEGER,            -- first completed reconcile: known-good from then on
		bad_at        INTEGER,
		bad_reason    TEXT
	);
	CREATE TABLE starts (
		id           INTEGER PRIMARY KEY,
		version      TEXT NOT NULL,
		pid          INTEGER,
		started_at   INTEGER NOT NULL,
		confirmed_at INTEGER,             -- this start completed a reconcile
		ended_at     INTEGER,
		exit_code    INTEGER,
		signal       TEXT,
		outcome      TEXT,                -- stood-aside, failed, deadline, stopped, interrupted
		output       TEXT                 -- the last lines the process wrote to stderr
	);
	CREATE INDEX starts_version ON starts(version, ended_at);
	CREATE TABLE rollbacks (
		id     INTEGER PRIMARY KEY,
		from_version TEXT NOT NULL,
		to_version   TEXT NOT NULL,
		at     INTEGER NOT NULL,
		reason TEXT NOT NULL,
		output TEXT
	);
	CREATE TABLE launcher (
		id            INTEGER PRIMARY KEY CHECK (id = 1),
		failed        INTEGER NOT NULL DEFAULT 0,
		failed_reason TEXT,
		failed_at     INTEGER,
		reset_at      INTEGER,            -- an operator restarted the launcher out of its failed state
		note          TEXT                -- something the operator should know, e.g. a recovery
	);
	INSERT INTO launcher (id) VALUES (1);`,

	// 2: failures are counted by the order of starts and the boot clock, not by wall-clock
	// times (docs/decisions/0001-failure-counting.md). Rows from schema 1 get the newest start
	// that began before them; their starts have no boot and never count within an interval.
	`ALTER TABLE starts ADD COLUMN boot_id TEXT;
	ALTER TABLE starts ADD COLUMN ended_boot_ns INTEGER;  -- CLOCK_BOOTTIME when it ended, on boot_id
	ALTER TABLE rollbacks ADD COLUMN after_start INTEGER NOT NULL DEFAULT 0; -- the newest start when it happened
	ALTER TABLE launcher ADD COLUMN reset_after_start INTEGER NOT NULL DEFAULT 0; -- the same, for reset_at
	UPDATE rollbacks SET after_start = (SELECT COALESCE(MAX(id), 0) FROM starts WHERE started_at <= rollbacks.at);
	UPDATE launcher SET reset_after_start = (SELECT COALESCE(MAX(id), 0) FROM starts WHERE started_at <= launcher.reset_at)
		WHERE reset_at IS NOT NULL;`,
}

// Records is ROOT/records.db.
type Records struct {
	db   *sql.DB
	path string
	now  func() time.Time // the wall clock: times in the records are for people
	boot func() Boot      // the boot clock: what failure counting compares

	mu     sync.Mutex
	hashes map[fileKey]string // binary digests by file identity, so Choose hashes each file once
}

// ErrCorrupt is wrapped by errors about a records.db that is not a readable SQLite database.
var ErrCorrupt = errors.New("records database is corrupt")

// OpenForLauncher opens ROOT/records.db, creating or migrating its schema. A file that is not a
// SQLite database is moved aside to records.db.corrupt-<time> and a fresh one is made; the
// returned note says so (it is also kept in the records), and nothing under versions/ is touched.
func OpenForLauncher(ctx context.Context, root string) (r *Records, note string, err error) {
	path := RecordsPath(root)
	if err := PrepareRoot(root); err != nil {
		return nil, "", err
	}
	if err := PrivateDB(path); err != nil {
		return nil, "", fmt.Errorf("records: %w", err)
	}
	r, err = open(ctx, path)
	if err == nil {
		err = r.migrate(ctx)
		if err != nil {
			r.Close()
		}
	}
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return r, "", err
	}
	aside := fmt.Sprintf("%s.corrupt-%s", path, time.Now().UTC().Format("20060102T150405.000"))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if rerr := os.Rename(path+suffix, aside+suffix); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return nil, "", fmt.Errorf("%w; moving it aside also failed: %v — move %s away by hand; the versions under %s are intact", err, rerr, path, VersionsDir(root))
		}
	}
	note = fmt.Sprintf("%s was not a readable SQLite database (moved aside to %s); versions are intact, but which were confirmed or bad is forgotten, so the newest version runs on trial", path, aside)
	if err := PrivateDB(path); err != nil {
		return nil, "", fmt.Errorf("after moving a corrupt records.db aside: records: %w", err)
	}
	r, err = open(ctx, path)
	if err == nil {
		err = r.migrate(ctx)
	}
	if err != nil {
		return nil, "", fmt.Errorf("after moving a corrupt records.db aside: %w", err)
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE launcher SET note = ? WHERE id = 1`, note); err != nil {
		return nil, "", fmt.Errorf("record recovery note in %s: %w", path, err)
	}
	return r, note, nil
}

// OpenForHost opens the records the launcher made, without migrating them.
func OpenForHost(ctx context.Context, root string) (*Records, error) {
	path := RecordsPath(root)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("records %s: %w (mesh-launcher creates it: run mesh-host through mesh-launcher)", path, err)
	}
	r, err := open(ctx, path)
	if err != nil {
		return nil, err
	}
	v, err := r.schemaVersion(ctx)
	if err != nil {
		r.Close()
		return nil, err
	}
	if v < 1 {
		r.Close()
		return nil, fmt.Errorf("records %s has no schema yet (mesh-launcher creates it: run mesh-host through mesh-launcher)", path)
	}
	return r, nil
}

// OpenForStatus opens the records to read them; it never creates or migrates anything.
func OpenForStatus(ctx context.Context, root string) (*Records, error) { return OpenForHost(ctx, root) }

func open(ctx context.Context, path string) (*Records, error) {
	dsn := "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open records %s: %w", path, err)
	}
	r := &Records{db: db, path: path, now: time.Now, boot: bootClock(), hashes: map[fileKey]string{}}
	if _, err := r.schemaVersion(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return r, nil
}

func (r *Records) schemaVersion(ctx context.Context) (int, error) {
	var v int
	if err := r.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return 0, r.wrap("read schema version", err)
	}
	return v, nil
}

func (r *Records) migrate(ctx context.Context) error {
	v, err := r.schemaVersion(ctx)
	if err != nil {
		return err
	}
	if v > SchemaVersion {
		return nil // a newer launcher made it; additive, so this one can use what it knows
	}
	for ; v < SchemaVersion; v++ {
		tx, err := r.db.BeginTx(ctx, nil)
		if err != nil {
			return r.wrap("migrate", err)
		}
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			tx.Rollback()
			return r.wrap(fmt.Sprintf("migrate schema %d→%d", v, v+1), err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
			tx.Rollback()
			return r.wrap("migrate", err)
		}
		if err := tx.Commit(); err != nil {
			return r.wrap("migrate", err)
		}
	}
	return nil
}

// wrap names the file in every database error, and marks corruption so the launcher can recover.
func (r *Records) wrap(what string, err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
			return fmt.Errorf("records %s: %s: %w: %w", r.path, what, ErrCorrupt, err)
		}
	}
	return fmt.Errorf("records %s: %s: %w", r.path, what, err)
}

// Close closes the database.
func (r *Records) Close() error { return r.db.Close() }

// Path is the records file's path.
func (r *Records) Path() string { return r.path }

func us(t time.Time) int64 { return t.UnixMicro() }

func fromUS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64)
}
