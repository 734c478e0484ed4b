package rollback

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/layout"
	"github.com/novox/mesh-host/internal/text"
)

// Launcher versions delivered by the mesh live beside the host's, under ROOT/launchers/<v>/, and
// reach it the same way (a Staging, its digest recorded, one rename). The package's launcher
// (/usr/bin/mesh-launcher, or the tarball's) is the floor: the mesh never writes it, and it is
// what the unit starts. A launcher version newer than the image running is taken by exec; one
// that has not yet adopted or started a host and seen it pulse is on trial, and one that ends on
// trial without saying so is judged by the unit's next start (launcher/takeover.go).
const (
	LauncherBinaryName = "mesh-launcher" // launchers/<v>/mesh-launcher
	launchersDir       = "launchers"
	// DefaultFloor is the package's launcher: what the unit starts, never written by the mesh.
	DefaultFloor = "/usr/bin/mesh-launcher"
)

// launchersSchema is the records schema that keeps launcher versions and the image running.
const launchersSchema = 6

// LaunchersDir is ROOT/launchers.
func LaunchersDir(root string) string { return filepath.Join(root, launchersDir) }

// LauncherDir is ROOT/launchers/<v>.
func LauncherDir(root, version string) string { return filepath.Join(root, launchersDir, version) }

// LauncherPath is ROOT/launchers/<v>/mesh-launcher.
func LauncherPath(root, version string) string {
	return filepath.Join(LauncherDir(root, version), LauncherBinaryName)
}

// The states a launcher image is in, as heartbeats and status say them.
const (
	LauncherConfirmed = "confirmed" // a delivered launcher that has run a host here
	LauncherTrial     = "trial"     // a delivered launcher that has not yet
	LauncherFloor     = "floor"     // the package's launcher
)

// LauncherVersion is a launcher binary put under ROOT/launchers, as recorded when first seen.
type LauncherVersion struct {
	Version    string        `json:"version"`
	Digest     digest.Digest `json:"digest"`
	Size       int64         `json:"size"`
	Provenance Provenance    `json:"provenance"`
	CarriedBy  string        `json:"carried_by,omitempty"` // the host release whose archive carried it
}

// LauncherRecord is what the records say about one launcher version.
type LauncherRecord struct {
	LauncherVersion
	FirstSeen time.Time `json:"first_seen"`
	Confirmed time.Time `json:"confirmed_at,omitzero"`
	Bad       time.Time `json:"bad_at,omitzero"`
	BadReason string    `json:"bad_reason,omitempty"`
	BadOutput string    `json:"bad_output,omitempty"`
	OnDisk    bool      `json:"on_disk"`
}

// LauncherRollback is one recorded launcher rollback.
type LauncherRollback struct {
	From   string    `json:"from"`
	To     string    `json:"to"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
	Output string    `json:"output,omitempty"`
}

// CurrentLauncher is the launcher image the unit runs now, or ran last: written by each image as
// it takes over (before exec, by the one that execs), ended when it stops as a launcher should.
// One left not ended on this boot is one that crashed, hung or could not start.
type CurrentLauncher struct {
	Version  string    `json:"version"`
	Floor    bool      `json:"floor"`
	Trial    bool      `json:"trial"`
	Since    time.Time `json:"since"`
	Boot     string    `json:"-"`
	Ended    bool      `json:"ended"`
	Failures int       `json:"failures"` // ends the unit's next start had to judge, in a row
	// FloorVersion and FloorPath are the package's launcher as the last start of the unit found it.
	FloorVersion string    `json:"floor_version"`
	FloorPath    string    `json:"floor_path"`
	UnitStarted  time.Time `json:"unit_started_at,omitzero"`
	// FloorPinned says why the floor runs though newer launchers are on disk ("" when it does
	// not); launchers up to FloorPinnedUpTo stay passed over until one newer confirms.
	FloorPinned     string `json:"floor_pinned,omitempty"`
	FloorPinnedUpTo string `json:"-"`
	// UnitFileDigest is the unit file's digest as the unit's last start found it ("" unknown).
	UnitFileDigest string `json:"-"`
	// ConfirmedThisRun: this image has seen its host pulse (ConfirmLauncher since it began).
	ConfirmedThisRun bool `json:"-"`
	// UnitExit is systemd's word on how the unit's main process last ended, as ExecStopPost
	// recorded it (RecordUnitExit); zero when the unit has no such hook or never stopped.
	UnitExit UnitExit `json:"-"`
}

// UnitExit is how systemd saw the unit's main process end: $SERVICE_RESULT ("success",
// "exit-code", "signal", "core-dump", "watchdog", "timeout", "oom-kill"…), $EXIT_CODE ("exited",
// "killed", "dumped") and $EXIT_STATUS (a number, or a signal's name without SIG).
type UnitExit struct {
	Result, Code, Status string
	At                   time.Time
}

// String says it as systemd's words, for a reason.
func (u UnitExit) String() string {
	return fmt.Sprintf("systemd: result %s, %s %s", u.Result, u.Code, u.Status)
}

// HasLaunchers reports whether these records can keep launcher versions: a file made by a
// launcher older than schema 6 cannot (a host reading it leaves launchers alone).
func (r *Records) HasLaunchers() bool { return r.schema >= launchersSchema }

var errNoLauncherSchema = errors.New("records.db is older than launcher versions (schema 6): a launcher that knows them migrates it at its next start")

// RecordLauncher records a launcher version's digest and provenance the first time it is seen,
// as RecordVersion does for host versions: the same digest again is no error, another one is a
// *DigestConflict.
func (r *Records) RecordLauncher(ctx context.Context, lv LauncherVersion) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	if !layout.ValidVersion(lv.Version) {
		return fmt.Errorf("record launcher %q: not %s", text.Cut(lv.Version, 64), layout.VersionRule)
	}
	if err := lv.Digest.Validate(); err != nil {
		return fmt.Errorf("record digest of launcher %s: %w", lv.Version, err)
	}
	_, err := r.db.ExecContext(ctx, `INSERT INTO launchers (version, digest, size, first_seen, source, signed_by, carried_by)
		VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (version) DO NOTHING`,
		lv.Version, lv.Digest.String(), lv.Size, us(r.now()), nullable(lv.Provenance.Source), nullable(lv.Provenance.SignedBy), nullable(lv.CarriedBy))
	if err != nil {
		return r.wrap("record launcher "+lv.Version, err)
	}
	var recorded string
	if err := r.db.QueryRowContext(ctx, `SELECT digest FROM launchers WHERE version = ?`, lv.Version).Scan(&recorded); err != nil {
		return r.wrap("read back digest of launcher "+lv.Version, err)
	}
	if digest.Digest(recorded) != lv.Digest {
		return &DigestConflict{Version: "launcher " + lv.Version, Recorded: digest.Digest(recorded), Got: lv.Digest}
	}
	return nil
}

// LookupLauncher reads one launcher version's record; ok is false when it was never recorded.
func (r *Records) LookupLauncher(ctx context.Context, version string) (rec LauncherRecord, ok bool, err error) {
	if !r.HasLaunchers() {
		return rec, false, nil
	}
	all, err := r.launcherRows(ctx, `WHERE version = ?`, version)
	if err != nil || len(all) == 0 {
		return rec, false, err
	}
	return all[0], true, nil
}

// HasLauncherDigest reports whether a launcher with this digest is recorded, whatever its
// version: a node stages a release's launcher only when it has none of its digest.
func (r *Records) HasLauncherDigest(ctx context.Context, d digest.Digest) (bool, error) {
	if !r.HasLaunchers() {
		return false, nil
	}
	var n int
	err := r.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM launchers WHERE digest = ?`, d.String()).Scan(&n)
	return n > 0, r.wrapIf("look up launcher digest", err)
}

// Launchers lists every launcher version recorded or found under ROOT/launchers, newest first.
// A directory nothing recorded is listed with provenance "found" and no digest.
func (r *Records) Launchers(ctx context.Context, root string) ([]LauncherRecord, error) {
	var recs []LauncherRecord
	if r.HasLaunchers() {
		var err error
		if recs, err = r.launcherRows(ctx, ""); err != nil {
			return nil, err
		}
	}
	onDisk, err := ScanLaunchers(root)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i := range recs {
		seen[recs[i].Version] = true
		_, statErr := os.Stat(LauncherPath(root, recs[i].Version))
		recs[i].OnDisk = statErr == nil
	}
	for _, v := range onDisk {
		if !seen[v] {
			recs = append(recs, LauncherRecord{LauncherVersion: LauncherVersion{Version: v, Provenance: Provenance{Source: SourceFound}}, OnDisk: true})
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return semver.Compare(recs[i].Version, recs[j].Version) > 0 })
	return recs, nil
}

func (r *Records) launcherRows(ctx context.Context, where string, args ...any) ([]LauncherRecord, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT version, digest, size, first_seen, COALESCE(source, ''), COALESCE(signed_by, ''),
		COALESCE(carried_by, ''), confirmed_at, bad_at, COALESCE(bad_reason, ''), COALESCE(bad_output, '') FROM launchers `+where, args...)
	if err != nil {
		return nil, r.wrap("read launchers", err)
	}
	defer rows.Close()
	var out []LauncherRecord
	for rows.Next() {
		var l LauncherRecord
		var first int64
		var confirmed, bad sql.NullInt64
		if err := rows.Scan(&l.Version, &l.Digest, &l.Size, &first, &l.Provenance.Source, &l.Provenance.SignedBy,
			&l.CarriedBy, &confirmed, &bad, &l.BadReason, &l.BadOutput); err != nil {
			return nil, r.wrap("read launchers", err)
		}
		l.FirstSeen, l.Confirmed, l.Bad = time.UnixMicro(first), fromUS(confirmed), fromUS(bad)
		l.BadReason, l.BadOutput = text.Redact(l.BadReason), text.Redact(l.BadOutput)
		out = append(out, l)
	}
	return out, r.wrapIf("read launchers", rows.Err())
}

// ScanLaunchers lists the launcher versions under ROOT/launchers, newest first (directories
// named by a version; staging directories and anything else are left out).
func ScanLaunchers(root string) ([]string, error) {
	entries, err := os.ReadDir(LaunchersDir(root))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read launchers directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && layout.ValidVersion(e.Name()) {
			out = append(out, e.Name())
		}
	}
	sort.Slice(out, func(i, j int) bool { return semver.Compare(out[i], out[j]) > 0 })
	return out, nil
}

// LauncherChoice is the launcher version ChooseLauncher names, and what it passed over.
type LauncherChoice struct {
	Version   string // "" when nothing newer than self may run
	Confirmed bool   // it has run a host here before: not on trial
	Skipped   []SkippedLauncher
}

// SkippedLauncher is a launcher version ChooseLauncher passed over, and why.
type SkippedLauncher struct {
	Version string
	Why     string
}

// ChooseLauncher names the newest launcher version under ROOT/launchers that is newer than self
// (semver), not marked bad, recorded, and whose binary still matches its recorded digest. While
// the floor is pinned (a launcher rolled back to failed too) it names only a launcher newer than
// every one recorded when it was pinned.
func (r *Records) ChooseLauncher(ctx context.Context, root, self string) (LauncherChoice, error) {
	var c LauncherChoice
	if !r.HasLaunchers() {
		return c, nil
	}
	cur, err := r.CurrentLauncher(ctx)
	if err != nil {
		return c, err
	}
	onDisk, err := ScanLaunchers(root)
	if err != nil {
		return c, err
	}
	recs, err := r.launcherRows(ctx, "")
	if err != nil {
		return c, err
	}
	byVersion := map[string]LauncherRecord{}
	for _, l := range recs {
		byVersion[l.Version] = l
	}
	for _, v := range onDisk {
		if self != "" && semver.Compare(v, self) <= 0 {
			break
		}
		rec, ok := byVersion[v]
		switch {
		case !ok:
			c.Skipped = append(c.Skipped, SkippedLauncher{v, "not recorded: it was not staged by a host or installed (copied by hand?)"})
			continue
		case !rec.Bad.IsZero():
			c.Skipped = append(c.Skipped, SkippedLauncher{v, "bad: " + rec.BadReason})
			continue
		case cur.FloorPinned != "" && semver.Compare(v, cur.FloorPinnedUpTo) <= 0:
			c.Skipped = append(c.Skipped, SkippedLauncher{v, "the floor runs: " + cur.FloorPinned})
			continue
		}
		d, err := r.BinaryDigest(LauncherPath(root, v))
		if err != nil {
			c.Skipped = append(c.Skipped, SkippedLauncher{v, err.Error()})
			continue
		}
		if d != rec.Digest {
			c.Skipped = append(c.Skipped, SkippedLauncher{v, fmt.Sprintf("its binary is %s, not the %s recorded when it was staged", d, rec.Digest)})
			continue
		}
		c.Version, c.Confirmed = v, !rec.Confirmed.IsZero()
		return c, nil
	}
	return c, nil
}

// CurrentLauncher reads the launcher image the unit runs, or ran last.
func (r *Records) CurrentLauncher(ctx context.Context) (CurrentLauncher, error) {
	var c CurrentLauncher
	if !r.HasLaunchers() {
		return c, nil
	}
	var since, unit, exitAt sql.NullInt64
	var floor, trial, ended, confirmed int
	var exit string
	err := r.db.QueryRowContext(ctx, `SELECT COALESCE(current_version, ''), current_floor, current_trial, current_since,
		COALESCE(current_boot, ''), current_ended, current_failures, COALESCE(floor_version, ''), COALESCE(floor_path, ''),
		unit_started_at, COALESCE(floor_pinned, ''), COALESCE(floor_pinned_upto, ''), current_confirmed,
		COALESCE(unit_exit, ''), unit_exit_at, COALESCE(unit_file_digest, '') FROM launcher WHERE id = 1`).
		Scan(&c.Version, &floor, &trial, &since, &c.Boot, &ended, &c.Failures, &c.FloorVersion, &c.FloorPath, &unit, &c.FloorPinned, &c.FloorPinnedUpTo,
			&confirmed, &exit, &exitAt, &c.UnitFileDigest)
	if err != nil {
		return c, r.wrap("read the launcher running", err)
	}
	c.Floor, c.Trial, c.Ended, c.ConfirmedThisRun = floor == 1, trial == 1, ended == 1, confirmed == 1
	c.Since, c.UnitStarted = fromUS(since), fromUS(unit)
	if f := strings.Fields(exit); len(f) == 3 {
		c.UnitExit = UnitExit{Result: f[0], Code: f[1], Status: f[2], At: fromUS(exitAt)}
	}
	return c, nil
}

// RecordUnitExit records systemd's word on how the unit's main process ended (the unit's
// ExecStopPost, `mesh-launcher stopped`), for the floor to judge the image that ended by it: a
// watchdog is the launcher's failure, a SIGKILL from outside or the OOM killer is not. Each word
// is one token of at most 32 bytes; anything else is refused.
func (r *Records) RecordUnitExit(ctx context.Context, result, code, status string) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	for _, w := range []string{result, code, status} {
		if w == "" || len(w) > 32 || strings.ContainsFunc(w, func(c rune) bool { return c <= ' ' || c > '~' }) {
			return fmt.Errorf("systemd's exit words %q %q %q: each must be one printable word of at most 32 bytes", text.Cut(result, 40), text.Cut(code, 40), text.Cut(status, 40))
		}
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET unit_exit = ?, unit_exit_at = ? WHERE id = 1`, result+" "+code+" "+status, us(r.now()))
	return r.wrapIf("record how the unit ended", err)
}

// BootID is this boot's id as the records keep it: an image left not ended on another boot was
// ended by the machine stopping, not by its own failure.
func (r *Records) BootID() string { return r.boot().ID }

// SetCurrentLauncher records the launcher image the unit runs from now: version, whether it is
// the floor or on trial, this boot, not ended. Failures carries over when the version is the
// same one, and across the floor: the unit's start runs the floor, which judges the end, records
// itself and execs the launcher to run again, so a count the floor reset would never reach two.
// Another launcher taking over from a launcher starts it at 0.
func (r *Records) SetCurrentLauncher(ctx context.Context, version string, floor, trial bool) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET
		current_failures = CASE WHEN ? = 1 OR current_floor = 1 OR current_version = ? THEN current_failures ELSE 0 END,
		current_version = ?, current_floor = ?, current_trial = ?, current_since = ?, current_boot = ?, current_ended = 0,
		current_confirmed = 0 WHERE id = 1`, boolInt(floor), version, version, boolInt(floor), boolInt(trial), us(r.now()), r.boot().ID)
	return r.wrapIf("record the launcher running", err)
}

// UnitStarted records a fresh start of the unit (not an exec): the floor's version and path as
// found, and when.
func (r *Records) UnitStarted(ctx context.Context, floorVersion, floorPath string) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET floor_version = ?, floor_path = ?, unit_started_at = ? WHERE id = 1`, text.Cut(floorVersion, layout.MaxVersionBytes), text.Cut(floorPath, 4096), us(r.now()))
	return r.wrapIf("record the unit's start", err)
}

// RecordUnitFile records the unit file's digest as the unit's start found it ("" when there is
// none), so status can tell a unit file whose content changed from one merely rewritten.
func (r *Records) RecordUnitFile(ctx context.Context, d digest.Digest) error {
	if !r.HasLaunchers() {
		return nil
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET unit_file_digest = ? WHERE id = 1`, nullable(d.String()))
	return r.wrapIf("record the unit file's digest", err)
}

// EndCurrentLauncher records that the image running ended as a launcher should: stopped, in
// its failed state (the host's problem), or handing over by exec. Such an end breaks a row of
// failures: the count starts again.
func (r *Records) EndCurrentLauncher(ctx context.Context) error {
	if !r.HasLaunchers() {
		return nil
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET current_ended = 1, current_failures = 0 WHERE id = 1`)
	return r.wrapIf("record the launcher's end", err)
}

// CountLauncherFailure records one end of the current image that the unit's start had to
// judge, and returns how many in a row.
func (r *Records) CountLauncherFailure(ctx context.Context) (int, error) {
	if !r.HasLaunchers() {
		return 0, errNoLauncherSchema
	}
	var n int
	err := r.db.QueryRowContext(ctx, `UPDATE launcher SET current_failures = current_failures + 1, current_ended = 1
		WHERE id = 1 RETURNING current_failures`).Scan(&n)
	return n, r.wrapIf("count the launcher's failure", err)
}

// PinFloor records why the floor runs from now on though newer launchers are on disk: every
// launcher recorded now is passed over until a newer one arrives and confirms ("" lifts it).
func (r *Records) PinFloor(ctx context.Context, why string) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET floor_pinned = ?, floor_pinned_upto = NULL WHERE id = 1`, nullable(text.Cut(why, maxReason)))
	if err != nil || why == "" {
		return r.wrapIf("pin the floor", err)
	}
	// The newest version by semver, which SQL cannot order: read them all.
	recs, err := r.launcherRows(ctx, "")
	if err != nil {
		return err
	}
	upTo := ""
	for _, l := range recs {
		if upTo == "" || semver.Compare(l.Version, upTo) > 0 {
			upTo = l.Version
		}
	}
	_, err = r.db.ExecContext(ctx, `UPDATE launcher SET floor_pinned_upto = ? WHERE id = 1`, nullable(upTo))
	return r.wrapIf("pin the floor", err)
}

// SetFloor records the floor's version and path as found now (the package replaced it).
func (r *Records) SetFloor(ctx context.Context, version, path string) error {
	if !r.HasLaunchers() {
		return nil
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launcher SET floor_version = ?, floor_path = ? WHERE id = 1`,
		text.Cut(version, layout.MaxVersionBytes), text.Cut(path, 4096))
	return r.wrapIf("record the floor", err)
}

// ConfirmLauncher records that a launcher version adopted or started a host and saw it pulse:
// it is no longer on trial, here or at any later exec.
func (r *Records) ConfirmLauncher(ctx context.Context, version string) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return r.wrap("confirm launcher "+version, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE launchers SET confirmed_at = COALESCE(confirmed_at, ?) WHERE version = ?`, us(r.now()), version); err != nil {
		return r.wrap("confirm launcher "+version, err)
	}
	// A launcher newer than every one the floor was pinned below confirmed: the pin is lifted.
	// Newer by semver, which SQL cannot compare: one at or below the pin leaves it (a pin with
	// nothing recorded below it is lifted by any).
	var upTo string
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(floor_pinned_upto, '') FROM launcher WHERE id = 1`).Scan(&upTo); err != nil {
		return r.wrap("confirm launcher "+version, err)
	}
	lift := semver.Compare(version, upTo) > 0
	if _, err := tx.ExecContext(ctx, `UPDATE launcher SET current_trial = 0, current_failures = 0, current_confirmed = 1,
		floor_pinned = CASE WHEN ? THEN NULL ELSE floor_pinned END
		WHERE id = 1 AND current_version = ?`, lift, version); err != nil {
		return r.wrap("confirm launcher "+version, err)
	}
	return r.wrapIf("confirm launcher "+version, tx.Commit())
}

// MarkLauncherBad records that a launcher version must never be staged or run again here, why,
// and the last it wrote.
func (r *Records) MarkLauncherBad(ctx context.Context, version, reason, output string) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	_, err := r.db.ExecContext(ctx, `UPDATE launchers SET bad_at = COALESCE(bad_at, ?), bad_reason = COALESCE(bad_reason, ?),
		bad_output = COALESCE(bad_output, ?) WHERE version = ?`,
		us(r.now()), text.Cut(reason, maxReason), nullable(text.Cut(output, maxLauncherOutput)), version)
	return r.wrapIf("mark launcher "+version+" bad", err)
}

// maxLauncherOutput bounds the output kept with a launcher that was marked bad.
const maxLauncherOutput = maxOutput

// IsLauncherBad reports whether a launcher with this version or digest is marked bad here.
func (r *Records) IsLauncherBad(ctx context.Context, version string, d digest.Digest) (bool, string, error) {
	if !r.HasLaunchers() {
		return false, "", nil
	}
	var reason string
	err := r.db.QueryRowContext(ctx, `SELECT COALESCE(bad_reason, '') FROM launchers WHERE bad_at IS NOT NULL AND (version = ? OR digest = ?) LIMIT 1`,
		version, d.String()).Scan(&reason)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", nil
	}
	if err != nil {
		return false, "", r.wrap("look up launcher "+version, err)
	}
	return true, text.Redact(reason), nil
}

// RecordLauncherRollback records a launcher rollback, keeping the newest maxRollbacks.
func (r *Records) RecordLauncherRollback(ctx context.Context, rb LauncherRollback) error {
	if !r.HasLaunchers() {
		return errNoLauncherSchema
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return r.wrap("record launcher rollback", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO launcher_rollbacks (from_version, to_version, at, reason, output) VALUES (?, ?, ?, ?, ?)`,
		rb.From, rb.To, us(r.now()), text.Cut(rb.Reason, maxReason), nullable(text.Cut(rb.Output, maxLauncherOutput))); err != nil {
		return r.wrap("record launcher rollback", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM launcher_rollbacks WHERE id NOT IN (SELECT id FROM launcher_rollbacks ORDER BY id DESC LIMIT ?)`, maxLauncherRollbacks); err != nil {
		return r.wrap("prune launcher rollbacks", err)
	}
	return r.wrapIf("record launcher rollback", tx.Commit())
}

// maxLauncherRollbacks is how many launcher rollbacks the records keep.
const maxLauncherRollbacks = 10

// LauncherRollbacks returns the newest launcher rollbacks first, at most limit.
func (r *Records) LauncherRollbacks(ctx context.Context, limit int) ([]LauncherRollback, error) {
	if !r.HasLaunchers() {
		return nil, nil
	}
	rows, err := r.db.QueryContext(ctx, `SELECT from_version, to_version, at, reason, COALESCE(output, '') FROM launcher_rollbacks ORDER BY id DESC LIMIT ?`, limit)
	if err != nil {
		return nil, r.wrap("read launcher rollbacks", err)
	}
	defer rows.Close()
	var out []LauncherRollback
	for rows.Next() {
		var rb LauncherRollback
		var at int64
		if err := rows.Scan(&rb.From, &rb.To, &at, &rb.Reason, &rb.Output); err != nil {
			return nil, r.wrap("read launcher rollbacks", err)
		}
		rb.At, rb.Reason, rb.Output = time.UnixMicro(at), text.Redact(rb.Reason), text.Redact(rb.Output)
		out = append(out, rb)
	}
	return out, r.wrapIf("read launcher rollbacks", rows.Err())
}

// LauncherReport is the launcher as a heartbeat and `mesh-launcher status` say it.
type LauncherReport struct {
	Version        string             `json:"version"` // the image running (or last run)
	Digest         digest.Digest      `json:"digest"`  // its digest when it is a delivered version, else ""
	FloorVersion   string             `json:"floor_version"`
	State          string             `json:"state"` // LauncherConfirmed, LauncherTrial or LauncherFloor
	RolledBackFrom string             `json:"rolled_back_from,omitempty"`
	Versions       []LauncherRecord   `json:"versions"`
	Rollbacks      []LauncherRollback `json:"rollbacks"`
	Current        CurrentLauncher    `json:"-"`
}

// LauncherStatus reads the launcher as heartbeats and status say it. RolledBackFrom names the
// launcher the newest rollback left, while the image running is the one it rolled back to.
func (r *Records) LauncherStatus(ctx context.Context, root string) (LauncherReport, error) {
	var rep LauncherReport
	cur, err := r.CurrentLauncher(ctx)
	if err != nil {
		return rep, err
	}
	rep.Current, rep.Version, rep.FloorVersion = cur, cur.Version, cur.FloorVersion
	switch {
	case cur.Floor:
		rep.State = LauncherFloor
	case cur.Trial:
		rep.State = LauncherTrial
	case cur.Version != "":
		rep.State = LauncherConfirmed
	}
	if rep.Versions, err = r.Launchers(ctx, root); err != nil {
		return rep, err
	}
	for _, l := range rep.Versions {
		if l.Version == cur.Version && !cur.Floor {
			rep.Digest = l.Digest
		}
	}
	if rep.Rollbacks, err = r.LauncherRollbacks(ctx, maxLauncherRollbacks); err != nil {
		return rep, err
	}
	if len(rep.Rollbacks) > 0 && rep.Rollbacks[0].To == cur.Version {
		rep.RolledBackFrom = rep.Rollbacks[0].From
	}
	if rep.Versions == nil {
		rep.Versions = []LauncherRecord{}
	}
	if rep.Rollbacks == nil {
		rep.Rollbacks = []LauncherRollback{}
	}
	return rep, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
