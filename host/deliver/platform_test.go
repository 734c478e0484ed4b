package deliver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/delta"
)

// this is the platform the tests' node is.
var this = wire.NodePlatform(runtime.GOOS, runtime.GOARCH, "")

// otherPlatform is a platform the tests' node is not.
func otherPlatform() wire.Platform {
	if runtime.GOARCH == "arm64" {
		return wire.Platform{OS: "linux", Arch: "amd64"}
	}
	return wire.Platform{OS: "linux", Arch: "arm64"}
}

// launcherSpec is the launcher a schema 4 test release names: its binary, and the launcher
// binaries it lists deltas from (nil: none). put says which of its objects are in the store.
type launcherSpec struct {
	version string
	bin     []byte
	bases   []base
	// noObject and noDeltas leave the launcher's object, or its deltas, out of the store.
	noObject, noDeltas bool
	// edit, if not nil, changes the launcher's listing before the manifest is signed.
	edit func(*wire.LauncherObject)
}

// compress is b zstd-compressed, as a launcher object holds it.
func compress(t testing.TB, b []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		t.Fatal(err)
	}
	return enc.EncodeAll(b, nil)
}

// platformBuild is one platform's entry of a schema 4 release, and the objects it names.
func (h *harness) platformBuild(version string, p wire.Platform, bin []byte, l *launcherSpec) (wire.PlatformBuild, map[string][]byte) {
	h.t.Helper()
	a := pack(h.t, bin)
	pb := wire.PlatformBuild{Platform: p.String(), Object: wire.PlatformObjectName(version, p), Size: int64(len(a)),
		Digest: digest.FromBytes(a), BinaryDigest: digest.FromBytes(bin)}
	objects := map[string][]byte{pb.Object: a}
	if l == nil {
		return pb, objects
	}
	obj := compress(h.t, l.bin)
	lo := wire.LauncherObject{Version: l.version, Object: wire.LauncherObjectName(l.version, p), Size: int64(len(obj)),
		Digest: digest.FromBytes(obj), BinaryDigest: digest.FromBytes(l.bin), BinarySize: int64(len(l.bin))}
	if !l.noObject {
		objects[lo.Object] = obj
	}
	for _, b := range l.bases {
		var buf bytes.Buffer
		if err := delta.Make(&buf, b.bin, l.bin); err != nil {
			h.t.Fatal(err)
		}
		rd := wire.ReleaseDelta{BaseVersion: b.version, BaseDigest: digest.FromBytes(b.bin),
			Object: wire.LauncherDeltaObjectName(l.version, b.version, p), Size: int64(buf.Len()), Digest: digest.FromBytes(buf.Bytes())}
		lo.Deltas = append(lo.Deltas, rd)
		if !l.noDeltas {
			objects[rd.Object] = buf.Bytes()
		}
	}
	if l.edit != nil {
		l.edit(&lo)
	}
	pb.Launcher = lo
	return pb, objects
}

// releaseSchema4 publishes a signed schema 4 manifest of version listing builds, with every
// object they name that objects holds.
func (h *harness) releaseSchema4(version string, builds []wire.PlatformBuild, objects map[string][]byte) wire.Manifest {
	h.t.Helper()
	m := wire.Manifest{Schema: wire.ManifestSchemaPlatforms, Version: version, Platforms: builds,
		Created: manifestFor(version, nil, nil).Created}
	h.sign(&m)
	ctx := context.Background()
	obs, _ := h.js.ObjectStore(ctx, wire.NamesFor("").Archives())
	for name, b := range objects {
		if _, err := obs.PutBytes(ctx, name, b); err != nil {
			h.t.Fatal(err)
		}
	}
	h.put(version, m, nil)
	return m
}

// Each case delivers a release to a node and checks what was staged and every byte it moved
// (fetch.moved): a launcher this node has, or need not stage, moves none.
func TestDeliverOfASchema4Release(t *testing.T) {
	const older = "v0.2.0"
	host := fakehost(t, v1, "ok", runtime.GOARCH)
	launcher := fakehost(t, lv, "ok", runtime.GOARCH)
	olderLauncher := fakehost(t, older, "ok", runtime.GOARCH)
	archiveSize := int64(len(pack(t, host)))
	cases := []struct {
		name     string
		before   func(*testing.T, *harness) // the node's launchers
		launcher *launcherSpec
		schema3  bool                              // publish schema 3 (the launcher in the archive) instead
		moved    func(pb wire.PlatformBuild) int64 // every byte the delivery must move
		note     string                            // the staged progress's launcher note ("": none)
		staged   bool                              // launchers/<lv> holds the launcher afterwards
	}{
		{name: "without a launcher moves the host archive alone",
			moved: func(wire.PlatformBuild) int64 { return archiveSize }},
		{name: "with a launcher the node lacks fetches its object",
			launcher: &launcherSpec{version: lv, bin: launcher},
			moved:    func(pb wire.PlatformBuild) int64 { return archiveSize + pb.Launcher.Size },
			note:     "launcher " + lv + " staged", staged: true},
		{name: "with a launcher the node has moves no launcher byte",
			before:   func(t *testing.T, h *harness) { recordLauncher(t, h, lv, digest.FromBytes(launcher)) },
			launcher: &launcherSpec{version: lv, bin: launcher},
			moved:    func(wire.PlatformBuild) int64 { return archiveSize }},
		{name: "with a launcher not newer than the floor moves no launcher byte",
			before:   func(t *testing.T, h *harness) { floorIs(t, h, "v0.4.0", olderLauncher) },
			launcher: &launcherSpec{version: lv, bin: launcher},
			moved:    func(wire.PlatformBuild) int64 { return archiveSize }},
		{name: "with a launcher whose delta base the node has fetches the delta",
			before:   func(t *testing.T, h *harness) { placeLauncher(t, h, older, olderLauncher) },
			launcher: &launcherSpec{version: lv, bin: launcher, bases: []base{{older, olderLauncher}}},
			moved:    func(pb wire.PlatformBuild) int64 { return archiveSize + pb.Launcher.Deltas[0].Size },
			note:     "launcher " + lv + " staged from a delta of " + older, staged: true},
		{name: "with a launcher whose delta base is the floor fetches the delta",
			before:   func(t *testing.T, h *harness) { floorIs(t, h, older, olderLauncher) },
			launcher: &launcherSpec{version: lv, bin: launcher, bases: []base{{older, olderLauncher}}},
			moved:    func(pb wire.PlatformBuild) int64 { return archiveSize + pb.Launcher.Deltas[0].Size },
			note:     "launcher " + lv + " staged from a delta of " + older, staged: true},
		{name: "with a launcher whose delta is missing falls back to its object",
			before:   func(t *testing.T, h *harness) { placeLauncher(t, h, older, olderLauncher) },
			launcher: &launcherSpec{version: lv, bin: launcher, bases: []base{{older, olderLauncher}}, noDeltas: true},
			moved:    func(pb wire.PlatformBuild) int64 { return archiveSize + pb.Launcher.Size },
			note:     "launcher " + lv + " staged", staged: true},
		{name: "with a launcher whose object is missing stages the host and says why",
			launcher: &launcherSpec{version: lv, bin: launcher, noObject: true},
			moved:    func(wire.PlatformBuild) int64 { return archiveSize },
			note:     "launcher " + lv + " not staged: object " + wire.LauncherObjectName(lv, this) + " is not in"},
		{name: "with a launcher object larger than its signed binary_size stages the host and says why",
			launcher: &launcherSpec{version: lv, bin: launcher, edit: func(l *wire.LauncherObject) { l.BinarySize-- }},
			moved:    func(pb wire.PlatformBuild) int64 { return archiveSize + pb.Launcher.Size },
			note:     "launcher " + lv + " not staged: " + wire.LauncherObjectName(lv, this) + " decompresses to more than"},
		{name: "of schema 3 with the launcher in its archive is delivered as before",
			schema3: true, note: "launcher " + lv + " staged", staged: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if c.before != nil {
				c.before(t, h)
			}
			var want int64
			if c.schema3 {
				m := h.releaseWithLauncher(v1, host, launcher, launcherOf(lv, launcher), nil)
				want = m.Size
			} else {
				pb, objects := h.platformBuild(v1, this, host, c.launcher)
				other, more := h.platformBuild(v1, otherPlatform(), []byte("another platform's host"), nil)
				for k, v := range more {
					objects[k] = v
				}
				builds := []wire.PlatformBuild{pb, other}
				if other.Platform < pb.Platform {
					builds = []wire.PlatformBuild{other, pb}
				}
				h.releaseSchema4(v1, builds, objects)
				want = c.moved(pb)
			}
			p := h.staged(v1, host)
			last := p[len(p)-1]
			if last.State != StateStaged || last.Moved != want {
				t.Fatalf("staged progress %+v; want %d bytes moved", last, want)
			}
			// A note of a launcher not staged goes on to say why; one of a launcher staged is exact.
			if exact := c.note == "" || c.staged; (exact && last.Launcher != c.note) || !strings.HasPrefix(last.Launcher, c.note) {
				t.Fatalf("launcher note %q, want %q", last.Launcher, c.note)
			}
			got, err := os.ReadFile(rollback.LauncherPath(h.root, lv))
			if staged := err == nil && bytes.Equal(got, launcher); staged != c.staged {
				t.Fatalf("launchers/%s staged with the launcher's bytes: %v (%v), want %v", lv, staged, err, c.staged)
			}
			if c.staged {
				if ents, _ := os.ReadDir(rollback.LauncherDir(h.root, lv)); len(ents) != 1 {
					t.Fatalf("launchers/%s holds %d entries, want mesh-launcher only", lv, len(ents))
				}
			}
		})
	}
}

// placeLauncher puts a launcher under launchers/<version>, recorded as delivered, as an
// earlier delivery left it.
func placeLauncher(t *testing.T, h *harness, version string, b []byte) {
	t.Helper()
	st, err := rollback.NewLauncherStaging(h.root)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Discard()
	if err := os.WriteFile(st.BinaryPath(), b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := st.CommitLauncher(context.Background(), h.records, rollback.LauncherVersion{Version: version, Digest: digest.FromBytes(b),
		Size: int64(len(b)), Provenance: rollback.Provenance{Source: rollback.SourceDelivered}}); err != nil {
		t.Fatal(err)
	}
}

// A version without this node's platform is refused by name before any fetch, never marked
// bad, refused again unfetched while its manifest holds the same bytes, and taken once it is
// republished with this platform's build.
func TestDeliverRefusesAVersionWithoutThisPlatformThenTakesItRepublished(t *testing.T) {
	h := newHarness(t, nil)
	host := fakehost(t, v1, "ok", runtime.GOARCH)
	other, objects := h.platformBuild(v1, otherPlatform(), []byte("another platform's host"), nil)
	h.releaseSchema4(v1, []wire.PlatformBuild{other}, objects)
	want := v1 + " has no build for " + this.String() + " (it has " + otherPlatform().String() + ")"
	for i := range 2 {
		var log progressLog
		err := h.d.Deliver(context.Background(), v1, log.report)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindNoPlatform || !strings.Contains(err.Error(), want+"; publish") || !errors.Is(err, wire.ErrNoPlatformBuild) {
			t.Fatalf("attempt %d: got %v, want a %s refusal saying %q", i+1, err, KindNoPlatform, want)
		}
		if len(log.p) != 0 {
			t.Fatalf("attempt %d reported progress %+v: a version without this platform is not fetched", i+1, log.p)
		}
		if bad, why, err := h.records.IsBad(context.Background(), v1); bad || err != nil {
			t.Fatalf("%s marked bad (%s, %v) for a platform it lacks", v1, why, err)
		}
	}
	pb, more := h.platformBuild(v1, this, host, nil)
	for k, v := range more {
		objects[k] = v
	}
	builds := []wire.PlatformBuild{pb, other}
	if other.Platform < pb.Platform {
		builds = []wire.PlatformBuild{other, pb}
	}
	h.releaseSchema4(v1, builds, objects)
	h.staged(v1, host)
}
