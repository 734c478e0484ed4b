package deliver

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

const v1 = "v1.0.0"

// progressLog collects progress reports.
type progressLog struct {
	mu sync.Mutex
	p  []Progress
}

func (l *progressLog) report(p Progress) { l.mu.Lock(); l.p = append(l.p, p); l.mu.Unlock() }

func (l *progressLog) states() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]int{}
	for _, p := range l.p {
		m[p.State]++
	}
	return m
}

func TestDeliverStagesAVerifiedVersionAndRecordsItsDigest(t *testing.T) {
	h := newHarness(t, nil)
	bin := fakehost(t, v1, "ok", runtime.GOARCH)
	h.release(v1, bin)
	var log progressLog
	if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(rollback.VersionsDir(h.root), v1, archive.BinaryName))
	if err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("versions/%s/mesh-host: %v", v1, err)
	}
	if ents := h.versionsEntries(); len(ents) != 1 {
		t.Fatalf("versions/ holds %v, want only %s", ents, v1)
	}
	if ents, _ := os.ReadDir(filepath.Join(rollback.VersionsDir(h.root), v1)); len(ents) != 1 {
		t.Fatalf("versions/%s holds %d entries, want mesh-host only", v1, len(ents))
	}
	// Choose picks it, which it does only if the binary matches the digest recorded for it.
	ch, err := h.records.Choose(context.Background(), h.root)
	if err != nil || ch.Version != v1 {
		t.Fatalf("Choose: %+v, %v", ch, err)
	}
	// And the records say where it came from: delivered, signed by the release key.
	rec, ok, err := h.records.Lookup(context.Background(), v1)
	want := rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: wire.KeyID(h.priv.Public().(ed25519.PublicKey))}
	if err != nil || !ok || rec.Provenance != want || rec.Provenance.String() != "delivered, signed by key "+want.SignedBy {
		t.Fatalf("records of %s: %+v, %v, %v; want provenance %+v", v1, rec, ok, err, want)
	}
	last := log.p[len(log.p)-1]
	if last.State != StateStaged {
		t.Fatalf("last progress %+v, want staged", last)
	}
	var fetched *Progress
	for i := range log.p {
		if log.p[i].State == StateFetching {
			fetched = &log.p[i]
		}
	}
	if fetched == nil || fetched.Bytes != fetched.Total || fetched.Percent != 100 || fetched.Total == 0 {
		t.Fatalf("last fetching progress %+v, want all bytes at 100%%", fetched)
	}
	if f := fetched.Fetch(); f.State != "fetching" || f.Version != v1 || f.Bytes != fetched.Bytes {
		t.Fatalf("heartbeat form %+v", f)
	}
}

func TestDeliverIsANoOpForAVersionAlreadyStaged(t *testing.T) {
	h := newHarness(t, nil)
	h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
	if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
		t.Fatal(err)
	}
	var log progressLog
	if err := h.d.Deliver(context.Background(), v1, log.report); err != nil || len(log.p) != 0 {
		t.Fatalf("second delivery: %v, progress %v", err, log.p)
	}
}

// refusal is one bad-input case: setup publishes something for v1 (or configures h), and
// Deliver must fail with kind, leaving versions/ empty.
type refusal struct {
	name  string
	cfg   func(*Config)
	setup func(t *testing.T, h *harness)
	kind  Kind
	is    error  // optional: errors.Is target
	says  string // the error names this
}

func refusals(t *testing.T) []refusal {
	ok := func() []byte { return fakehost(t, v1, "ok", runtime.GOARCH) }
	signedArchive := func(a, bin []byte) func(t *testing.T, h *harness) {
		return func(t *testing.T, h *harness) {
			m := manifestFor(v1, a, bin)
			h.sign(&m)
			h.put(v1, m, a)
		}
	}
	alteredAfterSigning := func(edit func(*wire.Manifest)) func(t *testing.T, h *harness) {
		return func(t *testing.T, h *harness) {
			a := pack(t, ok())
			m := manifestFor(v1, a, ok())
			h.sign(&m)
			edit(&m)
			h.put(v1, m, a)
		}
	}
	return []refusal{
		{name: "TestDeliverRefusesDigestMismatch", kind: KindDigestMismatch, says: "republish",
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				other := append([]byte{}, a...)
				other[len(other)/2] ^= 0xff // same size, other bytes: what was signed
				m := manifestFor(v1, other, ok())
				h.sign(&m)
				h.put(v1, m, a)
			}},
		{name: "TestDeliverRefusesSizeMismatch", kind: KindSizeMismatch, says: "more than",
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor(v1, a, ok())
				h.sign(&m)
				h.put(v1, m, append(a, "trailing junk"...))
			}},
		{name: "TestDeliverRefusesTruncatedObject", kind: KindTruncated, says: "truncated",
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor(v1, a, ok())
				h.sign(&m)
				h.put(v1, m, a[:len(a)/2])
			}},
		{name: "TestDeliverRefusesWhenTheObjectIsMissing", kind: KindObjectMissing, says: "not in",
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor(v1, a, ok())
				h.sign(&m)
				h.put(v1, m, nil)
			}},
		{name: "TestDeliverRefusesAnUnsignedManifest", kind: KindSignature, is: wire.ErrUnsigned,
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				h.put(v1, manifestFor(v1, a, ok()), a)
			}},
		{name: "TestDeliverRefusesAManifestSignedByAnUnknownKey", kind: KindSignature, is: wire.ErrUnknownKey, says: "trusted_keys",
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor(v1, a, ok())
				m.Sign(meshtest.StrangerKey.Private)
				h.put(v1, m, a)
			}},
		{name: "TestDeliverRefusesAManifestWithSizeAlteredAfterSigning", kind: KindSignature, is: wire.ErrBadSignature,
			setup: alteredAfterSigning(func(m *wire.Manifest) { m.Size++ })},
		{name: "TestDeliverRefusesAManifestWithDigestAlteredAfterSigning", kind: KindSignature, is: wire.ErrBadSignature,
			setup: alteredAfterSigning(func(m *wire.Manifest) { m.Digest = digest.FromString("evil") })},
		{name: "TestDeliverRefusesAManifestWithBinaryDigestAlteredAfterSigning", kind: KindSignature, is: wire.ErrBadSignature,
			setup: alteredAfterSigning(func(m *wire.Manifest) { m.BinaryDigest = digest.FromString("evil") })},
		{name: "TestDeliverRefusesAManifestWithCreatedAlteredAfterSigning", kind: KindSignature, is: wire.ErrBadSignature,
			setup: alteredAfterSigning(func(m *wire.Manifest) { m.Created = "2030-01-01T00:00:00Z" })},
		{name: "TestDeliverRefusesAManifestWithVersionAlteredAfterSigning", kind: KindSignature, is: wire.ErrBadSignature,
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor("v0.9.0", a, ok())
				h.sign(&m)
				m.Version, m.Object = v1, wire.ObjectName(v1, m.OS, m.Arch)
				h.put(v1, m, a)
			}},
		{name: "TestDeliverRefusesAManifestUnderAnotherVersionsKey", kind: KindBadManifest, says: "is for v0.9.0",
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor("v0.9.0", a, ok())
				h.sign(&m)
				h.put(v1, m, a)
			}},
		{name: "TestDeliverRefusesAManifestThatIsNotJSON", kind: KindBadManifest,
			setup: func(t *testing.T, h *harness) {
				kv, _ := h.js.KeyValue(context.Background(), wire.NamesFor("").Releases())
				kv.Put(context.Background(), v1, []byte("version=v1.0.0"))
			}},
		{name: "TestDeliverRefusesABinaryReportingAnotherVersion", kind: KindVersionMismatch, says: `reports version "v9.9.9"`,
			setup: func(t *testing.T, h *harness) {
				signedArchive(pack(t, fakehost(t, "v9.9.9", "ok", runtime.GOARCH)), fakehost(t, "v9.9.9", "ok", runtime.GOARCH))(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveWithDotDot", kind: KindBadArchive, is: archive.ErrUnsafe, says: "escapes",
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{meshtest.File("../mesh-host", ok())}, nil), ok())(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveWithAnAbsolutePath", kind: KindBadArchive, is: archive.ErrUnsafe, says: "absolute",
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{meshtest.File("/usr/bin/mesh-host", ok())}, nil), ok())(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveWithASymlink", kind: KindBadArchive, is: archive.ErrUnsafe, says: "symlink",
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "mesh-host", Linkname: "/bin/sh"}}}, nil), ok())(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveWithAHardLink", kind: KindBadArchive, is: archive.ErrUnsafe, says: "hard link",
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeLink, Name: "mesh-host", Linkname: "/etc/shadow"}}}, nil), ok())(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveWithADevice", kind: KindBadArchive, is: archive.ErrUnsafe, says: "device",
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeBlock, Name: "mesh-host", Devmajor: 8, Mode: 0o660}}}, nil), ok())(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveWithTwoFiles", kind: KindBadArchive, is: archive.ErrUnsafe, says: "more than one entry",
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", ok()), meshtest.File("mesh-host.sig", []byte("x"))}, nil), ok())(t, h)
			}},
		{name: "TestDeliverRefusesADecompressionBomb", kind: KindBadArchive, is: archive.ErrUnsafe, says: "decompression bomb",
			cfg: func(c *Config) { c.MaxBinary = 4 << 20 },
			setup: func(t *testing.T, h *harness) {
				signedArchive(meshtest.Archive([]meshtest.Entry{meshtest.File("mesh-host", ok())}, make([]byte, 64<<20)), ok())(t, h)
			}},
		{name: "TestDeliverRefusesABinaryWhoseDigestIsNotTheSignedOne", kind: KindBinaryDigest,
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor(v1, a, []byte("another binary"))
				h.sign(&m)
				h.put(v1, m, a)
			}},
		{name: "TestDeliverRefusesABinaryForAnotherArchitecture", kind: KindWrongPlatform, says: "built for",
			setup: func(t *testing.T, h *harness) {
				other := "arm64"
				if runtime.GOARCH == "arm64" {
					other = "amd64"
				}
				bin := fakehost(t, v1, "ok", other)
				signedArchive(pack(t, bin), bin)(t, h) // the manifest wrongly says this machine's arch
			}},
		{name: "TestDeliverRefusesAManifestForAnotherArchitectureBeforeFetching", kind: KindNoPlatform, says: "has no build for " + runtime.GOOS + "/" + runtime.GOARCH,
			setup: func(t *testing.T, h *harness) {
				a := pack(t, ok())
				m := manifestFor(v1, a, ok())
				m.Arch = "s390x"
				m.Object = wire.ObjectName(v1, m.OS, m.Arch)
				h.sign(&m)
				h.put(v1, m, nil)
			}},
		{name: "TestDeliverRefusesABinaryWhosePreflightFails", kind: KindPreflight, says: "schema 9 is newer",
			setup: func(t *testing.T, h *harness) {
				bin := fakehost(t, v1, "fail", runtime.GOARCH)
				signedArchive(pack(t, bin), bin)(t, h)
			}},
		{name: "TestDeliverRefusesABinaryWhosePreflightHangs", kind: KindPreflight, says: "did not finish",
			cfg: func(c *Config) { c.PreflightTimeout = 300 * time.Millisecond },
			setup: func(t *testing.T, h *harness) {
				bin := fakehost(t, v1, "hang", runtime.GOARCH)
				signedArchive(pack(t, bin), bin)(t, h)
			}},
		{name: "TestDeliverRefusesAnArchiveOverTheSizeLimit", kind: KindTooLarge,
			cfg:   func(c *Config) { c.MaxArchive = 1024 },
			setup: func(t *testing.T, h *harness) { h.release(v1, ok()) }},
		{name: "TestDeliverRefusesAVersionMarkedBad", kind: KindMarkedBad, says: "crashed at start",
			setup: func(t *testing.T, h *harness) {
				h.release(v1, ok())
				ctx := context.Background()
				h.records.RecordVersion(ctx, v1, digest.FromBytes(ok()), rollback.Provenance{Source: rollback.SourceDelivered})
				if err := h.records.MarkBad(ctx, v1, "crashed at start"); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "TestDeliverRefusesAWithdrawnVersion", kind: KindWithdrawn, says: "withdrawn from the fleet (crashes on arm64)",
			cfg: func(c *Config) {
				c.Withdrawn = func(v string) (string, bool) { return "crashes on arm64", v == v1 }
			},
			setup: func(t *testing.T, h *harness) { h.release(v1, ok()) }},
		{name: "TestDeliverRefusesAVersionThisNodeRecordedWithOtherBytes", kind: KindBinaryDigest, says: "a version's bytes never change",
			setup: func(t *testing.T, h *harness) {
				h.release(v1, ok())
				// Seen here before (installed, then retired) with other bytes: Choose would never run these.
				if err := h.records.RecordVersion(context.Background(), v1, digest.FromString("other bytes"), rollback.Provenance{Source: rollback.SourceInstalled}); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "TestDeliverRefusesAVersionNotPublished", kind: KindNotPublished, says: "mesh-release publish",
			setup: func(t *testing.T, h *harness) {}},
	}
}

func TestDeliverRefuses(t *testing.T) {
	for _, c := range refusals(t) {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.cfg)
			c.setup(t, h)
			err := h.d.Deliver(context.Background(), v1, nil)
			var e *Error
			if !errors.As(err, &e) || e.Kind != c.kind {
				t.Fatalf("got %v, want a %s refusal", err, c.kind)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("%v does not wrap %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), v1) {
				t.Fatalf("error %q does not name %s and say %q", err, v1, c.says)
			}
			if ents := h.versionsEntries(); len(ents) != 0 {
				t.Fatalf("after a refusal versions/ holds %v, want nothing", ents)
			}
		})
	}
}

// A withdrawn version's manifest, published again (a new revision), is refused again and its
// archive never fetched; a version withdrawn while it is fetched never reaches versions/.
func TestDeliverNeverFetchesAWithdrawnVersion(t *testing.T) {
	var mu sync.Mutex
	withdrawn := map[string]string{}
	h := newHarness(t, func(c *Config) {
		c.Withdrawn = func(v string) (string, bool) {
			mu.Lock()
			defer mu.Unlock()
			r, ok := withdrawn[v]
			return r, ok
		}
	})
	withdraw := func(v string) {
		mu.Lock()
		withdrawn[v] = "leaks memory"
		mu.Unlock()
	}
	bin := fakehost(t, v1, "ok", runtime.GOARCH)
	withdraw(v1)
	for i := range 3 {
		h.release(v1, bin) // published again each time: a new manifest revision
		var log progressLog
		err := h.d.Deliver(context.Background(), v1, log.report)
		var e *Error
		if !errors.As(err, &e) || e.Kind != KindWithdrawn || !strings.Contains(err.Error(), "leaks memory") || !strings.Contains(err.Error(), v1) {
			t.Fatalf("attempt %d: %v, want a withdrawn refusal naming %s and the reason", i, err, v1)
		}
		if n := log.states()[StateFetching]; n != 0 {
			t.Fatalf("attempt %d fetched a withdrawn version (%d progress reports)", i, n)
		}
	}
	// Withdrawn while its fetch runs: refused before it is put in place.
	v2 := "v1.2.0"
	h.release(v2, fakehost(t, v2, "ok", runtime.GOARCH))
	err := h.d.Deliver(context.Background(), v2, func(p Progress) {
		if p.State == StateVerifying {
			withdraw(v2)
		}
	})
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindWithdrawn {
		t.Fatalf("withdrawn during its fetch: %v, want a withdrawn refusal", err)
	}
	if ents := h.versionsEntries(); len(ents) != 0 {
		t.Fatalf("versions/ holds %v", ents)
	}
}

func TestDeliverRefusesTooLittleDiskSpaceBeforeFetching(t *testing.T) {
	h := newHarness(t, nil)
	h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
	// The one mock: the file system reports 1 MiB free.
	h.d.env.freeSpace = func(string) (uint64, error) { return 1 << 20, nil }
	var log progressLog
	err := h.d.Deliver(context.Background(), v1, log.report)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindNoSpace || !strings.Contains(err.Error(), "free some space") {
		t.Fatalf("got %v, want a no-space refusal", err)
	}
	if n := log.states()[StateFetching]; n != 0 {
		t.Fatalf("fetched (%d progress reports) before checking space", n)
	}
	if ents := h.versionsEntries(); len(ents) != 0 {
		t.Fatalf("versions/ holds %v", ents)
	}
}

func TestDeliverDoesNotFetchARefusedReleaseAgain(t *testing.T) {
	h := newHarness(t, nil)
	bin := fakehost(t, v1, "fail", runtime.GOARCH)
	m := h.release(v1, bin)
	first := h.d.Deliver(context.Background(), v1, nil)
	var e *Error
	if !errors.As(first, &e) || e.Kind != KindPreflight {
		t.Fatalf("got %v", first)
	}
	// Remove the object: a second fetch would now fail differently.
	obs, _ := h.js.ObjectStore(context.Background(), wire.NamesFor("").Archives())
	if err := obs.Delete(context.Background(), m.Object); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var log progressLog
		again := h.d.Deliver(context.Background(), v1, log.report)
		if again != first {
			t.Fatalf("got %v, want the remembered refusal %v", again, first)
		}
		if len(log.p) != 0 {
			t.Fatalf("a remembered refusal reported progress %v", log.p)
		}
	}
}

// A refusal is remembered for the manifest's bytes, not its KV revision: the same bytes put
// again are the same release, refused unfetched; another manifest (here the same archive signed
// again with another creation time) is tried.
func TestDeliverRemembersARefusalForTheManifestsBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(m *wire.Manifest) // nil: the same bytes
		fetched bool
	}{
		{name: "the same manifest put again under a new revision", fetched: false},
		{name: "another manifest of the same archive", edit: func(m *wire.Manifest) {
			m.Created = time.Date(2026, 10, 2, 12, 0, 0, 0, time.UTC).Format(time.RFC3339)
		}, fetched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			bin := fakehost(t, v1, "fail", runtime.GOARCH)
			m := h.release(v1, bin)
			first := h.d.Deliver(t.Context(), v1, nil)
			var e *Error
			if !errors.As(first, &e) || e.Kind != KindPreflight {
				t.Fatalf("got %v", first)
			}
			if tc.edit != nil {
				tc.edit(&m)
				h.sign(&m)
			}
			h.put(v1, m, nil)
			var log progressLog
			again := h.d.Deliver(t.Context(), v1, log.report)
			if fetched := log.states()[StateFetching] > 0; fetched != tc.fetched {
				t.Errorf("fetched again: %v, want %v (progress %v)", fetched, tc.fetched, log.p)
			}
			if !errors.As(again, &e) || e.Kind != KindPreflight {
				t.Errorf("got %v, want the preflight refused again", again)
			}
			if remembered := again == first; remembered == tc.fetched {
				t.Errorf("the remembered refusal returned: %v, want %v", remembered, !tc.fetched)
			}
		})
	}
}

func TestDeliverTriesAgainWhenTheManifestChanges(t *testing.T) {
	h := newHarness(t, nil)
	h.release(v1, fakehost(t, v1, "fail", runtime.GOARCH))
	if err := h.d.Deliver(context.Background(), v1, nil); err == nil {
		t.Fatal("a failing preflight was staged")
	}
	// The operator deletes the broken announcement and publishes a fixed build.
	h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
	if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
		t.Fatal(err)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged")
	}
}

func TestDeliverWaitsOutTheBackoffInsteadOfRetryingAtOnce(t *testing.T) {
	h := newHarness(t, nil) // backoff starts at one hour
	bin := fakehost(t, v1, "ok", runtime.GOARCH)
	a := pack(t, bin)
	m := manifestFor(v1, a, bin)
	h.sign(&m)
	h.put(v1, m, nil)
	first := h.d.Deliver(context.Background(), v1, nil)
	var e *Error
	if !errors.As(first, &e) || e.Kind != KindObjectMissing || e.RetryAt.IsZero() {
		t.Fatalf("got %v, want object-missing with a retry time", first)
	}
	h.put(v1, m, a) // the object appears, but the retry time has not come
	var log progressLog
	if again := h.d.Deliver(context.Background(), v1, log.report); again != first || len(log.p) != 0 {
		t.Fatalf("retried before the backoff allowed: %v, %v", again, log.p)
	}
}

func TestRunRetriesWithBackoffUntilTheObjectAppears(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Backoff = Backoff{Initial: 20 * time.Millisecond, Max: 50 * time.Millisecond} })
	bin := fakehost(t, v1, "ok", runtime.GOARCH)
	a := pack(t, bin)
	m := manifestFor(v1, a, bin)
	h.sign(&m)
	h.put(v1, m, nil)
	failed := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() {
		done <- h.d.Run(context.Background(), v1, func(p Progress) {
			if p.State == StateFailed {
				if p.Err == nil || p.Err.Kind != KindObjectMissing || p.Fetch().Error == "" {
					t.Errorf("failure progress %+v", p)
				}
				failed <- struct{}{}
			}
		})
	}()
	<-failed
	<-failed // it retried, and failed again, without help
	h.put(v1, m, a)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged")
	}
}

func TestRunStopsAtAPermanentRefusal(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Backoff = Backoff{Initial: time.Millisecond} })
	bin := fakehost(t, v1, "fail", runtime.GOARCH)
	h.release(v1, bin)
	err := h.d.Run(context.Background(), v1, nil)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindPreflight {
		t.Fatalf("got %v", err)
	}
}

func TestRunStopsWhenItsContextIsCancelled(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.d.Run(ctx, v1, nil) }() // not published: waits an hour to retry
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestCopyVerifiedChecksWhatItStreams(t *testing.T) {
	body := []byte("the archive's bytes")
	m := release{Build: wire.Build{Version: v1, Object: "o", Size: int64(len(body)), Digest: digest.FromBytes(body)}}
	cases := []struct {
		name string
		src  io.Reader
		kind Kind
	}{
		{"TestCopyVerifiedRefusesAShortStream", bytes.NewReader(body[:5]), KindTruncated},
		{"TestCopyVerifiedRefusesALongerStream", bytes.NewReader(append(append([]byte{}, body...), '!')), KindSizeMismatch},
		{"TestCopyVerifiedRefusesOtherBytes", bytes.NewReader(bytes.ToUpper(body)), KindDigestMismatch},
		{"TestCopyVerifiedCallsALostConnectionABusError", io.MultiReader(bytes.NewReader(body[:3]), errReader{}), KindBus},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := copyVerified(io.Discard, c.src, archiveOf(m), io.Discard)
			var e *Error
			if !errors.As(err, &e) || e.Kind != c.kind {
				t.Fatalf("got %v, want %s", err, c.kind)
			}
		})
	}
	if err := copyVerified(io.Discard, bytes.NewReader(body), archiveOf(m), io.Discard); err != nil {
		t.Fatal(err)
	}
	var huge bytes.Buffer
	// The manifest's size caps what is read: a stream that never ends is cut at size+1.
	err := copyVerified(&huge, endless{}, archiveOf(m), io.Discard)
	if e := (*Error)(nil); !errors.As(err, &e) || e.Kind != KindSizeMismatch || int64(huge.Len()) != m.Size+1 {
		t.Fatalf("endless stream: %v after %d bytes", err, huge.Len())
	}
}

func TestCopyVerifiedCallsAFullDiskNoSpaceNotABusFailure(t *testing.T) {
	body := []byte("the archive's bytes")
	m := release{Build: wire.Build{Version: v1, Object: "o", Size: int64(len(body)), Digest: digest.FromBytes(body)}}
	err := copyVerified(fullDisk{}, bytes.NewReader(body), archiveOf(m), io.Discard)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindNoSpace || e.Kind.Permanent() || !strings.Contains(err.Error(), "free some space") {
		t.Fatalf("got %v, want a no-space failure that says to free space", err)
	}
}

// fullDisk fails every write as a full disk does.
type fullDisk struct{}

func (fullDisk) Write([]byte) (int, error) {
	return 0, &os.PathError{Op: "write", Path: "/var/lib/mesh-host/versions/.staging-1/download.tar.zst", Err: syscall.ENOSPC}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, jetstream.ErrConsumerNotFound }

type endless struct{}

func (endless) Read(p []byte) (int, error) { return len(p), nil }

func TestBackoffGrowsIsCappedAndJittered(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}
	for n := 1; n <= 40; n++ {
		base := time.Second << (n - 1)
		if n > 6 || base > time.Minute {
			base = time.Minute
		}
		lo, hi := time.Duration(float64(base)*0.8), time.Duration(float64(base)*1.2)
		for range 20 {
			if d := b.Delay(n); d < lo || d > hi {
				t.Fatalf("Delay(%d) = %v, want within [%v, %v]", n, d, lo, hi)
			}
		}
	}
	if d := (Backoff{}).Delay(0); d < 4*time.Second {
		t.Fatalf("the default first delay %v is a hot loop", d)
	}
}

func TestNewRefusesAHostWithoutTrustedKeys(t *testing.T) {
	h := newHarness(t, nil)
	_, err := New(Config{Root: t.TempDir(), JS: h.js, Records: h.records})
	if err == nil || !strings.Contains(err.Error(), "trusted_keys") {
		t.Fatalf("got %v", err)
	}
}
