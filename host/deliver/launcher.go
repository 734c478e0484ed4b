package deliver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/opencontainers/go-digest"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// A host release may carry the mesh-launcher built from the same tree: in its archive (manifest
// schemas 2 and 3, decision 0014), or as its own object (schema 4, launcherobj.go). The node
// stages it under ROOT/launchers/<v> — from the same fetch as the host binary, or from its own
// object or a delta of it — before the host version is renamed into place — so that when the host stands aside
// for the new version, the launcher that will take it is already on disk — and only when it
// has no launcher of that digest (delivered, or the floor), none of that version, it is newer
// than both the floor and the launcher running, and it is not marked bad. A launcher
// that cannot be staged is never a reason to refuse the host release: it is logged, and the
// staged progress (the heartbeat's fetch) carries a bounded note saying why.

// LauncherRecords is what staging a release's launcher needs from the records
// (rollback.Records has it). Records without it stage host versions only.
type LauncherRecords interface {
	// HasLaunchers is false on a records.db older than schema 6: an older launcher runs, and
	// launcher versions are left alone until one that knows them migrates it.
	HasLaunchers() bool
	HasLauncherDigest(ctx context.Context, d digest.Digest) (bool, error)
	// CurrentLauncher says which launcher runs and which is the floor: a launcher not newer
	// than either, or the floor's own build, is not staged.
	CurrentLauncher(ctx context.Context) (rollback.CurrentLauncher, error)
	IsLauncherBad(ctx context.Context, version string, d digest.Digest) (bool, string, error)
	LookupLauncher(ctx context.Context, version string) (rollback.LauncherRecord, bool, error)
	rollback.LauncherRecorder
}

// maxLauncherNote bounds the note on a launcher that was not staged.
const maxLauncherNote = 256

// launcherOutputCap bounds what `mesh-launcher version` may print that is kept.
const launcherOutputCap = 4 << 10

// launcherPlan is a release's launcher being staged alongside its host binary: nil when it is
// not to be staged.
type launcherPlan struct {
	want wire.ReleaseLauncher
	rec  LauncherRecords
	st   *rollback.Staging
}

// planLauncher decides whether r's launcher is staged and, if so, makes its staging directory.
// The note says why not when that is worth reporting ("" when there is no launcher or this
// node has it already).
func (d *Deliverer) planLauncher(ctx context.Context, r release) (*launcherPlan, string) {
	if !r.hasLauncher() {
		return nil, ""
	}
	l := r.launcher()
	rec, ok := d.cfg.Records.(LauncherRecords)
	if !ok || !rec.HasLaunchers() {
		d.oldRecords.Do(func() {
			d.cfg.Log.Info("releases carry mesh-launcher, but records.db is older than launcher versions (schema 6): an older launcher runs, so launchers are not staged until a launcher that knows them migrates it; host versions are staged as before",
				"launcher_version", l.Version)
		})
		return nil, d.launcherNote(r, "not staged: records.db is older than launcher versions (schema 6)")
	}
	if bad, reason, err := rec.IsLauncherBad(ctx, l.Version, l.Digest); err != nil {
		return nil, d.launcherNote(r, "not staged: reading the records: %v", err)
	} else if bad {
		return nil, d.launcherNote(r, "not staged: it is marked bad on this node (%s)", reason)
	}
	if why, err := launcherUnneeded(ctx, rec, l); err != nil {
		return nil, d.launcherNote(r, "not staged: reading the records: %v", err)
	} else if why != "" {
		d.cfg.Log.Debug("the release's launcher is not staged", "version", r.Version, "launcher_version", l.Version, "why", why)
		return nil, ""
	}
	if rl, ok, err := rec.LookupLauncher(ctx, l.Version); err != nil {
		return nil, d.launcherNote(r, "not staged: reading the records: %v", err)
	} else if ok {
		// One version, two builds: a launcher changed without its version being bumped.
		d.cfg.Log.Warn("the release's launcher conflicts with the one recorded", "err",
			&rollback.DigestConflict{Version: "launcher " + l.Version, Recorded: rl.Digest, Got: l.Digest})
		return nil, d.launcherNote(r, "not staged: this node has %s with digest %s, the release carries digest %s under the same version",
			l.Version, short(rl.Digest), short(l.Digest))
	}
	if _, err := os.Lstat(rollback.LauncherDir(d.cfg.Root, l.Version)); err == nil {
		return nil, d.launcherNote(r, "not staged: %s is already there, not recorded with this digest", rollback.LauncherDir(d.cfg.Root, l.Version))
	}
	need := l.Size
	if r.launcherObject() {
		need += r.Build.Launcher.Size // its download, beside the binary until it is decompressed
	}
	if err := d.room(r.Version, d.cfg.Root, need, fmt.Sprintf("the launcher (%s)", mib(need))); err != nil {
		return nil, d.launcherNote(r, "not staged: %v", errors.Unwrap(err))
	}
	st, err := rollback.NewLauncherStaging(d.cfg.Root)
	if err != nil {
		return nil, d.launcherNote(r, "not staged: %v", err)
	}
	d.launcherStagings.Add(1)
	return &launcherPlan{want: l, rec: rec, st: st}, ""
}

// launcherUnneeded says why this node needs no staging of l ("" when it does): it has a
// launcher of l's digest, under launchers/ or as the floor, or l is not newer than the floor or
// the launcher running — a launcher takes over only from an older one (rollback.ChooseLauncher),
// so such a one would wait under launchers/, on trial, for ever.
func launcherUnneeded(ctx context.Context, rec LauncherRecords, l wire.ReleaseLauncher) (string, error) {
	if known, err := rec.HasLauncherDigest(ctx, l.Digest); err != nil || known {
		return "this node has a launcher of its digest", err
	}
	cur, err := rec.CurrentLauncher(ctx)
	if err != nil {
		return "", err
	}
	switch {
	case cur.FloorVersion != "" && semver.Compare(l.Version, cur.FloorVersion) <= 0:
		return "it is not newer than the floor, " + cur.FloorVersion, nil
	case cur.Version != "" && semver.Compare(l.Version, cur.Version) <= 0:
		return "it is not newer than the launcher running, " + cur.Version, nil
	}
	// A floor of that digest under a lower version (the release stamped it otherwise) is the
	// same program: not staged either. A floor that cannot be read is no reason to skip it.
	if cur.FloorPath != "" {
		if got, err := fileDigest(cur.FloorPath); err == nil && got == l.Digest {
			return "the floor, " + cur.FloorPath + ", is that build", nil
		}
	}
	return "", nil
}

// fileDigest is the sha256 digest of the file at path.
func fileDigest(path string) (digest.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return digest.SHA256.FromReader(f)
}

// want is what the extractor writes and verifies: nothing when no launcher is to be staged.
func (p *launcherPlan) extract() archive.LauncherWant {
	if p == nil {
		return archive.LauncherWant{}
	}
	return archive.LauncherWant{Dir: p.st.Dir(), Size: p.want.Size, Digest: p.want.Digest}
}

func (p *launcherPlan) discard() {
	if p != nil {
		p.st.Discard()
	}
}

// launcherFromArchive commits the launcher the extractor wrote from the archive (schemas 2 and
// 3), or says why there is none. It returns the note for the heartbeat.
func (d *Deliverer) launcherFromArchive(ctx context.Context, p *launcherPlan, r release, rel archive.Release) string {
	switch {
	case rel.LauncherErr != nil:
		return d.launcherNote(r, "not staged: %v", rel.LauncherErr)
	case rel.Launcher == nil || rel.Launcher.Path == "":
		return d.launcherNote(r, "not staged: the archive carries no %s though its manifest names one", archive.LauncherName)
	}
	return d.commitLauncher(ctx, p, r, rel.Launcher.Path, "")
}

// commitLauncher runs the own preflight of the launcher written (and verified) at path, and
// puts it in place as launchers/<v>, recorded as delivered with the host release that carried
// it. from is the base version of the delta it was rebuilt from, if any. It returns the note
// for the heartbeat.
func (d *Deliverer) commitLauncher(ctx context.Context, p *launcherPlan, r release, path, from string) string {
	l := p.want
	if err := d.launcherPreflight(ctx, path, l.Version); err != nil {
		return d.launcherNote(r, "not staged: %v", err)
	}
	err := p.st.CommitLauncher(ctx, p.rec, rollback.LauncherVersion{
		Version: l.Version, Digest: l.Digest, Size: l.Size,
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: r.keyID},
		CarriedBy:  r.Version,
	})
	if err != nil {
		return d.launcherNote(r, "not staged: %v", err)
	}
	d.cfg.Log.Info("launcher version staged", "launcher_version", l.Version, "digest", string(l.Digest),
		"carried_by", r.Version, "delta_from", from, "dir", rollback.LauncherDir(d.cfg.Root, l.Version))
	note := "launcher " + l.Version + " staged"
	if from != "" {
		note += " from a delta of " + from
	}
	return text.Cut(note, maxLauncherNote)
}

// launcherNote logs why r's launcher was not staged and returns it, bounded, for the heartbeat.
func (d *Deliverer) launcherNote(r release, format string, args ...any) string {
	lv := r.Build.Launcher.Version
	note := text.Cut(fmt.Sprintf("launcher %s ", lv)+fmt.Sprintf(format, args...), maxLauncherNote)
	d.cfg.Log.Warn("the release's launcher is not staged; the host version is staged as it would be without it",
		"version", r.Version, "launcher_version", lv, "why", note)
	return note
}

// launcherPreflight runs `BIN version`, which must print version on its first line, within
// PreflightTimeout and with its output bounded, as the host's own preflight is run.
func (d *Deliverer) launcherPreflight(ctx context.Context, bin, version string) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.PreflightTimeout)
	defer cancel()
	var stdout, stderr capped
	stdout.max, stderr.max = launcherOutputCap, launcherOutputCap
	cmd, err := d.runStaged(ctx, bin, []string{rollback.CmdVersion}, nil, &stdout, &stderr)
	if errors.Is(err, exec.ErrWaitDelay) {
		_ = killGroup(cmd)
	}
	first, _, _ := strings.Cut(stdout.buf.String(), "\n")
	got := strings.TrimSpace(first)
	switch {
	case errors.Is(err, exec.ErrWaitDelay) && got == version:
		return nil
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("`mesh-launcher version` did not finish within %s%s", d.cfg.PreflightTimeout, stderr.tail())
	case err != nil:
		return fmt.Errorf("`mesh-launcher version` failed (%v)%s", err, stderr.tail())
	case got != version:
		return fmt.Errorf("`mesh-launcher version` printed %q but its manifest says %s", text.Bound(got), version)
	}
	return nil
}

// short is a digest's algorithm and first 12 hex digits, for a bounded note.
func short(d digest.Digest) string {
	if e := d.Encoded(); len(e) > 12 {
		return d.Algorithm().String() + ":" + e[:12] + "…"
	}
	return string(d)
}
