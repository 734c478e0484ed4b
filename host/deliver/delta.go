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
// A release whose launcher this node would stage comes as the archive: the delta rebuilds the
// host binary only.

// deltaDownloadName is the delta's name in the staging directory while it is fetched.
const deltaDownloadName = "download.delta.zst"

// deltaUse says which delta a delivery used: Base is "" when it used none.
type deltaUse struct {
	Base string
	Size int64
}

// deltaFits reports whether m lists deltas and comes whole without its archive: it carries no
// launcher this node would stage (planLauncher's rules, read without staging anything).
func (d *Deliverer) deltaFits(ctx context.Context, m wire.Manifest) bool {
	if len(m.Deltas) == 0 {
		return false
	}
	if !m.HasLauncher() {
		return true
	}
	rec, ok := d.cfg.Records.(LauncherRecords)
	if !ok || !rec.HasLaunchers() {
		return true // launchers are not staged on this node at all
	}
	why, err := launcherUnneeded(ctx, rec, m.Launcher)
	return err == nil && why != ""
}

// launcherAfterDelta is the launcher note of a release that came as a delta: planLauncher's
// (which, as deltaFits checked, stages nothing), unless the records changed meanwhile.
func (d *Deliverer) launcherAfterDelta(ctx context.Context, m wire.Manifest) string {
	lp, note := d.planLauncher(ctx, m)
	if lp != nil {
		lp.discard()
		return d.launcherNote(m, "not staged: the release came as a delta, which carries no launcher; it comes with the next full archive")
	}
	return note
}

// fromDelta tries m's deltas whose base this node has, in the manifest's order (newest base
// first), and rebuilds the binary into staging from the first that it can fetch, adding what it
// fetches to moved. It returns the binary and the delta used (Base "" when none was).
func (d *Deliverer) fromDelta(ctx context.Context, m wire.Manifest, staging string, moved *int64, progress func(Progress)) (archive.Binary, deltaUse) {
	rd, base, why := d.findBase(m)
	if base == nil {
		if why != "" {
			d.cfg.Log.Info("no delta used; fetching the full archive", "version", m.Version, "why", why)
		}
		return archive.Binary{}, deltaUse{}
	}
	bin, err := d.rebuild(ctx, m, rd, base, staging, moved, progress)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Log.Warn("the delta was not used; fetching the full archive", "version", m.Version, "delta_from", rd.BaseVersion, "err", err)
		}
		os.Remove(filepath.Join(staging, deltaDownloadName))
		os.Remove(filepath.Join(staging, archive.BinaryName))
		return archive.Binary{}, deltaUse{}
	}
	return bin, deltaUse{Base: rd.BaseVersion, Size: rd.Size}
}

// findBase returns the first delta m lists whose base this node has with exactly its digest,
// and the base's bytes; or, when none, why not ("" when the node has none of the bases).
func (d *Deliverer) findBase(m wire.Manifest) (wire.ReleaseDelta, []byte, string) {
	var why string
	for _, rd := range m.Deltas {
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

// rebuild fetches the delta rd into staging, verified against its signed size and digest
// (adding what arrives to moved), and rebuilds the binary from base into staging/mesh-host, which
// it keeps only if it has m's signed binary digest.
func (d *Deliverer) rebuild(ctx context.Context, m wire.Manifest, rd wire.ReleaseDelta, base []byte, staging string, moved *int64, progress func(Progress)) (archive.Binary, error) {
	// Room for the delta and a binary about the base's size; a binary larger than that which
	// fills the disk fails its write, and the archive's own checks then say so.
	if err := d.room(m.Version, staging, rd.Size+int64(len(base)), fmt.Sprintf("the delta (%s) and a binary about its base's size", mib(rd.Size))); err != nil {
		return archive.Binary{}, err
	}
	o := object{version: m.Version, name: rd.Object, size: rd.Size, digest: rd.Digest, delta: rd.BaseVersion}
	f, err := d.fetch(ctx, o, staging, deltaDownloadName, moved, progress)
	if err != nil {
		return archive.Binary{}, err
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return archive.Binary{}, err
	}
	progress(Progress{Version: m.Version, State: StateVerifying, Bytes: rd.Size, Total: rd.Size, Percent: 100, Delta: rd.BaseVersion, Moved: *moved})
	path := filepath.Join(staging, archive.BinaryName)
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.Mode)
	if err != nil {
		return archive.Binary{}, err
	}
	res, err := delta.Apply(ctx, out, base, bufio.NewReader(f), d.cfg.MaxBinary)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return archive.Binary{}, fmt.Errorf("rebuild from %s: %w", rd.BaseVersion, err)
	}
	if res.Digest != m.BinaryDigest {
		return archive.Binary{}, fmt.Errorf("%w: the delta from %s rebuilds %s, the manifest signed %s", delta.ErrRefused, rd.BaseVersion, res.Digest, m.BinaryDigest)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return archive.Binary{}, err
	}
	return archive.Binary{Path: path, Size: res.Size, Digest: res.Digest}, nil
}
