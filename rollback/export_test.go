package rollback

import (
	"context"
	"slices"
	"time"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// What the tests read that the launcher, the host and the lab have no use for.

// RecordsName is records.db's name under the root.
const RecordsName = recordsName

// SchemaVersion is the records schema this build knows.
const SchemaVersion = recordsSchema

// Boot is a reading of the boot clock.
type Boot = bootTime

// ErrLocked is wrapped by the error of a lock another process holds.
var ErrLocked = errLocked

// Choose is the rule Records.Choose applies.
func Choose(candidates []Candidate) string { return choose(candidates) }

// CountsAsFailure reports whether the outcome counts toward a version's failure limit.
func (o Outcome) CountsAsFailure() bool { return slices.Contains(failureRule, o) }

// Backoff is the delay before restarting after the nth counted failure.
func (p Policy) Backoff(n int) time.Duration { return p.backoff(n) }

// Path is the records file's path.
func (r *Records) Path() string { return r.path }

// Predecessor is the newest known-good version on disk older than version.
func (r *Records) Predecessor(ctx context.Context, root, version string) (string, error) {
	return r.predecessor(ctx, root, version)
}

// Retire removes what is no longer needed once version confirmed.
func (r *Records) Retire(ctx context.Context, root, version string) ([]string, error) {
	return r.retire(ctx, root, version)
}

// LastOutput is the stderr tail of the version's most recent ended start.
func (r *Records) LastOutput(ctx context.Context, version string) (string, error) {
	return r.lastOutput(ctx, version)
}

// schemaVersion reads the records' PRAGMA user_version.
func (r *Records) schemaVersion(ctx context.Context) (int, error) {
	return sqlitefile.UserVersion(ctx, r.db)
}

// Hashed is how many binaries these records have read whole to hash them.
func (r *Records) Hashed() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hashed
}
