package build

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/opencontainers/go-digest"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/delta"
)

// A release may list deltas of each platform's host binary against earlier releases' binaries
// of that platform, and of its launcher against earlier launchers' (decisions 0028, 0044): a
// node that has one of those binaries fetches a few hundred KB instead of the object. `mesh-release
// build --delta-from` makes them from earlier build directories or published versions;
// `mesh-release publish` adds them against the newest published versions.

// Base is a binary a delta is made against: an earlier release's host binary (Version the
// release's) or, with Launcher, an earlier launcher (Version the launcher's), of Platform,
// whose bytes were checked against the digest its manifest signed.
type Base struct {
	Version      string
	Platform     wire.Platform
	Launcher     bool
	BinaryDigest digest.Digest
	Binary       []byte
}

// what names a base in messages: "delta base v1.4.0 linux/arm64" or "launcher delta base …".
func (b Base) what() string {
	if b.Launcher {
		return "launcher delta base " + b.Version + " " + b.Platform.String()
	}
	return "delta base " + b.Version + " " + b.Platform.String()
}

// BaseFromDir reads the build in dir (manifest.json and the objects it names, as `mesh-release
// build` writes them, of any schema) as bases: each platform's host binary and its launcher.
func BaseFromDir(ctx context.Context, dir string, maxBinary int64) ([]Base, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("delta base %s: %w (is it the -o directory of an earlier `mesh-release build`?)", dir, err)
	}
	m, err := wire.ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("delta base %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	var out []Base
	for _, p := range m.PlatformList() {
		pb, err := m.For(p)
		if err != nil {
			return nil, fmt.Errorf("delta base %s: %w", dir, err)
		}
		f, err := os.Open(filepath.Join(dir, pb.Object))
		if err != nil {
			return nil, fmt.Errorf("delta base %s: the archive its manifest names: %w", dir, err)
		}
		bases, err := BaseFromArchive(ctx, f, pb, maxBinary)
		f.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, bases...)
		if pb.Launcher.Object == "" {
			continue
		}
		lf, err := os.Open(filepath.Join(dir, pb.Launcher.Object))
		if err != nil {
			return nil, fmt.Errorf("delta base %s: the launcher object its manifest names: %w", dir, err)
		}
		lb, err := LauncherBase(ctx, lf, pb)
		lf.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, lb)
	}
	return out, nil
}

// BaseFromArchive reads the host binary out of a release's archive (r, of the build b) as a
// base, checking the archive against b's digest and the binary against its binary digest; and,
// when the archive carries the launcher (schema 2 and 3), the launcher as a second base.
func BaseFromArchive(ctx context.Context, r io.Reader, b wire.Build, maxBinary int64) ([]Base, error) {
	tmp, err := os.MkdirTemp("", "mesh-release-base-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	what := "delta base " + b.Version + " " + b.Platform.String()
	want := archive.LauncherWant{}
	if b.LauncherInArchive {
		want = archive.LauncherWant{Dir: filepath.Join(tmp, "launcher"), Size: b.Launcher.BinarySize, Digest: b.Launcher.BinaryDigest}
		if err := os.Mkdir(want.Dir, 0o755); err != nil {
			return nil, err
		}
	}
	v := b.Digest.Verifier()
	tee := io.TeeReader(r, v)
	rel, err := archive.ExtractRelease(ctx, tee, tmp, want, archive.Limits{MaxBinary: maxBinary})
	if err == nil {
		_, err = io.Copy(io.Discard, tee)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", what, b.Object, err)
	}
	if !v.Verified() {
		return nil, fmt.Errorf("%s: %s does not match the digest its manifest signed, %s", what, b.Object, b.Digest)
	}
	if rel.Host.Digest != b.BinaryDigest {
		return nil, fmt.Errorf("%s: its binary is %s but its manifest signed %s", what, rel.Host.Digest, b.BinaryDigest)
	}
	bin, err := os.ReadFile(rel.Host.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := []Base{{Version: b.Version, Platform: b.Platform, BinaryDigest: b.BinaryDigest, Binary: bin}}
	// A launcher the archive carries that does not read back as signed is no base: the host's is
	// still good, and a launcher delta is a saving, never a need.
	if b.LauncherInArchive && rel.LauncherErr == nil && rel.Launcher != nil {
		if lb, err := os.ReadFile(rel.Launcher.Path); err == nil && digest.FromBytes(lb) == b.Launcher.BinaryDigest {
			out = append(out, Base{Version: b.Launcher.Version, Platform: b.Platform, Launcher: true, BinaryDigest: b.Launcher.BinaryDigest, Binary: lb})
		}
	}
	return out, nil
}

// LauncherBase reads a launcher object (r, the launcher of the build b) as a base, checked
// against the object's and the binary's digests.
func LauncherBase(ctx context.Context, r io.Reader, b wire.Build) (Base, error) {
	l := b.Launcher
	what := "launcher delta base " + l.Version + " " + b.Platform.String()
	v := l.Digest.Verifier()
	bin, err := DecompressLauncher(ctx, io.TeeReader(r, v))
	if err != nil {
		return Base{}, fmt.Errorf("%s: %s: %w", what, l.Object, err)
	}
	if !v.Verified() {
		return Base{}, fmt.Errorf("%s: %s does not match the digest its manifest signed, %s", what, l.Object, l.Digest)
	}
	if got := digest.FromBytes(bin); got != l.BinaryDigest {
		return Base{}, fmt.Errorf("%s: its binary is %s but its manifest signed %s", what, got, l.BinaryDigest)
	}
	return Base{Version: l.Version, Platform: b.Platform, Launcher: true, BinaryDigest: l.BinaryDigest, Binary: bin}, nil
}

// AddDeltas makes, for each platform of m (read from its objects in dir), the deltas of its host
// binary against each host base of that platform and of its launcher against each launcher base
// of that platform older than it, that m does not list yet; writes each into dir under its
// wire name, and returns m listing them as well — newest base first, at most wire.MaxDeltas a
// list — signed again with key, after writing it to dir's manifest.json. A host base of m's own
// version or newer is refused. A manifest of schema 1 to 3 (a build from before schema 4) gets
// host deltas only, and becomes schema 3.
func AddDeltas(ctx context.Context, dir string, m wire.Manifest, bases []Base, key ed25519.PrivateKey, maxBinary int64) (wire.Manifest, error) {
	if len(bases) == 0 {
		return m, nil
	}
	if len(key) != ed25519.PrivateKeySize {
		return m, fmt.Errorf("deltas need the release key to sign the manifest listing them; pass --key")
	}
	if id := wire.KeyID(key.Public().(ed25519.PublicKey)); m.KeyID != "" && m.KeyID != id {
		return m, fmt.Errorf("%s was signed by key %s, and this release key is %s: sign deltas with the key that signed the build", filepath.Join(dir, ManifestFile), m.KeyID, id)
	}
	for _, b := range bases {
		if !b.Launcher && semver.Compare(b.Version, m.Version) >= 0 {
			return m, fmt.Errorf("delta base %s is not older than the release, %s; a delta is made against an earlier release", b.Version, m.Version)
		}
	}
	var (
		out wire.Manifest
		err error
	)
	if m.Schema == wire.ManifestSchemaPlatforms {
		out, err = addPlatformDeltas(ctx, dir, m, bases, maxBinary)
	} else {
		out, err = addLegacyDeltas(ctx, dir, m, bases, maxBinary)
	}
	if err != nil {
		return m, err
	}
	if err := out.Sign(key); err != nil {
		return m, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ManifestFile), out.Marshal(), 0o644); err != nil {
		return m, fmt.Errorf("write the manifest: %w", err)
	}
	return out, nil
}

// addPlatformDeltas is AddDeltas for a schema 4 manifest, unsigned.
func addPlatformDeltas(ctx context.Context, dir string, m wire.Manifest, bases []Base, maxBinary int64) (wire.Manifest, error) {
	out := m
	out.Platforms = slices.Clone(m.Platforms)
	for i := range out.Platforms {
		pb := &out.Platforms[i]
		p, err := wire.ParsePlatform(pb.Platform)
		if err != nil {
			return m, err
		}
		b, err := m.For(p)
		if err != nil {
			return m, err
		}
		var host, launcher []Base
		for _, base := range bases {
			switch {
			case base.Platform != p:
			case !base.Launcher:
				host = append(host, base)
			case !pb.Launcher.IsZero() && semver.Compare(base.Version, pb.Launcher.Version) < 0 && base.BinaryDigest != pb.Launcher.BinaryDigest:
				launcher = append(launcher, base)
			}
		}
		if len(host) > 0 {
			next, err := hostBinary(ctx, dir, b, maxBinary)
			if err != nil {
				return m, err
			}
			if pb.Deltas, err = addTo(dir, pb.Deltas, host, next, func(base string) string { return wire.PlatformDeltaObjectName(m.Version, base, p) }); err != nil {
				return m, err
			}
		}
		if len(launcher) > 0 {
			next, err := launcherBinary(ctx, dir, b)
			if err != nil {
				return m, err
			}
			pb.Launcher.Deltas, err = addTo(dir, pb.Launcher.Deltas, launcher, next, func(base string) string {
				return wire.LauncherDeltaObjectName(pb.Launcher.Version, base, p)
			})
			if err != nil {
				return m, err
			}
		}
	}
	return out, nil
}

// addLegacyDeltas is AddDeltas for a schema 1 to 3 manifest (one platform, host deltas), unsigned.
func addLegacyDeltas(ctx context.Context, dir string, m wire.Manifest, bases []Base, maxBinary int64) (wire.Manifest, error) {
	p := m.PlatformList()[0]
	var host []Base
	for _, base := range bases {
		if !base.Launcher && base.Platform == p {
			host = append(host, base)
		}
	}
	if len(host) == 0 {
		return m, nil
	}
	b, err := m.For(p)
	if err != nil {
		return m, err
	}
	next, err := hostBinary(ctx, dir, b, maxBinary)
	if err != nil {
		return m, err
	}
	out := m
	if out.Deltas, err = addTo(dir, m.Deltas, host, next, func(base string) string { return wire.DeltaObjectName(m.Version, base, m.OS, m.Arch) }); err != nil {
		return m, err
	}
	out.Schema = wire.ManifestSchemaWithDeltas
	return out, nil
}

// addTo makes the delta of next against each base list does not name yet, into dir as
// object(base version), and returns list with them: newest base first, at most wire.MaxDeltas.
func addTo(dir string, list []wire.ReleaseDelta, bases []Base, next []byte, object func(string) string) ([]wire.ReleaseDelta, error) {
	out := slices.Clone(list)
	for _, b := range bases {
		if slices.ContainsFunc(out, func(d wire.ReleaseDelta) bool { return d.BaseVersion == b.Version }) {
			continue
		}
		if len(out) == wire.MaxDeltas {
			break
		}
		d, err := writeDelta(dir, object(b.Version), b, next)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b wire.ReleaseDelta) int { return semver.Compare(b.BaseVersion, a.BaseVersion) })
	return out, nil
}

// hostBinary reads b's host binary out of its archive in dir, checked against the signed digests.
func hostBinary(ctx context.Context, dir string, b wire.Build, maxBinary int64) ([]byte, error) {
	f, err := os.Open(filepath.Join(dir, b.Object))
	if err != nil {
		return nil, fmt.Errorf("the archive the manifest names: %w", err)
	}
	defer f.Close()
	b.LauncherInArchive = false // the host binary is all that is wanted
	bases, err := BaseFromArchive(ctx, f, b, maxBinary)
	if err != nil {
		return nil, err
	}
	return bases[0].Binary, nil
}

// launcherBinary reads b's launcher binary out of its object in dir, checked against the
// signed digests.
func launcherBinary(ctx context.Context, dir string, b wire.Build) ([]byte, error) {
	f, err := os.Open(filepath.Join(dir, b.Launcher.Object))
	if err != nil {
		return nil, fmt.Errorf("the launcher object the manifest names: %w", err)
	}
	defer f.Close()
	base, err := LauncherBase(ctx, f, b)
	if err != nil {
		return nil, err
	}
	return base.Binary, nil
}

// writeDelta writes the delta of next against b into dir as name, atomically, and describes it.
func writeDelta(dir, name string, b Base, next []byte) (wire.ReleaseDelta, error) {
	if digest.FromBytes(b.Binary) != b.BinaryDigest {
		return wire.ReleaseDelta{}, fmt.Errorf("%s: its binary does not have the digest %s", b.what(), b.BinaryDigest)
	}
	tmp, err := atomicfile.Create(dir, 0o644)
	if err != nil {
		return wire.ReleaseDelta{}, fmt.Errorf("write the delta from %s: %w", b.what(), err)
	}
	h, n := sha256.New(), &counter{}
	if err := delta.Make(io.MultiWriter(tmp, h, n), b.Binary, next); err != nil {
		tmp.Abort()
		return wire.ReleaseDelta{}, fmt.Errorf("the delta from %s: %w", b.what(), err)
	}
	if n.n > wire.MaxDeltaSize {
		tmp.Abort()
		return wire.ReleaseDelta{}, fmt.Errorf("the delta from %s is %d bytes, over the %d a manifest may name", b.what(), n.n, wire.MaxDeltaSize)
	}
	if err := tmp.Commit(filepath.Join(dir, name)); err != nil {
		return wire.ReleaseDelta{}, fmt.Errorf("write the delta from %s: %w", b.what(), err)
	}
	return wire.ReleaseDelta{BaseVersion: b.Version, BaseDigest: b.BinaryDigest, Object: name, Size: n.n,
		Digest: digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))}, nil
}
