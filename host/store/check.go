package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// Check proves a host of this version could open the store at path, without writing to it: a
// staged successor's preflight runs it while the current host holds the file. A missing store is
// fine (the host makes one); one with a schema newer than this build knows is not.
func Check(ctx context.Context, path string) error {
	db, v, err := sqlitefile.OpenReadOnly(ctx, path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return wrap(path, "open", err)
	}
	defer db.Close()
	if v > SchemaVersion {
		return fmt.Errorf("store %s has schema version %d, newer than this host understands (%d)", path, v, SchemaVersion)
	}
	if v > 0 {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM held`).Scan(&n); err != nil {
			return wrap(path, "read the held declaration", err)
		}
	}
	return nil
}
