package publish

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire"
)

// basePlan is what one platform's deltas are made against: the published builds whose archives
// hold the host bases (and, schema 2 and 3, launcher bases), the builds whose launcher objects
// are launcher bases, and the launcher deltas an earlier release carrying this very launcher
// lists already (reused: they are in the store).
type basePlan struct {
	hosts, launchers []wire.Build
	reuse            []wire.ReleaseDelta
	// archives are builds of schema 2 and 3 not among hosts, read for their launcher alone.
	archives []wire.Build
}

func (p basePlan) empty() bool {
	return len(p.hosts) == 0 && len(p.launchers) == 0 && len(p.reuse) == 0
}

// addDeltas makes, for each platform of m (only platform only, when it is set), deltas of its
// host binary against the o.Deltas newest published versions older than m's that have a build
// for it, and — when its launcher is new to the store — of its launcher against the o.Deltas
// newest earlier launcher versions published for it. A launcher the store holds already gets
// the deltas the release that put it listed, and no new ones: an unchanged launcher moves no
// bytes. It returns m listing them (signed again), those it added, or, when it adds none
// though it could, why.
func addDeltas(ctx context.Context, kv jetstream.KeyValue, obs jetstream.ObjectStore, dir string, m wire.Manifest, only wire.Platform, o Options) (wire.Manifest, []wire.ReleaseDelta, string, error) {
	pubs, err := newestFirst(ctx, kv, m.Version)
	if err != nil {
		return m, nil, "", err
	}
	out, could := m, 0
	for _, p := range m.PlatformList() {
		if !only.IsZero() && p != only {
			continue
		}
		b, err := out.For(p)
		if err != nil {
			return m, nil, "", err
		}
		plan, err := planBases(ctx, kv, obs, pubs, m.Version, b, only.IsZero(), o.Deltas)
		if err != nil {
			return m, nil, "", err
		}
		if plan.empty() {
			continue
		}
		could += len(plan.hosts) + len(plan.launchers)
		if len(o.Key) == 0 {
			continue
		}
		if out, err = deltasFor(ctx, obs, dir, out, p, plan, o); err != nil {
			return m, nil, "", err
		}
	}
	if len(o.Key) == 0 {
		if could == 0 {
			return m, nil, "", nil
		}
		return m, nil, fmt.Sprintf("no release key given, so no deltas against %d published %s (pass --key, or --no-deltas to say none are wanted)",
			could, text.Plural(could, "binary", "binaries")), nil
	}
	return out, added(m, out), "", nil
}

// deltasFor adds one platform's deltas to m as plan says, and returns m signed again.
func deltasFor(ctx context.Context, obs jetstream.ObjectStore, dir string, m wire.Manifest, p wire.Platform, plan basePlan, o Options) (wire.Manifest, error) {
	if len(plan.reuse) > 0 {
		i := slices.IndexFunc(m.Platforms, func(pb wire.PlatformBuild) bool { return pb.Platform == p.String() })
		m.Platforms = slices.Clone(m.Platforms)
		m.Platforms[i].Launcher.Deltas = slices.Clone(plan.reuse)
		if err := resign(dir, &m, o.Key); err != nil {
			return m, err
		}
	}
	var bases []build.Base
	for i, hb := range append(slices.Clone(plan.hosts), plan.archives...) {
		got, err := FetchBase(ctx, obs, hb, o.MaxBinary)
		if err != nil {
			return m, err
		}
		for _, g := range got {
			wanted := i < len(plan.hosts)
			if g.Launcher {
				wanted = slices.ContainsFunc(plan.launchers, func(l wire.Build) bool { return l.Launcher.Version == g.Version })
			}
			if wanted {
				bases = append(bases, g)
			}
		}
	}
	for _, lb := range plan.launchers {
		if lb.LauncherInArchive {
			continue // read with its host above
		}
		got, err := FetchLauncherBase(ctx, obs, lb)
		if err != nil {
			return m, err
		}
		bases = append(bases, got)
	}
	return build.AddDeltas(ctx, dir, m, bases, o.Key, o.MaxBinary)
}

// resign signs m with key and writes it to dir's manifest.json.
func resign(dir string, m *wire.Manifest, key ed25519.PrivateKey) error {
	if id := wire.KeyID(key.Public().(ed25519.PublicKey)); m.KeyID != "" && m.KeyID != id {
		return fmt.Errorf("%s was signed by key %s, and this release key is %s: sign deltas with the key that signed the build", filepath.Join(dir, ManifestFile), m.KeyID, id)
	}
	if err := m.Sign(key); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ManifestFile), m.Marshal(), 0o644); err != nil {
		return fmt.Errorf("write the manifest: %w", err)
	}
	return nil
}

// added are the deltas out lists and m does not, host and launcher ones.
func added(m, out wire.Manifest) []wire.ReleaseDelta {
	var got []wire.ReleaseDelta
	for _, p := range out.PlatformList() {
		a, _ := m.For(p)
		b, err := out.For(p)
		if err != nil {
			continue
		}
		for _, pair := range [][2][]wire.ReleaseDelta{{a.Deltas, b.Deltas}, {a.Launcher.Deltas, b.Launcher.Deltas}} {
			for _, d := range pair[1] {
				if !slices.ContainsFunc(pair[0], func(x wire.ReleaseDelta) bool { return x.Object == d.Object }) {
					got = append(got, d)
				}
			}
		}
	}
	return got
}

// published is one published version, its manifest read when first needed.
type published struct {
	version string
	m       *wire.Manifest // nil until read; the zero Manifest when unreadable
}

// newestFirst lists the published versions other than own, newest first.
func newestFirst(ctx context.Context, kv jetstream.KeyValue, own string) ([]*published, error) {
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the published versions in %s: %w", kv.Bucket(), err)
	}
	defer lister.Stop()
	var out []*published
	for k := range lister.Keys() {
		if wire.ValidVersion(k) && k != own {
			out = append(out, &published{version: k})
		}
	}
	slices.SortFunc(out, func(a, b *published) int { return semver.Compare(b.version, a.version) })
	return out, nil
}

// read returns the version's manifest, read once; ok is false when it is gone or unreadable.
func (p *published) read(ctx context.Context, kv jetstream.KeyValue) (wire.Manifest, bool) {
	if p.m == nil {
		p.m = &wire.Manifest{}
		if e, err := kv.Get(ctx, p.version); err == nil {
			if m, err := wire.ParseManifest(e.Value()); err == nil && m.Version == p.version {
				*p.m = m
			}
		}
	}
	return *p.m, p.m.Version != ""
}

// planBases chooses b's bases among the published versions, newest first: up to n host bases
// (versions older than own with a build for b's platform exactly, not listed yet) and, when
// withLauncher and b's launcher is not in the store yet, up to n earlier launcher versions of that
// platform; or, when b's launcher is in the store, the launcher deltas a release carrying it
// lists.
func planBases(ctx context.Context, kv jetstream.KeyValue, obs jetstream.ObjectStore, pubs []*published, own string, b wire.Build, withLauncher bool, n int) (basePlan, error) {
	var plan basePlan
	hostRoom := min(n, wire.MaxDeltas-len(b.Deltas))
	l := b.Launcher
	launcherRoom := 0
	if withLauncher && l.Object != "" && len(l.Deltas) == 0 {
		stored, err := inStore(ctx, obs, l)
		if err != nil {
			return plan, err
		}
		if !stored {
			launcherRoom = n
		}
	}
	reuse := withLauncher && l.Object != "" && launcherRoom == 0 && len(l.Deltas) == 0
	seen := map[string]bool{}
	for _, pub := range pubs {
		if len(plan.hosts) >= hostRoom && len(plan.launchers) >= launcherRoom && !reuse {
			break
		}
		pm, ok := pub.read(ctx, kv)
		if !ok {
			continue
		}
		pb, err := pm.For(b.Platform)
		if err != nil || pb.Platform != b.Platform {
			continue
		}
		if len(plan.hosts) < hostRoom && semver.Compare(pub.version, own) < 0 &&
			!slices.ContainsFunc(b.Deltas, func(d wire.ReleaseDelta) bool { return d.BaseVersion == pub.version }) {
			plan.hosts = append(plan.hosts, pb)
		}
		pl := pb.Launcher
		switch {
		case reuse && pl.Object == l.Object && pl.Digest == l.Digest && len(pl.Deltas) > 0:
			plan.reuse, reuse = pl.Deltas, false
		case len(plan.launchers) < launcherRoom && pl.Version != "" && !seen[pl.Version] &&
			semver.Compare(pl.Version, l.Version) < 0 && pl.BinaryDigest != l.BinaryDigest:
			seen[pl.Version] = true
			plan.launchers = append(plan.launchers, pb)
			if pb.LauncherInArchive && !slices.ContainsFunc(plan.hosts, func(h wire.Build) bool { return h.Version == pb.Version }) {
				plan.archives = append(plan.archives, pb) // its archive holds the launcher
			}
		}
	}
	return plan, nil
}

// inStore reports whether the store holds l's object with its signed digest.
func inStore(ctx context.Context, obs jetstream.ObjectStore, l wire.LauncherObject) (bool, error) {
	info, err := obs.GetInfo(ctx, l.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up %s: %w", l.Object, err)
	}
	want, _ := wire.ObjectStoreDigest(l.Digest)
	return info.Digest == want, nil
}

// FetchBase reads a published build's host binary (and, when its archive carries it, its
// launcher) out of its archive in the object store, as delta bases, checked against b, its
// manifest's view for one platform (which the caller read from the releases KV).
func FetchBase(ctx context.Context, obs jetstream.ObjectStore, b wire.Build, maxBinary int64) ([]build.Base, error) {
	r, err := obs.Get(ctx, b.Object)
	if err != nil {
		return nil, fmt.Errorf("delta base %s %s: fetch %s from the archives object store: %w", b.Version, b.Platform, b.Object, err)
	}
	defer r.Close()
	return build.BaseFromArchive(ctx, r, b, maxBinary)
}

// FetchLauncherBase reads a published build's launcher object from the object store as a
// launcher delta base, checked against b.
func FetchLauncherBase(ctx context.Context, obs jetstream.ObjectStore, b wire.Build) (build.Base, error) {
	r, err := obs.Get(ctx, b.Launcher.Object)
	if err != nil {
		return build.Base{}, fmt.Errorf("launcher delta base %s %s: fetch %s from the archives object store: %w", b.Launcher.Version, b.Platform, b.Launcher.Object, err)
	}
	defer r.Close()
	return build.LauncherBase(ctx, r, b)
}

// PublishedBase reads the published version v as delta bases, each platform's host binary and
// launcher: its manifest from the releases KV, its objects from the archives object store.
func PublishedBase(ctx context.Context, js jetstream.JetStream, names wire.Names, v string, maxBinary int64) ([]build.Base, error) {
	if !wire.ValidVersion(v) {
		return nil, fmt.Errorf("delta base %q is neither a build directory nor %s", text.Bound(v), wire.VersionRule)
	}
	raw, err := Published(ctx, js, names, v)
	if err != nil {
		return nil, fmt.Errorf("delta base: %w", err)
	}
	m, err := wire.ParseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("delta base %s: the published manifest is unreadable: %w", v, err)
	}
	obs, err := js.ObjectStore(ctx, names.Archives())
	if err != nil {
		return nil, bucketErr("object store", names.Archives(), err)
	}
	var out []build.Base
	for _, p := range m.PlatformList() {
		b, err := m.For(p)
		if err != nil {
			return nil, err
		}
		got, err := FetchBase(ctx, obs, b, maxBinary)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if b.Launcher.Object != "" {
			lb, err := FetchLauncherBase(ctx, obs, b)
			if err != nil {
				return nil, err
			}
			out = append(out, lb)
		}
	}
	return out, nil
}

// legacyPlatform is the platform o publishes a single-platform manifest for (the zero Platform
// when it publishes m as built), or why it cannot.
func (o Options) legacyPlatform(m wire.Manifest) (wire.Platform, error) {
	switch o.ManifestSchema {
	case 0, wire.ManifestSchemaPlatforms:
		if !o.Platform.IsZero() {
			return wire.Platform{}, errors.New("--platform names the build --manifest-schema 3 publishes; without --manifest-schema 3 every platform's is published")
		}
		return wire.Platform{}, nil
	case wire.ManifestSchemaWithDeltas:
	default:
		return wire.Platform{}, fmt.Errorf("--manifest-schema %d: publish writes schema %d (the build's manifest) or %d (one platform's, for hosts that read schema 1 to 3)",
			o.ManifestSchema, wire.ManifestSchemaPlatforms, wire.ManifestSchemaWithDeltas)
	}
	if m.Schema != wire.ManifestSchemaPlatforms {
		return wire.Platform{}, fmt.Errorf("%s is schema %d already, which hosts reading schema 1 to 3 take as it is: publish it without --manifest-schema", m.Version, m.Schema)
	}
	if len(o.Key) == 0 {
		return wire.Platform{}, errors.New("--manifest-schema 3 signs a manifest of its own: pass --key, the release key that signed the build")
	}
	have := m.PlatformList()
	p := o.Platform
	if p.IsZero() {
		if len(have) != 1 {
			return wire.Platform{}, fmt.Errorf("%s has builds for %d platforms (%s) and a manifest of schema 3 names one: say which with --platform",
				m.Version, len(have), platformNames(have))
		}
		p = have[0]
	}
	if !slices.Contains(have, p) {
		return wire.Platform{}, fmt.Errorf("%s has no build for %s (it has %s)", m.Version, p, platformNames(have))
	}
	if p.Variant != "" {
		return wire.Platform{}, fmt.Errorf("%s: hosts that read schema 1 to 3 know an archive by os and arch alone (mesh-host-%s-%s-%s.tar.zst), and a build for %s is named by its variant too; publish it as schema 4, which hosts reading schema 4 take",
			m.Version, m.Version, p.OS, p.Arch, p)
	}
	return p, nil
}

// legacyOf is the single-platform manifest of m's build for p, signed with key, which must be
// the key that signed m.
func legacyOf(m wire.Manifest, p wire.Platform, key ed25519.PrivateKey) (wire.Manifest, error) {
	if id := wire.KeyID(key.Public().(ed25519.PublicKey)); m.KeyID != id {
		return wire.Manifest{}, fmt.Errorf("%s was signed by key %s, and this release key is %s: sign the schema 3 manifest with the key that signed the build", m.Version, m.KeyID, id)
	}
	l, err := m.Legacy(p)
	if err != nil {
		return wire.Manifest{}, err
	}
	if err := l.Sign(key); err != nil {
		return wire.Manifest{}, err
	}
	return l, nil
}
