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
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/text"
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
	// Manifest is the manifest announced (with --manifest-schema 3, the single-platform one).
	Manifest wire.Manifest
	// AlreadyPublished is true when the same builds were already announced under this version;
	// nothing was changed (publishing is idempotent).
	AlreadyPublished bool
	// Added are the deltas Publish made against published versions (Options.Deltas), host and
	// launcher ones; NoDeltas says why it made none when it could have ("" otherwise).
	Added    []wire.ReleaseDelta
	NoDeltas string
	// Objects are the objects the manifest names, in the order they were put, each saying
	// whether its bytes were sent or the store held them already.
	Objects []Object
}

// Object is one object the manifest names and what publishing it moved.
type Object struct {
	Name     string
	Platform wire.Platform
	Kind     string // "archive", "delta", "launcher" or "launcher delta"
	Size     int64
	Put      bool // sent now; false: the store held these bytes already
}

// Kinds of Object.
const (
	KindArchive       = "archive"
	KindDelta         = "delta"
	KindLauncher      = "launcher"
	KindLauncherDelta = "launcher delta"
)

// Sent is how many bytes of objects were sent for platform p (every platform when p is zero)
// and, of them, how many were the launcher's (its object and its deltas).
func (r Result) Sent(p wire.Platform) (total, launcher int64) {
	for _, o := range r.Objects {
		if !o.Put || (!p.IsZero() && o.Platform != p) {
			continue
		}
		total += o.Size
		if o.Kind == KindLauncher || o.Kind == KindLauncherDelta {
			launcher += o.Size
		}
	}
	return total, launcher
}

// DefaultDeltas is how many of the newest published versions (and launcher versions) Publish
// makes deltas against.
const DefaultDeltas = 3

// Options say how to publish. The zero value publishes the build as it is.
type Options struct {
	// Key signs the manifest again when deltas are added; without it none are added (the
	// Result says so). It must be the key that signed the build. ManifestSchema 3 needs it.
	Key ed25519.PrivateKey
	// Deltas is how many of the newest published versions older than the build's to add
	// deltas against, for each platform (and as many earlier launcher versions for each
	// launcher; decisions 0028, 0044); 0 adds none.
	Deltas int
	// MaxBinary caps the binaries read to make deltas; default archive.DefaultMaxBinary.
	MaxBinary int64
	// ManifestSchema 3 publishes, instead of the build's schema 4 manifest, the single-platform
	// manifest of Platform's build that hosts reading schema 1 to 3 take (schema 3 with deltas,
	// 1 without; no launcher), signed with Key: the upgrade path (decision 0042). 0 or 4
	// publishes the manifest as built.
	ManifestSchema int
	// Platform is the build ManifestSchema 3 publishes; zero when the build has one.
	Platform wire.Platform
}

// Publish reads a build directory (manifest.json and the objects it names) and puts it on the
// bus: every object first, into object store names.Archives() under its name, verified against
// the manifest while it is sent; then the manifest into KV names.Releases() under its version,
// created only if absent. Publishing a version again with the same builds is a no-op; with
// others it is refused with ErrAlreadyPublished.
func Publish(ctx context.Context, js jetstream.JetStream, names wire.Names, dir string) (Result, error) {
	return PublishWith(ctx, js, names, dir, Options{})
}

// PublishWith is Publish that first adds, when o says so and the version is not published yet,
// deltas against the newest published versions: made into dir and listed in its manifest,
// signed again with o.Key (build.AddDeltas). Each platform's objects are put before the
// manifest — deltas, archive, launcher deltas, launcher — so a node never reads a manifest
// naming an object that is not there; a launcher object the store holds already is not sent.
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
	only, err := o.legacyPlatform(m)
	if err != nil {
		return Result{}, err
	}
	kv, err := js.KeyValue(ctx, names.Releases())
	if err != nil {
		return Result{}, bucketErr("KV", names.Releases(), err)
	}
	obs, err := js.ObjectStore(ctx, names.Archives())
	if err != nil {
		return Result{}, bucketErr("object store", names.Archives(), err)
	}
	announce := func(m wire.Manifest) (wire.Manifest, error) { return m, nil }
	if !only.IsZero() {
		announce = func(m wire.Manifest) (wire.Manifest, error) { return legacyOf(m, only, o.Key) }
	}
	first, err := announce(m)
	if err != nil {
		return Result{}, err
	}
	if done, err := alreadyPublished(ctx, kv, first); err != nil || done {
		var objs []Object
		if done {
			objs, err = putObjects(ctx, obs, dir, m, only)
		}
		return Result{Manifest: first, AlreadyPublished: done, Objects: objs}, err
	}
	var res Result
	if o.Deltas > 0 {
		if m, res.Added, res.NoDeltas, err = addDeltas(ctx, kv, obs, dir, m, only, o); err != nil {
			return Result{}, err
		}
	}
	if res.Manifest, err = announce(m); err != nil {
		return Result{}, err
	}
	if res.Objects, err = putObjects(ctx, obs, dir, m, only); err != nil {
		return Result{}, err
	}
	if _, err := kv.Create(ctx, res.Manifest.Version, res.Manifest.Marshal()); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Someone announced this version while we uploaded.
			done, err := alreadyPublished(ctx, kv, res.Manifest)
			return Result{Manifest: res.Manifest, AlreadyPublished: done, Objects: res.Objects}, err
		}
		return Result{}, fmt.Errorf("announce %s in %s: %w", res.Manifest.Version, names.Releases(), err)
	}
	return res, nil
}

// alreadyPublished reports whether m's version is announced with the same builds, and refuses
// when it is announced with others.
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
	if same, differ := sameBuilds(old, m); same {
		return true, nil
	} else {
		return false, fmt.Errorf("%s: %w (published %s: %s); a released version never changes — build a new version",
			m.Version, ErrAlreadyPublished, old.Created, differ)
	}
}

// sameBuilds reports whether two manifests of one version name the same builds (platforms,
// archives and launchers; deltas may differ), and if not, how they differ.
func sameBuilds(old, m wire.Manifest) (bool, string) {
	op, np := old.PlatformList(), m.PlatformList()
	if !slices.Equal(op, np) || old.Schema == wire.ManifestSchemaPlatforms != (m.Schema == wire.ManifestSchemaPlatforms) {
		return false, fmt.Sprintf("schema %d for %s; this build: schema %d for %s", old.Schema, platformNames(op), m.Schema, platformNames(np))
	}
	for _, p := range np {
		a, errA := old.For(p)
		b, errB := m.For(p)
		if errA != nil || errB != nil {
			return false, fmt.Sprintf("%s is unreadable", p)
		}
		if a.Digest != b.Digest || a.BinaryDigest != b.BinaryDigest || a.Size != b.Size || a.Object != b.Object {
			return false, fmt.Sprintf("%s archive %s; this build: archive %s", p, a.Digest, b.Digest)
		}
		if a.Launcher.BinaryDigest != b.Launcher.BinaryDigest || a.Launcher.Digest != b.Launcher.Digest {
			return false, fmt.Sprintf("%s launcher %s; this build: launcher %s", p, a.Launcher.BinaryDigest, b.Launcher.BinaryDigest)
		}
	}
	return true, ""
}

// platformNames is "linux/amd64, linux/arm64".
func platformNames(ps []wire.Platform) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// putObjects puts every object m names (only those of platform only, and no launcher, when it
// is set) unless the store holds exactly these bytes, and says what it did.
func putObjects(ctx context.Context, obs jetstream.ObjectStore, dir string, m wire.Manifest, only wire.Platform) ([]Object, error) {
	var out []Object
	put := func(p wire.Platform, kind, name string, size int64, d digest.Digest, desc string, shared bool) error {
		sent, err := ensureFile(ctx, obs, m.Version, name, size, d, dir, desc, shared)
		if err != nil {
			return err
		}
		out = append(out, Object{Name: name, Platform: p, Kind: kind, Size: size, Put: sent})
		return nil
	}
	for _, p := range m.PlatformList() {
		if !only.IsZero() && p != only {
			continue
		}
		b, err := m.For(p)
		if err != nil {
			return nil, err
		}
		for _, d := range b.Deltas {
			if err := put(p, KindDelta, d.Object, d.Size, d.Digest, "delta of mesh-host "+m.Version+" from "+d.BaseVersion+" "+p.String(), false); err != nil {
				return nil, err
			}
		}
		if err := put(p, KindArchive, b.Object, b.Size, b.Digest, "mesh-host "+m.Version+" "+p.String(), false); err != nil {
			return nil, err
		}
		l := b.Launcher
		if l.Object == "" || !only.IsZero() {
			continue
		}
		// A launcher's objects are named by its version, not the release's: every release
		// carrying it names them, so bytes other than the signed ones are never put over them.
		for _, d := range l.Deltas {
			if err := put(p, KindLauncherDelta, d.Object, d.Size, d.Digest, "delta of mesh-launcher "+l.Version+" from "+d.BaseVersion+" "+p.String(), true); err != nil {
				return nil, err
			}
		}
		if err := put(p, KindLauncher, l.Object, l.Size, l.Digest, "mesh-launcher "+l.Version+" "+p.String()+" (zstd)", true); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ensureFile puts dir/name (an object the manifest of version names, of size and digest)
// unless the store already holds exactly these bytes, and reports whether it sent them. The
// file is hashed while it is sent; if it does not match the manifest the object is removed
// again and the publish refused. A shared object (a launcher's) held with other bytes is
// refused, not replaced: earlier releases name those bytes.
func ensureFile(ctx context.Context, obs jetstream.ObjectStore, version, name string, size int64, d digest.Digest, dir, desc string, shared bool) (bool, error) {
	want, _ := wire.ObjectStoreDigest(d)
	info, err := obs.GetInfo(ctx, name)
	switch {
	case err == nil && info.Digest == want && int64(info.Size) == size:
		return false, nil
	case err == nil && shared:
		return false, fmt.Errorf("%s is in the archives object store already with other bytes (%d bytes, %s) than this build's (%d bytes, %s): a launcher version is one binary for good — "+
			"build with the toolchain that made it, or give the launcher a new version", name, info.Size, info.Digest, size, want)
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return false, fmt.Errorf("look up %s: %w", name, err)
	}
	path := filepath.Join(dir, name)
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("the file the manifest of %s names: %w", version, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return false, err
	} else if fi.Size() != size {
		return false, fmt.Errorf("%s is %d bytes but its manifest says %d; rebuild it", path, fi.Size(), size)
	}
	v := d.Verifier()
	info, err = obs.Put(ctx, jetstream.ObjectMeta{Name: name, Description: desc}, io.TeeReader(f, v))
	if err != nil {
		return false, fmt.Errorf("put %s: %w", name, err)
	}
	if !v.Verified() || info.Digest != want || int64(info.Size) != size {
		_ = obs.Delete(ctx, name)
		return false, fmt.Errorf("%s (%d bytes) does not match its manifest (%s, %d bytes); it changed after the build — rebuild it",
			path, info.Size, d, size)
	}
	return true, nil
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
