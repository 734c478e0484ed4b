// Package sqlitefile keeps state in a SQLite file (records.db, store.db), safe from a crash and
// migrated.
//
// It keeps the file private to the service, opened with the settings that make a committed write
// survive a crash, its schema brought forward by PRAGMA user_version, and a file that is not a
// readable database told apart from every other failure, so that its owner can move it aside and
// start afresh. The owners (rollback, host/store) word the errors an operator reads.
package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/novox/mesh-host/internal/atomicfile"
)

// FileMode is the mode of a database and of its -wal and -shm: they hold what the host ran and
// applied (output, file contents), which is the service's alone.
const FileMode os.FileMode = 0o600

// Every database is opened the same way: a writer waits up to 10 s for another (the launcher
// and the host share records.db), synchronous FULL so a committed transaction survives a power
// cut, and write transactions take the lock when they begin, so two writers never deadlock
// upgrading a read lock. The journal mode is WAL, so readers never block the writer; it is
// kept in the file, set once by the program that made it (createWhole): converting a file to
// WAL takes an exclusive lock from a read lock, which two connections doing it at once
// deadlock on — SQLite then answers one of them SQLITE_BUSY at once, busy_timeout or not.
// The -wal beside a file is checkpointed at 256 pages (1 MiB, not SQLite's 4 MiB) and cut back to
// 1 MiB after each checkpoint: on a node's small disk the two files together stay a few MiB.
const (
	busyWait      = 10 * time.Second
	pragmas       = "_pragma=busy_timeout(10000)&_pragma=synchronous(FULL)&_pragma=wal_autocheckpoint(256)&_pragma=journal_size_limit(1048576)&_txlock=immediate"
	createPragmas = pragmas + "&_pragma=journal_mode(WAL)"
)

// Create opens the database at path for the program that owns its schema, and brings the
// schema to len(migrations), migrations[i] taking it from version i to i+1, each step in its
// own transaction. A missing file is made whole before anyone can open it (createWhole); an
// existing one is made private (MakePrivate). It returns the schema version the file had (0
// for a file it made); one above len(migrations) was made by a newer program, and is left as
// it is for the caller to judge.
func Create(ctx context.Context, path string, migrations []string) (db *sql.DB, found int, err error) {
	made, err := createWhole(ctx, path, migrations)
	if err != nil {
		return nil, 0, err
	}
	if err := MakePrivate(path); err != nil {
		return nil, 0, err
	}
	db, found, err = openConverting(ctx, path)
	if err != nil {
		return nil, 0, err
	}
	if err := migrate(ctx, db, migrations); err != nil {
		db.Close()
		return nil, 0, err
	}
	if made {
		found = 0
	}
	return db, found, nil
}

// openConverting opens an existing file with createPragmas, so a file left empty (by `touch`,
// or by an older version that made it before opening it) is converted to WAL here. Two
// programs converting one file at once deadlock, and SQLite answers one SQLITE_BUSY without
// waiting: that one tries again, as SQLite's documentation prescribes, for as long as a busy
// writer is waited for.
func openConverting(ctx context.Context, path string) (*sql.DB, int, error) {
	deadline := time.Now().Add(busyWait)
	for {
		db, v, err := open(ctx, "file:"+path+"?"+createPragmas)
		if !isBusy(err) || time.Now().After(deadline) {
			return db, v, err
		}
		select {
		case <-ctx.Done():
			return nil, 0, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// createWhole makes the database at path if it is missing: under a temporary name beside it,
// in WAL mode with every migration applied and closed, then linked into place (a link, unlike
// a rename, never replaces a file another process made meanwhile). So no process ever opens a
// file without its schema, and no two convert the same fresh file to WAL at once (the launcher
// and `mesh-launcher status` or `install` racing on a first start did: one of them failed with
// "database is locked"). It reports whether it made the file.
func createWhole(ctx context.Context, path string, migrations []string) (made bool, err error) {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return false, fmt.Errorf("make a new database: %w", err)
	}
	tmp := f.Name()
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(tmp + suffix)
		}
	}()
	if err := errors.Join(f.Chmod(FileMode), f.Close()); err != nil {
		return false, fmt.Errorf("make a new database: %w", err)
	}
	db, _, err := open(ctx, "file:"+tmp+"?"+createPragmas)
	if err != nil {
		return false, fmt.Errorf("make a new database: %w", err)
	}
	if err := migrate(ctx, db, migrations); err != nil {
		db.Close()
		return false, fmt.Errorf("make a new database: %w", err)
	}
	// Closing the last connection checkpoints the WAL into the file; the file stays in WAL mode.
	if err := db.Close(); err != nil {
		return false, fmt.Errorf("make a new database: %w", err)
	}
	if err := atomicfile.SyncDir(tmp); err != nil { // SyncDir fsyncs any path it opens
		return false, fmt.Errorf("make a new database: %w", err)
	}
	if err := os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return false, nil // another process made it first: theirs is whole too
	} else if err != nil {
		return false, fmt.Errorf("make a new database: %w", err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(path)); err != nil {
		return false, fmt.Errorf("make a new database: %w", err)
	}
	return true, nil
}

// Open opens the database at path, which must exist, without creating or migrating anything,
// and returns its schema version.
func Open(ctx context.Context, path string) (*sql.DB, int, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, 0, err
	}
	return open(ctx, "file:"+path+"?"+pragmas)
}

// OpenReadOnly opens the database at path to read it while another process may be writing it,
// and returns its schema version. It never writes, not even SQLite's recovery of a crashed
// writer's journal.
func OpenReadOnly(ctx context.Context, path string) (*sql.DB, int, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, 0, err
	}
	return open(ctx, "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
}

// open opens dsn and reads the schema version, which is also the first read of the file: a
// file that is not a database fails here, not in the middle of the caller's work.
func open(ctx context.Context, dsn string) (*sql.DB, int, error) {
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, 0, err
	}
	v, err := UserVersion(ctx, db)
	if err != nil {
		db.Close()
		return nil, 0, err
	}
	return db, v, nil
}

// UserVersion reads the schema version (PRAGMA user_version; 0 for a new file).
func UserVersion(ctx context.Context, db *sql.DB) (int, error) {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// migrate brings the schema to len(migrations), one step per transaction: the step and the
// new version commit together, so a crash leaves the file at one version or the next. The
// version is read again inside each transaction, which holds the write lock from its start, so
// two programs migrating the same file at once never apply a step twice.
func migrate(ctx context.Context, db *sql.DB, migrations []string) error {
	for {
		done, err := migrateStep(ctx, db, migrations)
		if err != nil || done {
			return err
		}
	}
}

// migrateStep applies the next step, if any, and reports whether there was none.
func migrateStep(ctx context.Context, db *sql.DB, migrations []string) (done bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("migrate schema: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return false, fmt.Errorf("migrate schema: read schema version: %w", err)
	}
	if v >= len(migrations) {
		return true, nil
	}
	if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
		return false, fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
		return false, fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	return false, nil
}

// IsCorrupt reports whether err, or an error it wraps, says the file is not a readable SQLite
// database: not a database at all, or one whose pages are damaged.
func IsCorrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT:
		return true
	}
	return false
}

// isBusy reports whether err says another connection held the lock.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// MoveAside renames the database at path, with its -wal and -shm, to <path>.corrupt-<UTC time>
// and returns the new name, so that the next Create starts a fresh file and the damaged one is
// kept for whoever wants to know what happened to it. Only the owner, with the file closed,
// may call it.
func MoveAside(path string, now time.Time) (string, error) {
	aside := fmt.Sprintf("%s.corrupt-%s", path, now.UTC().Format("20060102T150405"))
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Rename(path+suffix, aside+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("move %s aside: %w", path+suffix, err)
		}
	}
	return aside, nil
}

// MakePrivate makes the database at path private before it is opened: a missing file is
// created empty with FileMode (SQLite takes an empty file for a new database, and gives the
// -wal and -shm it creates the main file's mode, so the umask does not get a say), and an
// existing file, -wal or -shm that group or others may read — made by an older version — is
// tightened.
func MakePrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && fi.Mode().Perm()&0o077 != 0 {
			err = os.Chmod(p, fi.Mode().Perm()&^0o077)
		}
		if err != nil {
			return fmt.Errorf("make %s private (mode %#o): %w", p, FileMode, err)
		}
	}
	return nil
}
