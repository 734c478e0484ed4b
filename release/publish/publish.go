// Package publish puts host releases on the bus and sets which version nodes, or the fleet, should
// run.
//
// The archive goes into the archives object store and its manifest into the releases KV (the
// announcement hosts watch); the version to run is a signed target (release/targets).
package publish

import (
	"context"
	"crypto/ed25519"
	_ "crypto/sha256" // go-digest verifies sha256 only once it is linked in
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// ManifestFile is the manifest's name in a build directory (what `mesh-release build` writes).
const ManifestFile = "manifest.json"

// ErrAlreadyPublished is wrapped when a version is already on the bus with other bytes:
// versions are immutable once announced.
var ErrAlreadyPublished = errors.New("version is already published with other bytes")

// ErrNotPublished is what a *NotPublishedError is: a version with no manifest on the bus.
var ErrNotPublished = errors.New("version is not published")

// NotPublishedError is Published's answer for a version with no manifest in Bucket.
type NotPublishedError struct{ Version, Bucket string }

func (e *NotPublishedError) Error() string {
	return fmt.Sprintf("%s is not published in %s; publish it first with `mesh-release publish`", text.Bound(e.Version), e.Bucket)
}

func (e *NotPublishedError) Is(target error) bool { return target == ErrNotPublished }

// Result says what Publish did.
type Result struct {
	Manifest wire.Manifest
	// AlreadyPublished is true when the same archive was already announced under this version;
	// nothing was changed (publishing is idempotent).
	AlreadyPublished bool
	// Added are the deltas Publish made against published versions (Options.Deltas);
	// NoDeltas says why it made none when it could have ("" otherwise).
	Added    []wire.ReleaseDelta
	NoDeltas string
}

// DefaultDeltas is how many of the newest published versions Publish makes deltas against.
const DefaultDeltas = 3

// Options say how to publish. The zero value publishes the build as it is.
type Options struct {
	// Key signs the manifest again when deltas are added; without it none are added (the
	// Result says so). It must be the key that signed the build.
	Key ed25519.PrivateKey
	// Deltas is how many of the newest published versions older than the build's (same
	// platform) to add deltas against (decision 0028); 0 adds none.
	Deltas int
	// MaxBinary caps the binaries read to make deltas; default archive.DefaultMaxBinary.
	MaxBinary int64
}

// Publish reads a build directory (manifest.json and the archive it names) and puts it on the
// bus: the archive first, into object store names.Archives() under manifest.object, verified
// against the manifest while it is sent; then the manifest into KV names.Releases() under its
// version, created only if absent. Publishing a version again with the same archive is a
// no-op; with another archive it is refused with ErrAlreadyPublished.
func Publish(ctx context.Context, js jetstream.JetStream, names wire.Names, dir string) (Result, error) {
	return PublishWith(ctx, js, names, dir, Options{})
}

// PublishWith is Publish that first adds, when o says so and the version is not published yet,
// deltas of the build's binary against the newest published versions: made into dir and listed
// in its manifest, signed again with o.Key (build.AddDeltas). The deltas the manifest lists are
// put into the archives object store before the archive, and the manifest last, so a node never
// reads a manifest naming an object that is not there.
func PublishWith(ctx context.Context, js jetstream.JetStream, names wire.Names, dir string, o Options) (Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return Result{}, fmt.Errorf("read the build: %w (is %s the -o directory of `mesh-release build`?)", err, dir)
	}
	m, err := wire.ParseManifest(b)
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if m.Signature == "" {
		return Result{}, fmt.Errorf("%s: %w; build it with --key", filepath.Join(dir, ManifestFile), wire.ErrUnsigned)
	}
	kv, err := js.KeyValue(ctx, names.Releases())
	if err != nil {
		return Result{}, bucketErr("KV", names.Releases(), err)
	}
	obs, err := js.ObjectStore(ctx, names.Archives())
	if err != nil {
		return Result{}, bucketErr("object store", names.Archives(), err)
	}
	if done, err := alreadyPublished(ctx, kv, m); err != nil || done {
		if done {
			err = ensureObject(ctx, obs, m, dir)
		}
		return Result{Manifest: m, AlreadyPublished: done}, err
	}
	var res Result
	if o.Deltas > 0 {
		if m, res.Added, res.NoDeltas, err = addDeltas(ctx, kv, obs, dir, m, o); err != nil {
			return Result{}, err
		}
	}
	for _, d := range m.Deltas {
		if err := ensureFile(ctx, obs, m.Version, d.Object, d.Size, d.Digest, dir, "delta of mesh-host "+m.Version+" from "+d.BaseVersion+" "+m.OS+"/"+m.Arch); err != nil {
			return Result{}, err
		}
	}
	if err := ensureObject(ctx, obs, m, dir); err != nil {
		return Result{}, err
	}
	res.Manifest = m
	if _, err := kv.Create(ctx, m.Version, m.Marshal()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Someone announced this version while we uploaded.
			done, err := alreadyPublished(ctx, kv, m)
			return Result{Manifest: m, AlreadyPublished: done}, err
		}
		return Result{}, fmt.Errorf("announce %s in %s: %w", m.Version, names.Releases(), err)
	}
	return res, nil
}

// alreadyPublished reports whether m's version is announced with the same archive, and
// refuses when it is announced with another.
func alreadyPublished(ctx context.Context, kv jetstream.KeyValue, m wire.Manifest) (bool, error) {
	e, err := kv.Get(ctx, m.Version)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up %s in %s: %w", m.Version, kv.Bucket(), err)
	}
	old, err := wire.ParseManifest(e.Value())
	if err != nil {
		return false, fmt.Errorf("%w: %s holds an unreadable manifest for it (%v); build a new version", ErrAlreadyPublished, kv.Bucket(), err)
	}
	if old.Digest == m.Digest && old.BinaryDigest == m.BinaryDigest && old.Size == m.Size && old.Arch == m.Arch {
		return true, nil
	}
	return false, fmt.Errorf("%s: %w (published %s: archive %s; this build: archive %s); a released version never changes — build a new version",
		m.Version, ErrAlreadyPublished, old.Created, old.Digest, m.Digest)
}

// ensureObject puts the archive unless the store already holds exactly these bytes.
func ensureObject(ctx context.Context, obs jetstream.ObjectStore, m wire.Manifest, dir string) error {
	return ensureFile(ctx, obs, m.Version, m.Object, m.Size, m.Digest, dir, "mesh-host "+m.Version+" "+m.OS+"/"+m.Arch)
}

// ensureFile puts dir/name (the archive or a delta the manifest of version names, of size and
// digest) unless the store already holds exactly these bytes. The file is hashed while it is
// sent; if it does not match the manifest the object is removed again and the publish refused.
func ensureFile(ctx context.Context, obs jetstream.ObjectStore, version, name string, size int64, d digest.Digest, dir, desc string) error {
	want, _ := wire.ObjectStoreDigest(d)
	info, err := obs.GetInfo(ctx, name)
	switch {
	case err == nil && info.Digest == want && int64(info.Size) == size:
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return fmt.Errorf("look up %s: %w", name, err)
	}
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the file the manifest of %s names: %w", version, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() != size {
		return fmt.Errorf("%s is %d bytes but its manifest says %d; rebuild it", path, fi.Size(), size)
	}
	v := d.Verifier()
	info, err = obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: desc}, io.TeeReader(f, v))
	if err != nil {
		return fmt.Errorf("put %s: %w", name, err)
	}
	if !v.Verified() || info.Digest != want || int64(info.Size) != size {
		_ = obs.Delete(ctx, name)
		return fmt.Errorf("%s (%d bytes) does not match its manifest (%s, %d bytes); it changed after the build — rebuild it",
			path, info.Size, d, size)
	}
	return nil
}

// addDeltas makes deltas of m's binary against the o.Deltas newest published versions older
// than m's, for m's platform, that m does not list yet; it returns m listing them (signed again)
// and those it added, or, when it adds none though it could, why.
func addDeltas(ctx context.Context, kv jetstream.KeyValue, obs jetstream.ObjectStore, dir string, m wire.Manifest, o Options) (wire.Manifest, []wire.ReleaseDelta, string, error) {
	bases, err := newestBelow(ctx, kv, m, o.Deltas)
	if err != nil {
		return m, nil, "", err
	}
	if len(bases) == 0 {
		return m, nil, "", nil
	}
	if len(o.Key) == 0 {
		return m, nil, fmt.Sprintf("no release key given, so no deltas against the %d newest published %s (pass --key, or --no-deltas to say none are wanted)",
			len(bases), text.Plural(len(bases), "version", "versions")), nil
	}
	var read []build.Base
	for _, bm := range bases {
		b, err := FetchBase(ctx, obs, bm, o.MaxBinary)
		if err != nil {
			return m, nil, "", err
		}
		read = append(read, b)
	}
	out, err := build.AddDeltas(ctx, dir, m, read, o.Key, o.MaxBinary)
	if err != nil {
		return m, nil, "", err
	}
	var added []wire.ReleaseDelta
	for _, d := range out.Deltas {
		if !slices.ContainsFunc(m.Deltas, func(x wire.ReleaseDelta) bool { return x.BaseVersion == d.BaseVersion }) {
			added = append(added, d)
		}
	}
	return out, added, "", nil
}

// newestBelow returns the manifests of the n newest published versions older than m's, for
// m's platform, that m lists no delta from; unreadable entries are skipped.
func newestBelow(ctx context.Context, kv jetstream.KeyValue, m wire.Manifest, n int) ([]wire.Manifest, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the published versions in %s: %w", kv.Bucket(), err)
	}
	defer lister.Stop()
	var versions []string
	for k := range lister.Keys() {
		if wire.ValidVersion(k) && semver.Compare(k, m.Version) < 0 &&
			!slices.ContainsFunc(m.Deltas, func(d wire.ReleaseDelta) bool { return d.BaseVersion == k }) {
			versions = append(versions, k)
		}
	}
	slices.SortFunc(versions, func(a, b string) int { return semver.Compare(b, a) })
	var out []wire.Manifest
	for _, v := range versions {
		if len(out) == n || len(out)+len(m.Deltas) == wire.MaxDeltas {
			break
		}
		e, err := kv.Get(ctx, v)
		if err != nil {
			continue // deleted meanwhile
		}
		bm, err := wire.ParseManifest(e.Value())
		if err != nil || bm.OS != m.OS || bm.Arch != m.Arch || bm.Version != v {
			continue
		}
		out = append(out, bm)
	}
	return out, nil
}

// FetchBase reads a published release's host binary out of its archive in the object store, as
// a delta base, checked against its manifest m (which the caller read from the releases KV).
func FetchBase(ctx context.Context, obs jetstream.ObjectStore, m wire.Manifest, maxBinary int64) (build.Base, error) {
	r, err := obs.Get(ctx, m.Object)
	if err != nil {
		return build.Base{}, fmt.Errorf("delta base %s: fetch %s from the archives object store: %w", m.Version, m.Object, err)
	}
	defer r.Close()
	return build.BaseFromArchive(ctx, r, m, maxBinary)
}

// PublishedBase reads the published version v as a delta base: its manifest from the releases
// KV, its archive from the archives object store.
func PublishedBase(ctx context.Context, js jetstream.JetStream, names wire.Names, v string, maxBinary int64) (build.Base, error) {
	if !wire.ValidVersion(v) {
		return build.Base{}, fmt.Errorf("delta base %q is neither a build directory nor %s", text.Bound(v), wire.VersionRule)
	}
	raw, err := Published(ctx, js, names, v)
	if err != nil {
		return build.Base{}, fmt.Errorf("delta base: %w", err)
	}
	m, err := wire.ParseManifest(raw)
	if err != nil {
		return build.Base{}, fmt.Errorf("delta base %s: the published manifest is unreadable: %w", v, err)
	}
	obs, err := js.ObjectStore(ctx, names.Archives())
	if err != nil {
		return build.Base{}, bucketErr("object store", names.Archives(), err)
	}
	return FetchBase(ctx, obs, m, maxBinary)
}

// Published is the one rule of what "published" means, for every command that asks (target,
// rollout start, withdraw, a delta's base): a manifest stored under version's key in
// names.Releases(). It returns the manifest as stored, or a *NotPublishedError. Whether the
// manifest reads is the caller's to judge: a target needs it whole, a withdrawal does not.
func Published(ctx context.Context, js jetstream.JetStream, names wire.Names, version string) ([]byte, error) {
	kv, err := js.KeyValue(ctx, names.Releases())
	if err != nil {
		return nil, bucketErr("KV", names.Releases(), err)
	}
	e, err := kv.Get(ctx, version)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, &NotPublishedError{Version: version, Bucket: names.Releases()}
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s in %s: %w", text.Bound(version), names.Releases(), err)
	}
	return e.Value(), nil
}

func bucketErr(kind, name string, err error) error {
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%s %s does not exist on this bus; create the buckets with `mesh-release init`: %w", kind, name, err)
	}
	return fmt.Errorf("%s %s: %w", kind, name, err)
}

// Target sets the version nodes should run: key node.<id> in KV names.Targets() for each
// node, or the fleet key when fleet is true (exactly one of the two), each a target signed by
// signer (decision 0011) and written by compare-and-set, numbered after the value it replaces.
// The version must be published (ErrNotPublished) and not withdrawn (targets.ErrWithdrawn).
// It returns the keys it set, their revisions and the targets written, in the order given; on
// an error, those set before it.
func Target(ctx context.Context, js jetstream.JetStream, names wire.Names, version string, nodes []string, fleet bool, signer targets.Signer) ([]Set, error) {
	if !wire.ValidVersion(version) {
		return nil, fmt.Errorf("version %q is not %s", version, wire.VersionRule)
	}
	var keys []string
	switch {
	case fleet && len(nodes) > 0:
		return nil, errors.New("give node ids or --fleet, not both")
	case fleet:
		keys = []string{wire.FleetTargetKey}
	case len(nodes) == 0:
		return nil, errors.New("no node ids given; name nodes, or use --fleet for every node")
	default:
		for _, n := range nodes {
			if err := wire.ValidNode(n); err != nil {
				return nil, err
			}
			keys = append(keys, wire.NodeTargetKey(n))
		}
	}
	if err := signer.Check(); err != nil {
		return nil, err // no key: say so before reading anything
	}
	raw, err := Published(ctx, js, names, version)
	if err != nil {
		return nil, err
	}
	if _, err := wire.ParseManifest(raw); err != nil {
		return nil, fmt.Errorf("%s: the published manifest is unreadable (%w); hosts would refuse it", version, err)
	}
	if err := targets.CheckNotWithdrawn(ctx, js, names, version); err != nil {
		return nil, err
	}
	tgt, err := js.KeyValue(ctx, names.Targets())
	if err != nil {
		return nil, bucketErr("KV", names.Targets(), err)
	}
	w := targets.Writer{KV: tgt, Signer: signer}
	set := make([]Set, 0, len(keys))
	for _, k := range keys {
		res, err := w.Update(ctx, k, nil, func(targets.Current) targets.Decision { return targets.SetTo(version) })
		if err != nil {
			return set, err
		}
		set = append(set, Set{Key: k, Revision: res.Rev, Target: res.Target})
	}
	return set, nil
}

// Set is one target key Target put, the revision the bucket gave it, and the target written.
type Set struct {
	Key      string
	Revision uint64
	Target   wire.Target
}
