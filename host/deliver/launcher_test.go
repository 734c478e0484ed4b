package deliver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/sqlitefile"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

const lv = "v0.3.0" // the launcher version the releases here carry

// rollback.Records stages launchers: the host passes it as Records.
var _ LauncherRecords = (*rollback.Records)(nil)

// releaseWithLauncher publishes bin as version, its archive carrying launcher, signed as schema
// 2 with the launcher named as l (edit may change the manifest before it is signed).
func (h *harness) releaseWithLauncher(version string, bin, launcher []byte, l wire.ReleaseLauncher, edit func(*wire.Manifest)) wire.Manifest {
	h.t.Helper()
	var a bytes.Buffer
	if err := archive.PackWithLauncher(&a, bytes.NewReader(bin), int64(len(bin)), bytes.NewReader(launcher), int64(len(launcher))); err != nil {
		h.t.Fatal(err)
	}
	m := manifestFor(version, a.Bytes(), bin)
	m.Schema, m.Launcher = wire.ManifestSchemaWithLauncher, l
	if edit != nil {
		edit(&m)
	}
	h.sign(&m)
	h.put(version, m, a.Bytes())
	return m
}

// launcherOf names launcher bytes as a manifest does.
func launcherOf(version string, b []byte) wire.ReleaseLauncher {
	return wire.ReleaseLauncher{Version: version, Digest: digest.FromBytes(b), Size: int64(len(b))}
}

// launcherEntries lists ROOT/launchers (staging directories included).
func (h *harness) launcherEntries() []string {
	ents, _ := os.ReadDir(rollback.LaunchersDir(h.root))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// staged is the last progress of a delivery, which must be StateStaged.
func staged(t *testing.T, log *progressLog) Progress {
	t.Helper()
	log.mu.Lock()
	defer log.mu.Unlock()
	last := log.p[len(log.p)-1]
	if last.State != StateStaged {
		t.Fatalf("last progress %+v, want staged", last)
	}
	return last
}

// fetches counts the fetches a delivery made: each begins with a report of 0 bytes.
func (l *progressLog) fetches() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, p := range l.p {
		if p.State == StateFetching && p.Bytes == 0 {
			n++
		}
	}
	return n
}

func TestDeliverStagesTheLauncherAReleaseCarries(t *testing.T) {
	h := newHarness(t, nil)
	bin, launcher := fakehost(t, v1, "ok", runtime.GOARCH), fakehost(t, lv, "ok", runtime.GOARCH)
	m := h.releaseWithLauncher(v1, bin, launcher, launcherOf(lv, launcher), nil)
	var log progressLog
	if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(rollback.BinaryPath(h.root, v1)); err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("versions/%s/mesh-host: %v", v1, err)
	}
	got, err := os.ReadFile(rollback.LauncherPath(h.root, lv))
	if err != nil || !bytes.Equal(got, launcher) {
		t.Fatalf("launchers/%s/mesh-launcher: %v", lv, err)
	}
	if fi, _ := os.Stat(rollback.LauncherPath(h.root, lv)); fi.Mode().Perm() != archive.Mode {
		t.Fatalf("launcher mode %v", fi.Mode().Perm())
	}
	if ents := h.launcherEntries(); len(ents) != 1 {
		t.Fatalf("launchers/ holds %v, want only %s", ents, lv)
	}
	if ents, _ := os.ReadDir(rollback.VersionDir(h.root, v1)); len(ents) != 1 {
		t.Fatalf("versions/%s holds %d entries; the launcher goes under launchers/", v1, len(ents))
	}
	rec, ok, err := h.records.LookupLauncher(context.Background(), lv)
	want := rollback.LauncherVersion{Version: lv, Digest: digest.FromBytes(launcher), Size: int64(len(launcher)),
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: wire.KeyID(h.priv.Public().(ed25519.PublicKey))}, CarriedBy: v1}
	if err != nil || !ok || rec.LauncherVersion != want {
		t.Fatalf("records of launcher %s: %+v, %v, %v; want %+v", lv, rec.LauncherVersion, ok, err, want)
	}
	if p := staged(t, &log); p.Launcher != "launcher "+lv+" staged" || p.Fetch().LauncherNote != p.Launcher {
		t.Fatalf("staged progress says %q about the launcher", p.Launcher)
	}
	if n := log.fetches(); n != 1 {
		t.Fatalf("%d fetches, want 1: the launcher comes with the host binary", n)
	}
	if h.d.LauncherStagings() != 1 || m.Launcher.Version != lv {
		t.Fatalf("%d launcher stagings, want 1", h.d.LauncherStagings())
	}
}

// The figure "how often a node stages a launcher": a second release carrying the same launcher
// bytes stages none.
func TestDeliverStagesNoLauncherWhenTwoReleasesCarryTheSameOne(t *testing.T) {
	h := newHarness(t, nil)
	launcher := fakehost(t, lv, "ok", runtime.GOARCH)
	var logs [2]progressLog
	for i, v := range []string{v1, "v1.1.0"} {
		h.releaseWithLauncher(v, fakehost(t, v, "ok", runtime.GOARCH), launcher, launcherOf(lv, launcher), nil)
		if err := h.d.Deliver(context.Background(), v, logs[i].report); err != nil {
			t.Fatal(err)
		}
		if !h.d.Have(v) {
			t.Fatalf("%s not staged", v)
		}
	}
	before, _ := os.Stat(rollback.LauncherDir(h.root, lv))
	if n := h.d.LauncherStagings(); n != 1 {
		t.Fatalf("two releases carrying one launcher: %d launcher stagings, want 1", n)
	}
	if note := staged(t, &logs[1]).Launcher; note != "" {
		t.Fatalf("the second release's launcher note is %q, want none: the node has it", note)
	}
	if f0, f1 := logs[0].fetches(), logs[1].fetches(); f0 != 1 || f1 != 1 {
		t.Fatalf("fetches %d and %d, want one per release", f0, f1)
	}
	all, err := h.records.Launchers(context.Background(), h.root)
	if err != nil || len(all) != 1 || all[0].CarriedBy != v1 {
		t.Fatalf("launcher records %+v, %v: want one, carried by %s", all, err, v1)
	}
	after, _ := os.Stat(rollback.LauncherDir(h.root, lv))
	if !os.SameFile(before, after) || len(h.launcherEntries()) != 1 {
		t.Fatal("launchers/ changed on the second release")
	}
}

// Each case leaves the host version staged and no launcher under launchers/ — the launcher's
// problem never refuses the host release — and says why in the staged progress.
func TestDeliverStagesTheHostButNotTheLauncherWhen(t *testing.T) {
	other := []byte("another launcher's bytes")
	cases := []struct {
		name     string
		mode     string                       // the launcher fixture's mode
		says     string                       // the note says this
		before   func(*testing.T, *harness)   // records to set up
		manifest func(*wire.Manifest, []byte) // edits to the signed manifest (given the launcher's bytes)
		kept     func(*testing.T, *harness)   // what the records must still say
	}{
		{name: "its preflight fails", mode: "fail", says: "`mesh-launcher version` failed"},
		{name: "its preflight hangs", mode: "hang", says: "did not finish within"},
		{name: "it prints another version", mode: "ok",
			manifest: func(m *wire.Manifest, _ []byte) { m.Launcher.Version = "v0.9.9" }, says: `printed "v0.3.0" but its manifest says v0.9.9`},
		{name: "its bytes are not the digest signed", mode: "ok",
			manifest: func(m *wire.Manifest, _ []byte) { m.Launcher.Digest = digest.FromBytes(other) }, says: "its manifest signed " + string(digest.FromBytes(other))},
		{name: "its size is not the one signed", mode: "ok",
			manifest: func(m *wire.Manifest, _ []byte) { m.Launcher.Size++ }, says: "bytes, its manifest signed"},
		{name: "it is marked bad by version", mode: "ok", says: "marked bad on this node (crashed at start)",
			before: func(t *testing.T, h *harness) {
				recordLauncher(t, h, lv, digest.FromBytes(other))
				if err := h.records.MarkLauncherBad(context.Background(), lv, "crashed at start", ""); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "it is marked bad by digest", mode: "ok", says: "marked bad on this node (hung)",
			before: func(t *testing.T, h *harness) {
				recordLauncher(t, h, "v0.2.0", digest.FromBytes(fakehost(t, lv, "ok", runtime.GOARCH)))
				if err := h.records.MarkLauncherBad(context.Background(), "v0.2.0", "hung", ""); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "its version is here with another digest", mode: "ok", says: "digest",
			before: func(t *testing.T, h *harness) { recordLauncher(t, h, lv, digest.FromBytes(other)) },
			kept: func(t *testing.T, h *harness) {
				rec, _, _ := h.records.LookupLauncher(context.Background(), lv)
				if rec.Digest != digest.FromBytes(other) {
					t.Fatalf("the recorded digest changed to %s", rec.Digest)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(cfg *Config) {
				if c.mode == "hang" {
					cfg.PreflightTimeout = 500 * time.Millisecond
				}
			})
			if c.before != nil {
				c.before(t, h)
			}
			bin, launcher := fakehost(t, v1, "ok", runtime.GOARCH), fakehost(t, lv, c.mode, runtime.GOARCH)
			h.releaseWithLauncher(v1, bin, launcher, launcherOf(lv, launcher), func(m *wire.Manifest) {
				if c.manifest != nil {
					c.manifest(m, launcher)
				}
			})
			var log progressLog
			if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
				t.Fatalf("the host release was refused for its launcher: %v", err)
			}
			if !h.d.Have(v1) {
				t.Fatal("the host version is not staged")
			}
			if ents := h.launcherEntries(); len(ents) != 0 {
				t.Fatalf("launchers/ holds %v, want nothing", ents)
			}
			note := staged(t, &log).Launcher
			if !strings.Contains(note, c.says) || !strings.Contains(note, "not staged") || len(note) > maxLauncherNote {
				t.Fatalf("launcher note %q, want one saying %q", note, c.says)
			}
			if bad, _, _ := h.records.IsBad(context.Background(), v1); bad {
				t.Fatal("the host release was marked bad for its launcher")
			}
			if c.kept != nil {
				c.kept(t, h)
			}
		})
	}
}

func recordLauncher(t *testing.T, h *harness, version string, d digest.Digest) {
	t.Helper()
	if err := h.records.RecordLauncher(context.Background(), rollback.LauncherVersion{Version: version, Digest: d, Size: 1,
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered}}); err != nil {
		t.Fatal(err)
	}
}

// A records.db an older launcher keeps (schema 5, before launcher versions): the host version
// is staged and the launcher left alone.
func TestDeliverOnRecordsOlderThanLaunchersStagesTheHostOnly(t *testing.T) {
	h := newHarness(t, nil)
	h.records.Close()
	ctx := context.Background()
	db, _, err := sqlitefile.Open(ctx, rollback.RecordsPath(h.root))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `PRAGMA user_version = 5`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	rec, err := rollback.OpenForHost(ctx, h.root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Close() })
	if rec.HasLaunchers() {
		t.Fatal("records at schema 5 say they keep launchers")
	}
	cfg := h.cfg
	cfg.Records = rec
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	launcher := fakehost(t, lv, "ok", runtime.GOARCH)
	for _, v := range []string{v1, "v1.1.0"} {
		h.releaseWithLauncher(v, fakehost(t, v, "ok", runtime.GOARCH), launcher, launcherOf(lv, launcher), nil)
		var log progressLog
		if err := d.Deliver(ctx, v, log.report); err != nil {
			t.Fatal(err)
		}
		if !d.Have(v) {
			t.Fatalf("%s not staged", v)
		}
		if note := staged(t, &log).Launcher; !strings.Contains(note, "older than launcher versions") {
			t.Fatalf("launcher note %q", note)
		}
	}
	if ents := h.launcherEntries(); len(ents) != 0 || d.LauncherStagings() != 0 {
		t.Fatalf("launchers/ holds %v after %d stagings, want nothing", ents, d.LauncherStagings())
	}
}

// A schema 1 release (built --no-launcher) is delivered as before, to records that keep
// launchers: no launcher, no note.
func TestDeliverOfASchema1ReleaseStagesNoLauncher(t *testing.T) {
	h := newHarness(t, nil)
	h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
	var log progressLog
	if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
		t.Fatal(err)
	}
	if note := staged(t, &log).Launcher; note != "" || len(h.launcherEntries()) != 0 {
		t.Fatalf("note %q, launchers/ %v", note, h.launcherEntries())
	}
	if _, err := os.Stat(filepath.Join(h.root, "launchers")); err == nil {
		t.Fatal("launchers/ was made for a release without a launcher")
	}
}

// floorIs makes a real floor launcher file of b, recorded as the unit's last start found it
// (version, path) and running as the floor (rollback.Records.UnitStarted, SetCurrentLauncher).
func floorIs(t *testing.T, h *harness, version string, b []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "usr-bin-mesh-launcher")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := h.records.UnitStarted(ctx, version, path); err != nil {
		t.Fatal(err)
	}
	if err := h.records.SetCurrentLauncher(ctx, version, true, false); err != nil {
		t.Fatal(err)
	}
	return path
}

// The floor launcher the package installed is what a release built from the same tree carries
// (issue 27 §1.1): staging it again put launchers/<v> beside the floor, on trial for ever,
// since no launcher takes one of its own version. Nothing is staged, and no note is given —
// the node has that launcher, as when the digest is recorded — while the host version is.
func TestDeliverStagesNoLauncherTheNodeRunsOrThatIsNotNewer(t *testing.T) {
	ok := fakehost(t, lv, "ok", runtime.GOARCH)
	cases := []struct {
		name    string
		floor   string // the floor's version
		running string // a delivered launcher running above the floor ("" the floor runs)
		carried string // the launcher version the release carries
		bytes   []byte // its bytes (nil: the floor's)
	}{
		{name: "the floor is that build", floor: lv, carried: lv},
		{name: "the floor's version with other bytes", floor: lv, carried: lv, bytes: fakehost(t, lv, "fail", runtime.GOARCH)},
		{name: "older than the floor", floor: "v0.4.0", carried: lv, bytes: ok},
		{name: "older than the delivered launcher running", floor: "v0.1.0", running: "v0.5.0", carried: lv, bytes: ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			floorIs(t, h, c.floor, ok)
			if c.running != "" {
				if err := h.records.SetCurrentLauncher(context.Background(), c.running, false, false); err != nil {
					t.Fatal(err)
				}
			}
			launcher := c.bytes
			if launcher == nil {
				launcher = ok
			}
			h.releaseWithLauncher(v1, fakehost(t, v1, "ok", runtime.GOARCH), launcher, launcherOf(c.carried, launcher), nil)
			var log progressLog
			if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
				t.Fatal(err)
			}
			if !h.d.Have(v1) {
				t.Fatal("the host version is not staged")
			}
			if ents := h.launcherEntries(); len(ents) != 0 || h.d.LauncherStagings() != 0 {
				t.Fatalf("launchers/ holds %v after %d stagings, want nothing: the node runs %s", ents, h.d.LauncherStagings(), c.floor)
			}
			if note := staged(t, &log).Launcher; note != "" {
				t.Fatalf("launcher note %q, want none", note)
			}
			if all, err := h.records.Launchers(context.Background(), h.root); err != nil || len(all) != 0 {
				t.Fatalf("launcher records %+v, %v: want none", all, err)
			}
		})
	}
}

// A launcher newer than the floor is staged as before, the floor's record notwithstanding.
func TestDeliverStagesALauncherNewerThanTheFloor(t *testing.T) {
	h := newHarness(t, nil)
	floorIs(t, h, "v0.2.0", fakehost(t, "v0.2.0", "ok", runtime.GOARCH))
	launcher := fakehost(t, lv, "ok", runtime.GOARCH)
	h.releaseWithLauncher(v1, fakehost(t, v1, "ok", runtime.GOARCH), launcher, launcherOf(lv, launcher), nil)
	var log progressLog
	if err := h.d.Deliver(context.Background(), v1, log.report); err != nil {
		t.Fatal(err)
	}
	if p := staged(t, &log); p.Launcher != "launcher "+lv+" staged" {
		t.Fatalf("launcher note %q", p.Launcher)
	}
}
