package rollback

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"golang.org/x/mod/semver"
)

// Confirm records that a start of version completed a full reconcile: the version is known-good
// from now on. It then retires what is no longer needed and returns the directories removed.
func (r *Records) Confirm(ctx context.Context, root, version string, start int64) ([]string, error) {
	now := us(r.now())
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, r.wrap("confirm "+version, err)
	}
	defer tx.Rollback()
	if start > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE starts SET confirmed_at = ? WHERE id = ? AND confirmed_at IS NULL`, now, start); err != nil {
			return nil, r.wrap("confirm "+version, err)
		}
	}
	res, err := tx.ExecContext(ctx, `UPDATE versions SET confirmed_at = COALESCE(confirmed_at, ?) WHERE version = ?`, now, version)
	if err != nil {
		return nil, r.wrap("confirm "+version, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("confirm %s: %s has no record of that version (it was never chosen from %s)", version, r.path, VersionsDir(root))
	}
	if err := tx.Commit(); err != nil {
		return nil, r.wrap("confirm "+version, err)
	}
	return r.retire(ctx, root, version)
}

// versionRow is what the records say about one version.
type versionRow struct {
	Version     string
	Digest      string
	Confirmed   bool
	Bad         bool
	BadReason   string
	FirstSeen   sql.NullInt64
	ConfirmedAt sql.NullInt64
	BadAt       sql.NullInt64
}

func (r *Records) versionRows(ctx context.Context) (map[string]versionRow, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT version, digest, first_seen, confirmed_at, bad_at, COALESCE(bad_reason, '') FROM versions`)
	if err != nil {
		return nil, r.wrap("read versions", err)
	}
	defer rows.Close()
	out := map[string]versionRow{}
	for rows.Next() {
		var v versionRow
		if err := rows.Scan(&v.Version, &v.Digest, &v.FirstSeen, &v.ConfirmedAt, &v.BadAt, &v.BadReason); err != nil {
			return nil, r.wrap("read versions", err)
		}
		v.Confirmed, v.Bad = v.ConfirmedAt.Valid, v.BadAt.Valid
		out[v.Version] = v
	}
	return out, r.wrapIf("read versions", rows.Err())
}

// KnownGood is the newest version on disk that has confirmed and is not bad; "" if none.
func (r *Records) KnownGood(ctx context.Context, root string) (string, error) {
	return r.newestGoodBelow(ctx, root, "")
}

// predecessor is the newest known-good version on disk older than version; "" if none. It is
// what an unconfirmed version rolls back to, and what retiring keeps.
func (r *Records) predecessor(ctx context.Context, root, version string) (string, error) {
	return r.newestGoodBelow(ctx, root, version)
}

// newestGoodBelow returns the newest confirmed, not-bad version with a directory on disk that is
// older than below (or any, when below is "").
func (r *Records) newestGoodBelow(ctx context.Context, root, below string) (string, error) {
	recs, err := r.versionRows(ctx)
	if err != nil {
		return "", err
	}
	dirs, err := ScanVersions(root)
	if err != nil {
		return "", err
	}
	for _, d := range dirs { // newest first
		if !d.Version || (below != "" && semver.Compare(d.Name, below) >= 0) {
			continue
		}
		if v, ok := recs[d.Name]; ok && v.Confirmed && !v.Bad {
			return d.Name, nil
		}
	}
	return "", nil
}

// retire removes, after version confirmed, the directories of versions older than its
// predecessor and of versions marked bad. Their records stay, so a bad version is never staged
// again. Newer versions that are not bad (staged, not yet run) are never touched.
func (r *Records) retire(ctx context.Context, root, version string) ([]string, error) {
	recs, err := r.versionRows(ctx)
	if err != nil {
		return nil, err
	}
	pred, err := r.predecessor(ctx, root, version)
	if err != nil {
		return nil, err
	}
	dirs, err := ScanVersions(root)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, d := range dirs {
		if !d.Version || d.Name == version {
			continue
		}
		bad := recs[d.Name].Bad
		older := pred != "" && semver.Compare(d.Name, pred) < 0
		if !bad && !older {
			continue
		}
		if err := os.RemoveAll(VersionDir(root, d.Name)); err != nil {
			return removed, fmt.Errorf("retire %s: %w", d.Name, err)
		}
		removed = append(removed, d.Name)
	}
	return removed, nil
}
