package rollback

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// recordsSchema is the records schema this build knows. Changes are additive only: a newer host
// reads a file an older launcher made, and never migrates it; a launcher uses a file a newer one
// made as far as it knows it.
const recordsSchema = 6

// migrations[i] takes the schema from version i to i+1.
var migrations = [recordsSchema]string{
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

	// 3: where each version came from (docs/decisions/0008-install-and-provenance.md). Versions
	// recorded before keep NULL: not recorded.
	`ALTER TABLE versions ADD COLUMN source TEXT;          -- installed, delivered, found
	ALTER TABLE versions ADD COLUMN signed_by TEXT;       -- delivered: the key id that signed its manifest
	ALTER TABLE versions ADD COLUMN installed_from TEXT;  -- installed: the file it was copied from`,

	// 4: the proof that a binary was verified, so a version is not hashed again between its
	// predecessor's exit and its own exec (docs/decisions/0013-a-verified-binary-is-not-hashed-again.md).
	// NULL: hash it.
	`ALTER TABLE versions ADD COLUMN verified_as TEXT;     -- the binary's file identity and boot when its bytes last matched digest`,
	// 5: each start prunes the starts of its version no reader needs (prune.go); the failures
	// it deletes are counted here, so failures_total stays all-time. The index serves the
	// newest-first reads of one version's starts that pruning makes.
	`ALTER TABLE versions ADD COLUMN pruned_failures INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX starts_version_id ON starts(version, id);`,
	// 6: launcher versions delivered by the mesh under ROOT/launchers, each on trial until it has
	// run a host, and the launcher image the unit runs now, so the next start of the unit can
	// judge one that ended without saying so (launchers.go; docs/design.md). Additive: a launcher
	// older than this schema ignores what it does not know.
	`CREATE TABLE launchers (
		version      TEXT PRIMARY KEY,
		digest       TEXT NOT NULL,       -- sha256:… of launchers/<v>/mesh-launcher when first seen
		size         INTEGER NOT NULL DEFAULT 0,
		first_seen   INTEGER NOT NULL,
		source       TEXT,                -- delivered, installed, found
		signed_by    TEXT,
		carried_by   TEXT,                -- the host release whose archive carried it
		confirmed_at INTEGER,             -- it adopted or started a host and saw it pulse
		bad_at       INTEGER,
		bad_reason   TEXT,
		bad_output   TEXT
	);
	CREATE TABLE launcher_rollbacks (
		id           INTEGER PRIMARY KEY,
		from_version TEXT NOT NULL,
		to_version   TEXT NOT NULL,       -- a launcher version, or the floor's
		at           INTEGER NOT NULL,
		reason       TEXT NOT NULL,
		output       TEXT
	);
	ALTER TABLE launcher ADD COLUMN current_version TEXT;    -- the launcher image the unit runs (or last ran)
	ALTER TABLE launcher ADD COLUMN current_floor INTEGER NOT NULL DEFAULT 0;  -- 1: that image is the floor
	ALTER TABLE launcher ADD COLUMN current_trial INTEGER NOT NULL DEFAULT 0;  -- 1: it is on trial
	ALTER TABLE launcher ADD COLUMN current_since INTEGER;
	ALTER TABLE launcher ADD COLUMN current_boot TEXT;
	ALTER TABLE launcher ADD COLUMN current_ended INTEGER NOT NULL DEFAULT 0;  -- 1: it ended as a launcher should
	ALTER TABLE launcher ADD COLUMN current_failures INTEGER NOT NULL DEFAULT 0; -- its ends the next start had to judge, in a row
	ALTER TABLE launcher ADD COLUMN floor_version TEXT;      -- the package's launcher, as the last fresh start found it
	ALTER TABLE launcher ADD COLUMN floor_path TEXT;
	ALTER TABLE launcher ADD COLUMN unit_started_at INTEGER; -- the last start of the unit (not an exec)
	ALTER TABLE launcher ADD COLUMN floor_pinned TEXT;       -- why the floor runs though newer launchers are on disk
	ALTER TABLE launcher ADD COLUMN floor_pinned_upto TEXT;  -- launchers up to this version stay passed over while it does
	ALTER TABLE launcher ADD COLUMN current_confirmed INTEGER NOT NULL DEFAULT 0; -- 1: that image has seen its host pulse
	ALTER TABLE launcher ADD COLUMN unit_exit TEXT;          -- systemd's word on how the unit's process last ended (ExecStopPost)
	ALTER TABLE launcher ADD COLUMN unit_exit_at INTEGER;
	ALTER TABLE launcher ADD COLUMN unit_file_digest TEXT;   -- sha256 of the unit file as the unit's last start found it`,
}

// Records is ROOT/records.db.
type Records struct {
	db     *sql.DB
	path   string
	schema int              // the file's schema: what it can hold (a host may open an older launcher's)
	now    func() time.Time // the wall clock: times in the records are for people
	boot   func() bootTime  // the boot clock: what failure counting compares
	window time.Duration    // the policy's interval: pruning keeps the failures within it (SetPolicy)
	// unpruned keeps every start (tests compare pruned records with unpruned ones).
	unpruned bool

	mu         sync.Mutex
	hashes     map[fileKey]string // binary digests by file identity, so Choose hashes each file once
	hashed     int                // binaries read whole to hash them (the tests count them)
	pruneStmts [len(pruneSQL)]*sql.Stmt
}

// ErrCorrupt is wrapped by errors about a records.db that is not a readable SQLite database.
var ErrCorrupt = errors.New("records database is corrupt")

// OpenForLauncher opens ROOT/records.db, creating or migrating its schema. A file that is not a
// SQLite database is moved aside to records.db.corrupt-<time> and a fresh one is made; the
// returned note says so (it is also kept in the records), and nothing under versions/ is touched.
func OpenForLauncher(ctx context.Context, root string) (r *Records, note string, err error) {
	path := RecordsPath(root)
	if err := prepareRoot(root); err != nil {
		return nil, "", err
	}
	r, err = create(ctx, path)
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return r, "", err
	}
	aside, merr := sqlitefile.MoveAside(path, time.Now())
	if merr != nil {
		return nil, "", fmt.Errorf("%w; %w — move %s away by hand; the versions under %s are intact", err, merr, path, VersionsDir(root))
	}
	note = fmt.Sprintf("%s was not a readable SQLite database (moved aside to %s); versions are intact, but which were confirmed or bad is forgotten, so the newest version runs on trial", path, aside)
	if r, err = create(ctx, path); err != nil {
		return nil, "", fmt.Errorf("after moving a corrupt records.db aside: %w", err)
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE launcher SET note = ? WHERE id = 1`, note); err != nil {
		r.Close()
		return nil, "", fmt.Errorf("record recovery note in %s: %w", path, err)
	}
	return r, note, nil
}

// OpenForInstall opens ROOT/records.db for `mesh-launcher install`, creating or migrating it as
// the launcher does (the package installs before the unit first starts). A launcher may be
// running on the root meanwhile, and may hold the file open, so a corrupt one is not moved
// aside here: the error says that `mesh-launcher run` does it.
func OpenForInstall(ctx context.Context, root string) (*Records, error) {
	if err := prepareRoot(root); err != nil {
		return nil, err
	}
	r, err := create(ctx, RecordsPath(root))
	if errors.Is(err, ErrCorrupt) {
		return nil, fmt.Errorf("%w\n`mesh-launcher run` moves a corrupt records.db aside and starts fresh records; install again after it did", err)
	}
	return r, err
}

// create opens the records at path as their owner, making or migrating the schema.
func create(ctx context.Context, path string) (*Records, error) {
	db, found, err := sqlitefile.Create(ctx, path, migrations[:])
	if err != nil {
		return nil, wrap(path, "open", err)
	}
	return newRecords(db, path, max(found, recordsSchema)), nil
}

// OpenForHost opens the records the launcher made, to read them or add rows, without creating
// or migrating anything: the host and `mesh-launcher status` use it.
func OpenForHost(ctx context.Context, root string) (*Records, error) {
	path := RecordsPath(root)
	db, v, err := sqlitefile.Open(ctx, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("records %s: %w (mesh-launcher creates it: run mesh-host through mesh-launcher)", path, err)
	}
	if err != nil {
		return nil, wrap(path, "open", err)
	}
	if v < 1 {
		db.Close()
		return nil, fmt.Errorf("records %s has no schema yet (mesh-launcher creates it: run mesh-host through mesh-launcher)", path)
	}
	return newRecords(db, path, v), nil
}

func newRecords(db *sql.DB, path string, schema int) *Records {
	return &Records{db: db, path: path, schema: schema, now: time.Now, boot: bootClock(), window: defaultWindow, hashes: map[fileKey]string{}}
}

// wrap names the file in every database error, and marks corruption so the launcher can recover.
func (r *Records) wrap(what string, err error) error { return wrap(r.path, what, err) }

func wrap(path, what string, err error) error {
	if sqlitefile.IsCorrupt(err) {
		return fmt.Errorf("records %s: %s: %w: %w", path, what, ErrCorrupt, err)
	}
	return fmt.Errorf("records %s: %s: %w", path, what, err)
}

// Close closes the database.
func (r *Records) Close() error {
	r.mu.Lock()
	for _, st := range r.pruneStmts {
		if st != nil {
			st.Close()
		}
	}
	r.mu.Unlock()
	return r.db.Close()
}

func us(t time.Time) int64 { return t.UnixMicro() }

func fromUS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64)
}
