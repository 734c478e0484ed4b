package rollback

import (
	"context"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// Names the tests use that the package does not export: its users need none of them.
const RecordsName = recordsName

// SchemaVersion is the records schema this build knows.
const SchemaVersion = recordsSchema

// schemaVersion reads the records' PRAGMA user_version.
func (r *Records) schemaVersion(ctx context.Context) (int, error) {
	return sqlitefile.UserVersion(ctx, r.db)
}
