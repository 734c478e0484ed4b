package rollback

import (
	"context"
	"database/sql"
	"slices"
	"time"

	"github.com/novox/mesh-host/internal/text"
	"golang.org/x/mod/semver"
)

// Status is everything the records and the versions directory say, for `mesh-launcher status`
// and the host's heartbeat.
type Status struct {
	Running      *Running        `json:"running"`
	KnownGood    string          `json:"known_good"`
	Predecessor  string          `json:"predecessor"`
	Failed       bool            `json:"failed"`
	FailedReason string          `json:"failed_reason"`
	Note         string          `json:"note,omitempty"`
	Versions     []VersionStatus `json:"versions"` // newest first (semver), on disk or records only
	Ignored      []string        `json:"ignored"`  // entries of versions/ that are not versions
	Rollbacks    []Rollback      `json:"rollbacks"`
}

// Running is the open start: what the launcher last started and has not seen end.
type Running struct {
	Version string    `json:"version"`
	PID     int       `json:"pid"`
	Since   time.Time `json:"since"`
	StartID int64     `json:"-"`
}

// VersionStatus is one version, on disk or only in the records (retired or bad).
type VersionStatus struct {
	Version   string `json:"version"`
	Digest    string `json:"digest"`
	OnDisk    bool   `json:"on_disk"`
	Running   bool   `json:"running"`
	Confirmed bool   `json:"confirmed"`
	Bad       bool   `json:"bad"`
	BadReason string `json:"bad_reason"`
	Mismatch  string `json:"mismatch,omitempty"` // why its binary is not trusted any more
	// Provenance is where the binary came from: installed by hand, delivered signed by a key,
	// found in versions/, or not recorded (first seen before schema 3).
	Provenance Provenance `json:"provenance"`
	// Failures are the failures that count now (Standing: what the policy would judge);
	// FailuresTotal every failed start of the version, all time.
	Failures      int    `json:"failures"`
	FailuresTotal int    `json:"failures_total"`
	LastFailure   string `json:"last_failure,omitempty"` // how the newest counting failure ended
	LastOutput    string `json:"last_output,omitempty"`
}

// Status reads the whole picture, counting failures by p as the launcher does. It never writes,
// except recording the digest of a version seen for the first time (as Choose does).
func (r *Records) Status(ctx context.Context, root string, p Policy) (Status, error) {
	st := Status{Versions: []VersionStatus{}, Ignored: []string{}, Rollbacks: []Rollback{}}
	if err := r.statusState(ctx, &st); err != nil {
		return st, err
	}
	if err := r.statusRunning(ctx, &st); err != nil {
		return st, err
	}
	if err := r.statusVersions(ctx, root, p, &st); err != nil {
		return st, err
	}
	if err := r.statusLineage(ctx, root, &st); err != nil {
		return st, err
	}
	return st, nil
}

// statusState reads the launcher's failed state and note.
func (r *Records) statusState(ctx context.Context, st *Status) error {
	var failed bool
	var reason, note sql.NullString
	if err := r.db.QueryRowContext(ctx, `SELECT failed, failed_reason, note FROM launcher WHERE id = 1`).Scan(&failed, &reason, &note); err != nil {
		return r.wrap("read launcher state", err)
	}
	st.Failed, st.Note = failed, note.String
	if failed {
		// Redacted as Rollbacks are: older records may hold output that named a bus password.
		st.FailedReason = text.Redact(reason.String)
	}
	return nil
}

// statusRunning reads the open start, if any.
func (r *Records) statusRunning(ctx context.Context, st *Status) error {
	var run Running
	var pid sql.NullInt64
	var since int64
	err := r.db.QueryRowContext(ctx, `SELECT id, version, pid, started_at FROM starts WHERE ended_at IS NULL ORDER BY id DESC LIMIT 1`).Scan(&run.StartID, &run.Version, &pid, &since)
	switch {
	case err == nil:
		run.PID, run.Since = int(pid.Int64), time.UnixMicro(since)
		st.Running = &run
	case err != sql.ErrNoRows:
		return r.wrap("read running start", err)
	}
	return nil
}

// statusVersions lists every version on disk (checked as Choose checks it) and every one only
// in the records (retired, or bad and removed), newest first, with where each came from.
func (r *Records) statusVersions(ctx context.Context, root string, p Policy, st *Status) error {
	recs, err := r.versionRows(ctx)
	if err != nil {
		return err
	}
	failures, err := r.failuresTotal(ctx)
	if err != nil {
		return err
	}
	dirs, err := ScanVersions(root)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, d := range dirs {
		if !d.Version {
			st.Ignored = append(st.Ignored, d.Name)
			continue
		}
		seen[d.Name] = true
		c, err := r.candidate(ctx, root, d.Name)
		if err != nil {
			return err
		}
		recs, err = r.versionRows(ctx) // candidate may have recorded a first digest
		if err != nil {
			return err
		}
		vs, err := r.versionStatus(ctx, root, p, recs[d.Name], d.Name, true, c.Mismatch, failures, st.Running)
		if err != nil {
			return err
		}
		st.Versions = append(st.Versions, vs)
	}
	for _, v := range sortedNewestFirst(recs) {
		if !seen[v] {
			vs, err := r.versionStatus(ctx, root, p, recs[v], v, false, "", failures, st.Running)
			if err != nil {
				return err
			}
			st.Versions = append(st.Versions, vs)
		}
	}
	// One order for all of them, newest first: a version only in the records (a bad one
	// removed) sits where its number puts it, not after the oldest on disk.
	slices.SortStableFunc(st.Versions, func(a, b VersionStatus) int { return semver.Compare(b.Version, a.Version) })
	provs, err := r.provenances(ctx) // after candidate recorded any version seen for the first time
	if err != nil {
		return err
	}
	for i := range st.Versions {
		st.Versions[i].Provenance = provs[st.Versions[i].Version]
	}
	return nil
}

// statusLineage reads the known-good version, the predecessor of what runs (or of the
// known-good), and the last rollbacks.
func (r *Records) statusLineage(ctx context.Context, root string, st *Status) error {
	var err error
	if st.KnownGood, err = r.KnownGood(ctx, root); err != nil {
		return err
	}
	ref := st.KnownGood
	if st.Running != nil {
		ref = st.Running.Version
	}
	if ref != "" {
		if st.Predecessor, err = r.predecessor(ctx, root, ref); err != nil {
			return err
		}
	}
	if st.Rollbacks, err = r.Rollbacks(ctx, keepRollbacks); err != nil {
		return err
	}
	if st.Rollbacks == nil {
		st.Rollbacks = []Rollback{}
	}
	return nil
}

func (r *Records) versionStatus(ctx context.Context, root string, p Policy, rec versionRow, v string, onDisk bool, mismatch string, failures map[string]int, run *Running) (VersionStatus, error) {
	vs := VersionStatus{
		Version: v, Digest: rec.Digest, OnDisk: onDisk, Confirmed: rec.Confirmed, Bad: rec.Bad,
		BadReason: text.Redact(rec.BadReason), Mismatch: mismatch, FailuresTotal: failures[v],
		Running: run != nil && run.Version == v,
	}
	if vs.FailuresTotal > 0 {
		s, err := r.Standing(ctx, root, v, p)
		if err != nil {
			return vs, err
		}
		vs.Failures = s.Failures
		if s.Failures > 0 {
			vs.LastFailure = s.Last.Describe()
		}
	}
	if rec.Bad {
		out, _ := r.lastOutput(ctx, v)
		vs.LastOutput = text.Redact(out)
	}
	return vs, nil
}

// failuresTotal counts every failed start of each version, all time: those in starts and those
// pruned from it (schema 4 on).
func (r *Records) failuresTotal(ctx context.Context) (map[string]int, error) {
	q := `SELECT version, COUNT(*) AS n FROM starts WHERE outcome IN ` + failureOutcomes() + ` GROUP BY version`
	if r.schema >= pruneSchema {
		q = `SELECT version, SUM(n) FROM (` + q + ` UNION ALL SELECT version, pruned_failures FROM versions) GROUP BY version`
	}
	rows, err := r.db.QueryContext(ctx, q)
	if err != nil {
		return nil, r.wrap("count failures", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var v string
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			return nil, r.wrap("count failures", err)
		}
		out[v] = n
	}
	return out, r.wrapIf("count failures", rows.Err())
}
