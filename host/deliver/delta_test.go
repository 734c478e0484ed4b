package deliver

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/delta"
)

const v101 = "v1.0.1"

// base is a release a delta is made against, and the binary the delta rebuilds from it.
type base struct {
	version string
	bin     []byte
}

// releaseWithDeltas publishes bin as version, listing a delta from each base (newest first, as
// publish lists them); edit, if not nil, may change a delta's listing or its bytes (nil: not
// put in the store) before the manifest is signed.
func (h *harness) releaseWithDeltas(version string, bin []byte, bases []base, edit func(i int, d *wire.ReleaseDelta, b *[]byte)) wire.Manifest {
	h.t.Helper()
	a := pack(h.t, bin)
	m := manifestFor(version, a, bin)
	m.Schema = wire.ManifestSchemaWithDeltas
	ctx := context.Background()
	obs, _ := h.js.ObjectStore(ctx, wire.NamesFor("").Archives())
	for i, b := range bases {
		var buf bytes.Buffer
		if err := delta.Make(&buf, b.bin, bin); err != nil {
			h.t.Fatal(err)
		}
		db := buf.Bytes()
		d := wire.ReleaseDelta{BaseVersion: b.version, BaseDigest: digestOf(b.bin),
			Object: wire.DeltaObjectName(version, b.version, runtime.GOOS, runtime.GOARCH)}
		d.Size, d.Digest = int64(len(db)), digestOf(db)
		if edit != nil {
			edit(i, &d, &db)
		}
		if db != nil {
			if _, err := obs.PutBytes(ctx, d.Object, db); err != nil {
				h.t.Fatal(err)
			}
		}
		m.Deltas = append(m.Deltas, d)
	}
	h.sign(&m)
	h.put(version, m, a)
	return m
}

// staged delivers version and checks it is in place with want's bytes and not marked bad.
func (h *harness) staged(version string, want []byte) []Progress {
	h.t.Helper()
	var log progressLog
	if err := h.d.Deliver(context.Background(), version, log.report); err != nil {
		h.t.Fatalf("deliver %s: %v", version, err)
	}
	got, err := os.ReadFile(filepath.Join(rollback.VersionsDir(h.root), version, archive.BinaryName))
	if err != nil || !bytes.Equal(got, want) {
		h.t.Fatalf("versions/%s/mesh-host is not the release's binary (%v)", version, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(rollback.VersionsDir(h.root), version)); len(ents) != 1 {
		h.t.Fatalf("versions/%s holds %d entries, want mesh-host only", version, len(ents))
	}
	if bad, why, err := h.records.IsBad(context.Background(), version); bad || err != nil {
		h.t.Fatalf("%s is marked bad (%s, %v)", version, why, err)
	}
	rec, ok, err := h.records.Lookup(context.Background(), version)
	if err != nil || !ok || rec.Digest != digestOf(want) {
		h.t.Fatalf("records of %s: %+v, %v, %v", version, rec, ok, err)
	}
	return log.p
}

func TestDeliverRebuildsFromADeltaWhenItHasTheBase(t *testing.T) {
	h := newHarness(t, nil)
	old, bin := fakehost(t, v1, "ok", runtime.GOARCH), fakehost(t, v101, "ok", runtime.GOARCH)
	h.release(v1, old)
	h.staged(v1, old)
	m := h.releaseWithDeltas(v101, bin, []base{{"v1.0.0-rc.1", []byte("a base this node never had")}, {v1, old}}, nil)
	log := h.staged(v101, bin)
	last := log[len(log)-1]
	d := m.Deltas[1]
	if last.State != StateStaged || last.Delta != v1 || last.Moved != d.Size || last.Bytes != d.Size {
		t.Fatalf("staged progress %+v; want delta %s, %d bytes moved", last, v1, d.Size)
	}
	if d.Size*10 > m.Size {
		t.Errorf("the delta is %d bytes, over 10%% of the %d-byte archive", d.Size, m.Size)
	}
	f := last.Fetch()
	if f.Delta != v1 || f.Moved != d.Size {
		t.Fatalf("heartbeat fetch %+v", f)
	}
	var sawDelta bool
	for _, p := range log {
		sawDelta = sawDelta || (p.State == StateFetching && p.Delta == v1 && p.Total == d.Size)
	}
	if !sawDelta {
		t.Fatalf("no fetching progress of the delta: %+v", log)
	}
}

func TestDeliverFallsBackToTheArchiveAndNeverMarksTheReleaseBad(t *testing.T) {
	for _, tc := range []struct {
		name string
		// prepare changes the node's base (versions/v1.0.0/mesh-host) before the delivery.
		prepare func(t *testing.T, h *harness)
		edit    func(i int, d *wire.ReleaseDelta, b *[]byte)
		// deltaMoved says whether the delta's bytes were fetched before falling back.
		deltaMoved bool
	}{
		{name: "no base: the node never had the version the delta is from",
			prepare: func(t *testing.T, h *harness) {
				if err := os.RemoveAll(rollback.VersionDir(h.root, v1)); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "the base was modified on the node",
			prepare: func(t *testing.T, h *harness) {
				p := rollback.BinaryPath(h.root, v1)
				b, _ := os.ReadFile(p)
				b[len(b)/2] ^= 0xff
				if err := os.WriteFile(p, b, 0o755); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "the delta is corrupt (signed as it is)", deltaMoved: true,
			edit: func(_ int, d *wire.ReleaseDelta, b *[]byte) {
				c := bytes.Clone(*b)
				c[len(c)/2] ^= 0xff
				*b, d.Digest = c, digestOf(c)
			}},
		{name: "the delta rebuilds a binary without the signed digest", deltaMoved: true,
			edit: func(_ int, d *wire.ReleaseDelta, b *[]byte) {
				var buf bytes.Buffer
				// Made against the base, to another binary: it decodes, the digest refuses it.
				if err := delta.Make(&buf, fixtureOld, fixtureOther); err != nil {
					panic(err)
				}
				*b, d.Size, d.Digest = buf.Bytes(), int64(buf.Len()), digestOf(buf.Bytes())
			}},
		{name: "the delta is not in the object store",
			edit: func(_ int, _ *wire.ReleaseDelta, b *[]byte) { *b = nil }},
		{name: "the store's delta is not the one the manifest signed",
			edit: func(_ int, d *wire.ReleaseDelta, b *[]byte) { d.Digest = digestOf([]byte("another delta")) }},
		{name: "the delta is refused: its window is over what the base allows", deltaMoved: true,
			edit: func(_ int, d *wire.ReleaseDelta, b *[]byte) {
				var buf bytes.Buffer
				if err := delta.Make(&buf, fixtureOld[:4096], bytes.Repeat(fixtureOld, 4)); err != nil {
					panic(err)
				}
				*b, d.Size, d.Digest = buf.Bytes(), int64(buf.Len()), digestOf(buf.Bytes())
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			old, bin := fakehost(t, v1, "ok", runtime.GOARCH), fakehost(t, v101, "ok", runtime.GOARCH)
			fixtureOld, fixtureOther = old, fakehost(t, v101, "held", runtime.GOARCH)
			h.release(v1, old)
			h.staged(v1, old)
			if tc.prepare != nil {
				tc.prepare(t, h)
			}
			m := h.releaseWithDeltas(v101, bin, []base{{v1, old}}, tc.edit)
			log := h.staged(v101, bin)
			last := log[len(log)-1]
			want := m.Size
			if tc.deltaMoved {
				want += m.Deltas[0].Size
			}
			if last.Delta != "" || last.Moved != want {
				t.Fatalf("staged progress %+v; want the archive, %d bytes moved", last, want)
			}
		})
	}
}

// The binaries the table's edits make deltas of (set by each case before it runs).
var fixtureOld, fixtureOther []byte

// The delta rebuilds the host binary only: a release carrying the launcher the node has comes
// as the delta, one carrying a launcher it lacks comes as the archive, whose launcher is staged.
func TestDeliverTakesADeltaOnlyWhenTheNodeHasTheReleasesLauncher(t *testing.T) {
	h := newHarness(t, nil)
	launcher, newer := fakehost(t, lv, "ok", runtime.GOARCH), fakehost(t, "v0.4.0", "ok", runtime.GOARCH)
	bins := map[string][]byte{}
	for _, v := range []string{v1, v101, "v1.0.2"} {
		bins[v] = fakehost(t, v, "ok", runtime.GOARCH)
	}
	withDelta := func(from string) func(*wire.Manifest) {
		return func(m *wire.Manifest) {
			var buf bytes.Buffer
			if err := delta.Make(&buf, bins[from], bins[m.Version]); err != nil {
				t.Fatal(err)
			}
			d := wire.ReleaseDelta{BaseVersion: from, BaseDigest: digestOf(bins[from]), Object: wire.DeltaObjectName(m.Version, from, m.OS, m.Arch),
				Size: int64(buf.Len()), Digest: digestOf(buf.Bytes())}
			obs, _ := h.js.ObjectStore(context.Background(), wire.NamesFor("").Archives())
			if _, err := obs.PutBytes(context.Background(), d.Object, buf.Bytes()); err != nil {
				t.Fatal(err)
			}
			m.Schema, m.Deltas = wire.ManifestSchemaWithDeltas, []wire.ReleaseDelta{d}
		}
	}
	h.releaseWithLauncher(v1, bins[v1], launcher, launcherOf(lv, launcher), nil)
	h.staged(v1, bins[v1])
	// The same launcher: the node has it, so the delta is enough.
	m := h.releaseWithLauncher(v101, bins[v101], launcher, launcherOf(lv, launcher), withDelta(v1))
	log := h.staged(v101, bins[v101])
	if last := log[len(log)-1]; last.Delta != v1 || last.Moved != m.Deltas[0].Size || last.Launcher != "" {
		t.Fatalf("staged progress %+v; want the delta from %s and nothing to say of the launcher", last, v1)
	}
	// A new launcher: the archive, and the launcher staged from it.
	m = h.releaseWithLauncher("v1.0.2", bins["v1.0.2"], newer, launcherOf("v0.4.0", newer), withDelta(v101))
	log = h.staged("v1.0.2", bins["v1.0.2"])
	if last := log[len(log)-1]; last.Delta != "" || last.Moved != m.Size || last.Launcher != "launcher v0.4.0 staged" {
		t.Fatalf("staged progress %+v; want the archive with its launcher staged", last)
	}
	if got, err := os.ReadFile(rollback.LauncherPath(h.root, "v0.4.0")); err != nil || !bytes.Equal(got, newer) {
		t.Fatalf("launchers/v0.4.0: %v", err)
	}
}

func digestOf(b []byte) digest.Digest { return digest.FromBytes(b) }

// The bytes a delivery reports moved add up over its attempts: a corrupt delta fetched, the
// archive not there yet (the attempt fails and is retried), then the delta again and the
// archive: the heartbeat's fetch.moved says all of it once the version is staged.
func TestDeliverCountsTheBytesMovedOverEveryAttempt(t *testing.T) {
	// A backoff of a nanosecond: the second attempt is not held back.
	h := newHarness(t, func(c *Config) { c.Backoff = Backoff{Initial: time.Nanosecond, Max: time.Nanosecond} })
	old, bin := fakehost(t, v1, "ok", runtime.GOARCH), fakehost(t, v101, "ok", runtime.GOARCH)
	h.release(v1, old)
	h.staged(v1, old)
	corrupt := func(_ int, d *wire.ReleaseDelta, b *[]byte) {
		c := bytes.Clone(*b)
		c[len(c)/2] ^= 0xff
		*b, d.Digest = c, digestOf(c)
	}
	m := h.releaseWithDeltas(v101, bin, []base{{v1, old}}, corrupt)
	// The archive is not in the store yet: the first attempt fetches the delta, fails to use
	// it, and finds no archive.
	obs, _ := h.js.ObjectStore(context.Background(), wire.NamesFor("").Archives())
	if err := obs.Delete(context.Background(), m.Object); err != nil {
		t.Fatal(err)
	}
	var log progressLog
	err := h.d.Deliver(context.Background(), v101, log.report)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindObjectMissing {
		t.Fatalf("first attempt: %v, want the archive missing", err)
	}
	if bad, _, _ := h.records.IsBad(context.Background(), v101); bad {
		t.Fatal("marked bad")
	}
	if _, err := obs.PutBytes(context.Background(), m.Object, pack(t, bin)); err != nil {
		t.Fatal(err)
	}
	p := h.staged(v101, bin)
	last := p[len(p)-1]
	if want := 2*m.Deltas[0].Size + m.Size; last.Moved != want {
		t.Fatalf("staged after two attempts with %d bytes moved; want %d (the delta twice and the archive)", last.Moved, want)
	}
}
