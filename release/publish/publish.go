// Package publish puts host releases on the bus: the archive into the archives object store
// and its manifest into the releases KV (the announcement hosts watch), and sets which version
// nodes, or the whole fleet, should run (a signed target, release/targets).
package publish

import (
	"context"
	_ "crypto/sha256" // go-digest verifies sha256 only once it is linked in
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// ManifestFile is the manifest's name in a build directory (what `mesh-release build` writes).
const ManifestFile = "manifest.json"

// ErrAlreadyPublished is wrapped when a version is already on the bus with other bytes:
// versions are immutable once announced.
var ErrAlreadyPublished = errors.New("version is already published with other bytes")

// ErrNotPublished is wrapped when a target names a version with no manifest on the bus.
var ErrNotPublished = errors.New("version is not published")

// Result says what Publish did.
type Result struct {
	Manifest wire.Manifest
	// AlreadyPublished is true when the same archive was already announced under this version;
	// nothing was changed (publishing is idempotent).
	AlreadyPublished bool
}

// Publish reads a build directory (manifest.json and the archive it names) and puts it on the
// bus: the archive first, into object store names.Archives() under manifest.object, verified
// against the manifest while it is sent; then the manifest into KV names.Releases() under its
// version, created only if absent. Publishing a version again with the same archive is a
// no-op; with another archive it is refused with ErrAlreadyPublished.
func Publish(ctx context.Context, js jetstream.JetStream, names wire.Names, dir string) (Result, error) {
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
	if err := ensureObject(ctx, obs, m, dir); err != nil {
		return Result{}, err
	}
	if _, err := kv.Create(ctx, m.Version, m.Marshal()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Someone announced this version while we uploaded.
			done, err := alreadyPublished(ctx, kv, m)
			return Result{Manifest: m, AlreadyPublished: done}, err
		}
		return Result{}, fmt.Errorf("announce %s in %s: %w", m.Version, names.Releases(), err)
	}
	return Result{Manifest: m}, nil
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

// ensureObject puts the archive unless the store already holds exactly these bytes. The
// archive is hashed while it is sent; if it does not match the manifest the object is removed
// again and the publish refused.
func ensureObject(ctx context.Context, obs jetstream.ObjectStore, m wire.Manifest, dir string) error {
	want, _ := wire.ObjectStoreDigest(m.Digest)
	info, err := obs.GetInfo(ctx, m.Object)
	switch {
	case err == nil && info.Digest == want && int64(info.Size) == m.Size:
		return nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return fmt.Errorf("look up archive %s: %w", m.Object, err)
	}
	path := filepath.Join(dir, m.Object)
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("the archive the manifest names: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() != m.Size {
		return fmt.Errorf("%s is %d bytes but its manifest says %d; rebuild it", path, fi.Size(), m.Size)
	}
	v := m.Digest.Verifier()
	info, err = obs.Put(ctx, jetstream.ObjectMeta{Name: m.Object, Description: "mesh-host " + m.Version + " " + m.OS + "/" + m.Arch},
		io.TeeReader(f, v))
	if err != nil {
		return fmt.Errorf("put %s: %w", m.Object, err)
	}
	if !v.Verified() || info.Digest != want || int64(info.Size) != m.Size {
		_ = obs.Delete(ctx, m.Object)
		return fmt.Errorf("%s (%d bytes) does not match its manifest (%s, %d bytes); it changed after the build — rebuild it",
			path, info.Size, m.Digest, m.Size)
	}
	return nil
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
	rel, err := js.KeyValue(ctx, names.Releases())
	if err != nil {
		return nil, bucketErr("KV", names.Releases(), err)
	}
	e, err := rel.Get(ctx, version)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%s: %w in %s; publish it first with `mesh-release publish`", version, ErrNotPublished, names.Releases())
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s in %s: %w", version, names.Releases(), err)
	}
	if _, err := wire.ParseManifest(e.Value()); err != nil {
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
