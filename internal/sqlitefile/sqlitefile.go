// Package sqlitefile is how this module keeps state in a SQLite file (records.db, store.db):
// the file private to the service, opened with the settings that make a committed write
// survive a crash, its schema brought forward by PRAGMA user_version, and a file that is not a
// readable database told apart from every other failure, so that its owner can move it aside
// and start afresh. The owners (rollback, host/store) word the errors an operator reads.
package sqlitefile

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// FileMode is the mode of a database and of its -wal and -shm: they hold what the host ran and
// applied (output, file contents), which is the service's alone.
const FileMode os.FileMode = 0o600

// Every database is opened the same way: a writer waits up to 10 s for another (the launcher
// and the host share records.db), WAL so readers never block the writer, synchronous FULL so a
// committed transaction survives a power cut, and write transactions take the lock when they
// begin, so two writers never deadlock upgrading a read lock.
const pragmas = "_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_txlock=immediate"

// Create opens the database at path for the program that owns its schema: a missing file is
// created private (MakePrivate), and the schema is brought to len(migrations), migrations[i]
// taking it from version i to i+1, each step in its own transaction. It returns the schema
// version the file had; one above len(migrations) was made by a newer program, and is left as
// it is for the caller to judge.
func Create(ctx context.Context, path string, migrations []string) (db *sql.DB, found int, err error) {
	if err := MakePrivate(path); err != nil {
		return nil, 0, err
	}
	db, found, err = open(ctx, "file:"+path+"?"+pragmas)
	if err != nil {
		return nil, 0, err
	}
	for v := found; v < len(migrations); v++ {
		if err := migrate(ctx, db, v, migrations[v]); err != nil {
			db.Close()
			return nil, 0, err
		}
	}
	return db, found, nil
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

// migrate takes the schema from version v to v+1: the step and the new version commit
// together, so a crash leaves the file at v or at v+1.
func migrate(ctx context.Context, db *sql.DB, v int, step string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, step); err != nil {
		return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, v+1)); err != nil {
		return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate schema %d→%d: %w", v, v+1, err)
	}
	return nil
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
