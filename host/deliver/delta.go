package deliver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/delta"
)

// A release may list deltas of its host binary against earlier releases' (manifest schema 3,
// decision 0028). A node whose versions/<base>/mesh-host has exactly a listed base digest
// fetches that delta instead of the archive, rebuilds the binary into the staging directory
// while hashing it, and goes on as with an extracted binary only if it has the manifest's signed
// binary digest. Anything else — no base, a base modified on disk, a delta missing, corrupt,
// refused or rebuilding other bytes, a bus failure while fetching it — is logged and the node
// fetches the full archive in the same attempt: a delta is never a reason to refuse the release
// (nor, so, to mark it bad). Memory while rebuilding: the base, read whole (the dictionary), and
// one zstd window (wire/delta.MemoryBound: 13 + 64 + 1 MiB at most for a 13 MB base).
//
// A release whose launcher rides in its archive (schemas 2 and 3) and which this node would stage
// comes as the archive: the delta rebuilds the host binary only. A schema 4 launcher is its own
// object with its own deltas (launcherobj.go), rebuilt the same way (applyDelta).

// deltaDownloadName is the delta's name in the staging directory while it is fetched.
const deltaDownloadName = "download.delta.zst"

// deltaUse says which delta a delivery used: Base is "" when it used none.
type deltaUse struct {
	Base string
	Size int64
}

// deltaFits reports whether r lists deltas and comes whole without its archive: its archive
// carries no launcher this node would stage (planLauncher's rules, read without staging anything).
func (d *Deliverer) deltaFits(ctx context.Context, r release) bool {
	if len(r.Deltas) == 0 {
		return false
	}
	if !r.hasLauncher() || !r.LauncherInArchive {
		return true
	}
	rec, ok := d.cfg.Records.(LauncherRecords)
	if !ok || !rec.HasLaunchers() {
		return true // launchers are not staged on this node at all
	}
	why, err := launcherUnneeded(ctx, rec, r.launcher())
	return err == nil && why != ""
}

// launcherAfterDelta is the launcher note of a release that came as a delta: planLauncher's
// (which, as deltaFits checked, stages nothing), unless the records changed meanwhile.
func (d *Deliverer) launcherAfterDelta(ctx context.Context, r release) string {
	lp, note := d.planLauncher(ctx, r)
	if lp != nil {
		lp.discard()
		return d.launcherNote(r, "not staged: the release came as a delta, which carries no launcher; it comes with the next full archive")
	}
	return note
}

// fromDelta tries r's deltas whose base this node has, in the manifest's order (newest base
// first), and rebuilds the binary into staging from the first that it can fetch, adding what it
// fetches to moved. It returns the binary and the delta used (Base "" when none was).
func (d *Deliverer) fromDelta(ctx context.Context, r release, staging string, moved *int64, progress func(Progress)) (archive.Binary, deltaUse) {
	rd, base, why := d.findBase(r)
	if base == nil {
		if why != "" {
			d.cfg.Log.Info("no delta used; fetching the full archive", "version", r.Version, "why", why)
		}
		return archive.Binary{}, deltaUse{}
	}
	out := rebuilt{dir: staging, file: archive.BinaryName, digest: r.BinaryDigest, max: d.cfg.MaxBinary, label: rd.BaseVersion}
	bin, err := d.applyDelta(ctx, r.Version, rd, base, out, moved, progress)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Log.Warn("the delta was not used; fetching the full archive", "version", r.Version, "delta_from", rd.BaseVersion, "err", err)
		}
		os.Remove(filepath.Join(staging, deltaDownloadName))
		os.Remove(filepath.Join(staging, archive.BinaryName))
		return archive.Binary{}, deltaUse{}
	}
	return bin, deltaUse{Base: rd.BaseVersion, Size: rd.Size}
}

// findBase returns the first delta r lists whose base this node has with exactly its digest,
// and the base's bytes; or, when none, why not ("" when the node has none of the bases).
func (d *Deliverer) findBase(r release) (wire.ReleaseDelta, []byte, string) {
	var why string
	for _, rd := range r.Deltas {
		path := rollback.BinaryPath(d.cfg.Root, rd.BaseVersion)
		fi, err := os.Lstat(path)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Size() > d.cfg.MaxBinary {
			why = fmt.Sprintf("%s is %d bytes, over the %d-byte limit", path, fi.Size(), d.cfg.MaxBinary)
			continue
		}
		b, err := readBase(path, d.cfg.MaxBinary)
		if err != nil {
			why = err.Error()
			continue
		}
		if got := digest.FromBytes(b); got != rd.BaseDigest {
			why = fmt.Sprintf("%s is %s, not the base %s the delta was made from (modified on this node?)", path, got, rd.BaseDigest)
			continue
		}
		return rd, b, ""
	}
	return wire.ReleaseDelta{}, nil, why
}

// readBase reads a base binary whole, at most max bytes.
func readBase(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is over the %d-byte limit", path, max)
	}
	return b, nil
}

// rebuilt is where a delta's binary goes and what it must be.
type rebuilt struct {
	dir, file string        // the staging directory and the binary's name in it
	digest    digest.Digest // the signed digest of the binary
	max       int64         // the most bytes it may have
	// label is the progress's Delta while the delta is fetched: the host's base version; ""
	// for a launcher's delta, which the heartbeat's fetch.delta does not name.
	label string
}

// applyDelta fetches the delta rd of version's release into out.dir, verified against its
// signed size and digest (adding what arrives to moved), and rebuilds the binary from base into
// out.dir/out.file, which it keeps only if it has the signed digest. The delta's download is
// removed once it is used.
func (d *Deliverer) applyDelta(ctx context.Context, version string, rd wire.ReleaseDelta, base []byte, out rebuilt, moved *int64, progress func(Progress)) (archive.Binary, error) {
	// Room for the delta and a binary about the base's size; a binary larger than that which
	// fills the disk fails its write, and the archive's own checks then say so.
	if err := d.room(version, out.dir, rd.Size+int64(len(base)), fmt.Sprintf("the delta (%s) and a binary about its base's size", mib(rd.Size))); err != nil {
		return archive.Binary{}, err
	}
	o := object{version: version, name: rd.Object, size: rd.Size, digest: rd.Digest, delta: out.label}
	f, err := d.fetch(ctx, o, out.dir, deltaDownloadName, moved, progress)
	if err != nil {
		return archive.Binary{}, err
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return archive.Binary{}, err
	}
	progress(Progress{Version: version, State: StateVerifying, Bytes: rd.Size, Total: rd.Size, Percent: 100, Delta: out.label, Moved: *moved})
	path := filepath.Join(out.dir, out.file)
	w, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.Mode)
	if err != nil {
		return archive.Binary{}, err
	}
	res, err := delta.Apply(ctx, w, base, bufio.NewReader(f), out.max)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return archive.Binary{}, fmt.Errorf("rebuild from %s: %w", rd.BaseVersion, err)
	}
	if res.Digest != out.digest {
		return archive.Binary{}, fmt.Errorf("%w: the delta from %s rebuilds %s, the manifest signed %s", delta.ErrRefused, rd.BaseVersion, res.Digest, out.digest)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return archive.Binary{}, err
	}
	return archive.Binary{Path: path, Size: res.Size, Digest: res.Digest}, nil
}
