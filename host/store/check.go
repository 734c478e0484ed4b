package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"time"
)

// Check proves a host of this version could open the store at path, without writing to it: a
// staged successor's preflight runs it while the current host holds the file. A missing store is
// fine (the host makes one); one with a schema newer than this build knows is not.
func Check(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("open store %s: %w", path, err)
	}
	defer db.Close()
	s := &Store{db: db, path: path, now: time.Now}
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return s.wrap("read schema version", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("store %s has schema version %d, newer than this host understands (%d)", path, v, SchemaVersion)
	}
	var n int
	if v > 0 {
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM held`).Scan(&n); err != nil {
			return s.wrap("read the held declaration", err)
		}
	}
	return nil
}
