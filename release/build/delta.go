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

// A release may list deltas of its host binary against earlier releases' binaries (manifest
// schema 3, decision 0028): a node that has one of those binaries fetches a few hundred KB
// instead of the archive. `mesh-release build --delta-from` makes them from earlier build
// directories or published versions; `mesh-release publish` adds them against the newest
// published versions.

// Base is a release a delta is made against: its version and its host binary, whose bytes were
// checked against the binary digest its manifest signed.
type Base struct {
	Version      string
	BinaryDigest digest.Digest
	Binary       []byte
}

// BaseFromDir reads the build in dir (manifest.json and its archive, as `mesh-release build`
// writes them) as a base.
func BaseFromDir(ctx context.Context, dir string, maxBinary int64) (Base, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return Base{}, fmt.Errorf("delta base %s: %w (is it the -o directory of an earlier `mesh-release build`?)", dir, err)
	}
	m, err := wire.ParseManifest(b)
	if err != nil {
		return Base{}, fmt.Errorf("delta base %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	f, err := os.Open(filepath.Join(dir, m.Object))
	if err != nil {
		return Base{}, fmt.Errorf("delta base %s: the archive its manifest names: %w", dir, err)
	}
	defer f.Close()
	return BaseFromArchive(ctx, f, m, maxBinary)
}

// BaseFromArchive reads the host binary out of a release's archive (r, whose manifest is m) as
// a base, checking the archive against m's digest and the binary against its binary digest.
func BaseFromArchive(ctx context.Context, r io.Reader, m wire.Manifest, maxBinary int64) (Base, error) {
	tmp, err := os.MkdirTemp("", "mesh-release-base-*")
	if err != nil {
		return Base{}, err
	}
	defer os.RemoveAll(tmp)
	v := m.Digest.Verifier()
	tee := io.TeeReader(r, v)
	rel, err := archive.ExtractRelease(ctx, tee, tmp, archive.LauncherWant{}, archive.Limits{MaxBinary: maxBinary})
	if err == nil {
		_, err = io.Copy(io.Discard, tee)
	}
	if err != nil {
		return Base{}, fmt.Errorf("delta base %s: %s: %w", m.Version, m.Object, err)
	}
	if !v.Verified() {
		return Base{}, fmt.Errorf("delta base %s: %s does not match the digest its manifest signed, %s", m.Version, m.Object, m.Digest)
	}
	if rel.Host.Digest != m.BinaryDigest {
		return Base{}, fmt.Errorf("delta base %s: its binary is %s but its manifest signed %s", m.Version, rel.Host.Digest, m.BinaryDigest)
	}
	bin, err := os.ReadFile(rel.Host.Path)
	if err != nil {
		return Base{}, fmt.Errorf("delta base %s: %w", m.Version, err)
	}
	return Base{Version: m.Version, BinaryDigest: m.BinaryDigest, Binary: bin}, nil
}

// AddDeltas makes the delta of m's host binary (read from its archive in dir) against each base
// m does not list yet, writes each into dir as wire.DeltaObjectName, and returns m listing them
// as well — schema 3, newest base first, signed again with key — after writing it to dir's
// manifest.json. A base of m's own version or newer is refused; at most wire.MaxDeltas are
// listed in all.
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
		if semver.Compare(b.Version, m.Version) >= 0 {
			return m, fmt.Errorf("delta base %s is not older than the release, %s; a delta is made against an earlier release", b.Version, m.Version)
		}
	}
	next, err := binaryOf(ctx, dir, m, maxBinary)
	if err != nil {
		return m, err
	}
	out := m
	out.Deltas = slices.Clone(m.Deltas)
	for _, b := range bases {
		if slices.ContainsFunc(out.Deltas, func(d wire.ReleaseDelta) bool { return d.BaseVersion == b.Version }) {
			continue
		}
		if len(out.Deltas) == wire.MaxDeltas {
			break
		}
		d, err := writeDelta(dir, out, b, next)
		if err != nil {
			return m, err
		}
		out.Deltas = append(out.Deltas, d)
	}
	slices.SortFunc(out.Deltas, func(a, b wire.ReleaseDelta) int { return semver.Compare(b.BaseVersion, a.BaseVersion) })
	out.Schema = wire.ManifestSchemaWithDeltas
	if err := out.Sign(key); err != nil {
		return m, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ManifestFile), out.Marshal(), 0o644); err != nil {
		return m, fmt.Errorf("write the manifest: %w", err)
	}
	return out, nil
}

// binaryOf reads m's host binary out of its archive in dir, checked against the signed digests.
func binaryOf(ctx context.Context, dir string, m wire.Manifest, maxBinary int64) ([]byte, error) {
	f, err := os.Open(filepath.Join(dir, m.Object))
	if err != nil {
		return nil, fmt.Errorf("the archive the manifest names: %w", err)
	}
	defer f.Close()
	b, err := BaseFromArchive(ctx, f, m, maxBinary)
	if err != nil {
		return nil, err
	}
	return b.Binary, nil
}

// writeDelta writes the delta of next against b into dir, atomically, and describes it.
func writeDelta(dir string, m wire.Manifest, b Base, next []byte) (wire.ReleaseDelta, error) {
	if digest.FromBytes(b.Binary) != b.BinaryDigest {
		return wire.ReleaseDelta{}, fmt.Errorf("delta base %s: its binary does not have the digest %s", b.Version, b.BinaryDigest)
	}
	name := wire.DeltaObjectName(m.Version, b.Version, m.OS, m.Arch)
	tmp, err := atomicfile.Create(dir, 0o644)
	if err != nil {
		return wire.ReleaseDelta{}, fmt.Errorf("write the delta from %s: %w", b.Version, err)
	}
	h, n := sha256.New(), &counter{}
	if err := delta.Make(io.MultiWriter(tmp, h, n), b.Binary, next); err != nil {
		tmp.Abort()
		return wire.ReleaseDelta{}, fmt.Errorf("the delta from %s: %w", b.Version, err)
	}
	if n.n > wire.MaxDeltaSize {
		tmp.Abort()
		return wire.ReleaseDelta{}, fmt.Errorf("the delta from %s is %d bytes, over the %d a manifest may name", b.Version, n.n, wire.MaxDeltaSize)
	}
	if err := tmp.Commit(filepath.Join(dir, name)); err != nil {
		return wire.ReleaseDelta{}, fmt.Errorf("write the delta from %s: %w", b.Version, err)
	}
	return wire.ReleaseDelta{BaseVersion: b.Version, BaseDigest: b.BinaryDigest, Object: name, Size: n.n,
		Digest: digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))}, nil
}
