package deliver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/ctxio"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// A schema 4 release names its launcher as its own object (wire.LauncherObject): the binary
// zstd-compressed, one object for every release that carries that launcher, with deltas of the
// binary against earlier launcher versions' binaries. A node that is to stage it (planLauncher's
// rules: no launcher of its digest here, newer than the floor and the launcher running, not
// marked bad) rebuilds it from a delta whose base it has — launchers/<base>/mesh-launcher or the
// floor, whichever has the base's signed digest — or else fetches the object and decompresses it,
// bounded by the signed binary_size, keeping it only with the signed binary_digest. Then the same
// preflight and commit as a launcher from an archive, before the host version is put in place.
// A node that needs no staging fetches no launcher byte. Anything wrong with a delta falls back to
// the object; anything wrong with the object is a note in the heartbeat, never a refusal of the
// host release.

// launcherDownloadName is the launcher object's name in the launcher's staging directory while
// it is fetched.
const launcherDownloadName = "download.launcher.zst"

// launcherFromObject stages r's launcher from its own object or a delta of it, when this node is
// to stage it, adding what it fetches to moved. It returns the note for the heartbeat ("" when
// there is nothing to say, or ctx ended).
func (d *Deliverer) launcherFromObject(ctx context.Context, r release, moved *int64, progress func(Progress)) string {
	lp, note := d.planLauncher(ctx, r)
	if lp == nil {
		return note
	}
	defer lp.discard()
	l := r.Build.Launcher
	if l.BinarySize <= 0 || l.BinarySize > wire.MaxLauncherSize {
		return d.launcherNote(r, "not staged: its binary_size is %d; a launcher is 1 to %d bytes", l.BinarySize, wire.MaxLauncherSize)
	}
	from := d.launcherFromDelta(ctx, r, lp, moved, progress)
	var err error
	if from == "" && ctx.Err() == nil {
		err = d.fetchLauncher(ctx, r, lp, moved, progress)
	}
	if ctx.Err() != nil {
		return ""
	}
	if err != nil {
		return d.launcherNote(r, "not staged: %v", err)
	}
	return d.commitLauncher(ctx, lp, r, lp.st.BinaryPath(), from)
}

// launcherFromDelta rebuilds r's launcher into the plan's staging directory from the first delta
// whose base this node has with its signed digest, and returns that base's version; "" when it
// used none (no base, or the delta failed: logged, and its files removed for the object's fetch).
func (d *Deliverer) launcherFromDelta(ctx context.Context, r release, lp *launcherPlan, moved *int64, progress func(Progress)) string {
	l := r.Build.Launcher
	if len(l.Deltas) == 0 {
		return ""
	}
	rd, base := d.findLauncherBase(ctx, lp.rec, l)
	if base == nil {
		return ""
	}
	out := rebuilt{dir: lp.st.Dir(), file: rollback.LauncherBinaryName, digest: l.BinaryDigest, max: l.BinarySize}
	bin, err := d.applyDelta(ctx, r.Version, rd, base, out, moved, progress)
	if err == nil && bin.Size != l.BinarySize {
		err = fmt.Errorf("the delta from %s rebuilds %d bytes, the manifest signed %d", rd.BaseVersion, bin.Size, l.BinarySize)
	}
	if err == nil {
		return rd.BaseVersion
	}
	if ctx.Err() == nil {
		d.cfg.Log.Warn("the launcher's delta was not used; fetching the launcher's object", "version", r.Version,
			"launcher_version", l.Version, "delta_from", rd.BaseVersion, "err", err)
	}
	os.Remove(filepath.Join(lp.st.Dir(), deltaDownloadName))
	os.Remove(lp.st.BinaryPath())
	return ""
}

// findLauncherBase returns the first of l's deltas whose base this node has, by the base's signed
// digest — under launchers/<base_version>, or the floor (whatever version it was stamped) — and
// the base's bytes; nil when it has none of them.
func (d *Deliverer) findLauncherBase(ctx context.Context, rec LauncherRecords, l wire.LauncherObject) (wire.ReleaseDelta, []byte) {
	var floor []byte // read once, when a delta asks for it
	floorRead := false
	for _, rd := range l.Deltas {
		if b, err := readBase(rollback.LauncherPath(d.cfg.Root, rd.BaseVersion), wire.MaxLauncherSize); err == nil && digest.FromBytes(b) == rd.BaseDigest {
			return rd, b
		}
		if !floorRead {
			floorRead = true
			if cur, err := rec.CurrentLauncher(ctx); err == nil && cur.FloorPath != "" {
				floor, _ = readBase(cur.FloorPath, wire.MaxLauncherSize)
			}
		}
		if floor != nil && digest.FromBytes(floor) == rd.BaseDigest {
			return rd, floor
		}
	}
	return wire.ReleaseDelta{}, nil
}

// fetchLauncher fetches r's launcher object into the plan's staging directory, verified against
// its signed size and digest (adding what arrives to moved), and decompresses the binary beside
// it; the object's download is removed once it is used.
func (d *Deliverer) fetchLauncher(ctx context.Context, r release, lp *launcherPlan, moved *int64, progress func(Progress)) error {
	l := r.Build.Launcher
	o := object{version: r.Version, name: l.Object, size: l.Size, digest: l.Digest}
	f, err := d.fetch(ctx, o, lp.st.Dir(), launcherDownloadName, moved, progress)
	if err != nil {
		return errors.Unwrap(err) // the *Error's cause: the note names the launcher, not a refusal of the host
	}
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := decompressLauncher(ctx, f, lp.st.BinaryPath(), l); err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// decompressLauncher writes the launcher binary compressed in src to path, at most l.BinarySize
// bytes and one zstd window of archive.DefaultMaxWindow, and keeps it only with exactly the signed
// size and digest.
func decompressLauncher(ctx context.Context, src io.Reader, path string, l wire.LauncherObject) (err error) {
	zr, err := zstd.NewReader(ctxio.Reader(ctx, src), zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(archive.DefaultMaxWindow), zstd.WithDecoderMaxMemory(archive.DefaultMaxWindow))
	if err != nil {
		return fmt.Errorf("decompress %s: %w", l.Object, err)
	}
	defer zr.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, archive.Mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	h := digest.SHA256.Digester()
	n, err := io.Copy(io.MultiWriter(out, h.Hash()), io.LimitReader(zr, l.BinarySize+1))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return fmt.Errorf("decompress %s: %w", l.Object, err)
	case n != l.BinarySize:
		return fmt.Errorf("%s decompresses to %s bytes, its manifest signed binary_size %d", l.Object, sizeSaid(n, l.BinarySize), l.BinarySize)
	case h.Digest() != l.BinaryDigest:
		return fmt.Errorf("%s decompresses to %s, its manifest signed binary_digest %s", l.Object, h.Digest(), l.BinaryDigest)
	}
	return nil
}

// sizeSaid is n as a size read with a cap of one byte over want: "more than want" at the cap.
func sizeSaid(n, want int64) string {
	if n > want {
		return fmt.Sprintf("more than %d", want)
	}
	return fmt.Sprint(n)
}
