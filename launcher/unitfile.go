package launcher

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
)

// A package upgrade leaves the unit running (seed 000: it never stops the host), so a unit file
// it changed takes effect only at the unit's next start. `mesh-launcher status` says so, naming
// what an operator would otherwise have to infer from systemctl's "changed on disk" warning.

// UnitFileChangedNote is what `status` says when the unit file changed after the unit started.
const UnitFileChangedNote = "unit file changed on disk since this launcher started: it takes effect at the unit's next start"

// UnitName is the launcher's systemd unit.
const UnitName = "mesh-launcher.service"

// unitFilePaths are where the unit file is looked for when systemctl cannot say: an
// administrator's copy first, then the package's (/lib, and /usr/lib on a merged /usr).
var unitFilePaths = []string{
	"/etc/systemd/system/" + UnitName,
	"/lib/systemd/system/" + UnitName,
	"/usr/lib/systemd/system/" + UnitName,
}

// FindUnitFile is the path systemd loaded the unit from (its FragmentPath), or when systemctl is
// not there or does not know the unit, the first of the usual paths that exists; "" if none.
func FindUnitFile(ctx context.Context) string {
	return findUnitFile(ctx, "systemctl", unitFilePaths)
}

func findUnitFile(ctx context.Context, systemctl string, paths []string) string {
	if p, err := exec.LookPath(systemctl); err == nil {
		// Bounded: status must answer even when systemd does not.
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, p, "show", "-p", "FragmentPath", "--value", UnitName).Output()
		if line, _, _ := bytes.Cut(out, []byte("\n")); err == nil && len(line) < 4096 && filepath.IsAbs(string(line)) {
			return string(line)
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// unitFileChanged reports whether the unit file find names changed since the unit's last fresh
// start as the records hold it (an exec keeps the unit, so only a start counts). When that start
// recorded the file's digest, changed is other content: dpkg rewrites the file at every upgrade,
// the same bytes or not. Otherwise it is a file written after the start, written being the later
// of its mtime and ctime (dpkg keeps the archive's mtime, SOURCE_DATE_EPOCH; the ctime is when it
// was put in place). No start recorded, no unit file, or records without the launcher's tables:
// false.
func unitFileChanged(ctx context.Context, r *rollback.Records, find func(context.Context) string) bool {
	cur, err := r.CurrentLauncher(ctx)
	if err != nil || cur.UnitStarted.IsZero() {
		return false
	}
	path := find(ctx)
	if path == "" {
		return false
	}
	if cur.UnitFileDigest != "" {
		d, err := unitFileDigest(path)
		return err == nil && d.String() != cur.UnitFileDigest
	}
	return fileWrittenAfter(path, cur.UnitStarted)
}

// maxUnitFile bounds what is read of a unit file to digest it.
const maxUnitFile = 1 << 20

// unitFileDigest is the sha256 of the unit file at path (at most maxUnitFile bytes of it).
func unitFileDigest(path string) (digest.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return digest.FromReader(io.LimitReader(f, maxUnitFile))
}

// recordUnitFile records, at the unit's start, the digest of the unit file systemd most likely
// loaded (the first of the usual paths: the launcher asks systemctl nothing while it starts).
func (l *Launcher) recordUnitFile(ctx context.Context) {
	var d digest.Digest
	for _, p := range unitFilePaths {
		if got, err := unitFileDigest(p); err == nil {
			d = got
			break
		}
	}
	if err := l.records.RecordUnitFile(ctx, d); err != nil {
		l.log.Warn("could not record the unit file's digest", "err", err)
	}
}

// fileWrittenAfter reports whether path's mtime or ctime is after t.
func fileWrittenAfter(path string, t time.Time) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	written := fi.ModTime()
	if c := changeTime(fi); c.After(written) {
		written = c
	}
	return written.After(t)
}
