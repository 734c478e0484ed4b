package rollback

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// placeLauncher writes launchers/<v>/mesh-launcher ("launcher <v>" when content is empty) and
// returns its digest.
func placeLauncher(t *testing.T, root, v, content string) digest.Digest {
	t.Helper()
	if content == "" {
		content = "launcher " + v
	}
	if err := os.MkdirAll(LauncherDir(root, v), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(LauncherPath(root, v), []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return digest.Digest(sha256Of(content))
}

// recordLauncher places launcher v on disk and records it as delivered.
func recordLauncher(t *testing.T, r *Records, root, v string) digest.Digest {
	t.Helper()
	d := placeLauncher(t, root, v, "")
	if err := r.RecordLauncher(context.Background(), LauncherVersion{Version: v, Digest: d, Size: int64(len("launcher " + v)),
		Provenance: Provenance{Source: SourceDelivered, SignedBy: "3f2a9c0d1e2b4a5c"}, CarriedBy: "v2.0.0"}); err != nil {
		t.Fatalf("RecordLauncher %s: %v", v, err)
	}
	return d
}

func current(t *testing.T, r *Records) CurrentLauncher {
	t.Helper()
	c, err := r.CurrentLauncher(context.Background())
	if err != nil {
		t.Fatalf("CurrentLauncher: %v", err)
	}
	return c
}

func TestRecordLauncherKeepsTheFirstRecordAndRefusesOtherBytesUnderTheSameVersion(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, c := openRecords(t, root)
	first := LauncherVersion{Version: "v1.2.0", Digest: digest.Digest(sha256Of("launcher v1.2.0")), Size: 15,
		Provenance: Provenance{Source: SourceDelivered, SignedBy: "3f2a9c0d1e2b4a5c"}, CarriedBy: "v2.0.0"}
	if err := r.RecordLauncher(ctx, first); err != nil {
		t.Fatalf("first sight: %v", err)
	}
	rec, ok, err := r.LookupLauncher(ctx, "v1.2.0")
	if err != nil || !ok {
		t.Fatalf("LookupLauncher = %+v, %v, %v", rec, ok, err)
	}
	if rec.LauncherVersion != first || !rec.FirstSeen.Equal(c.now()) || !rec.Confirmed.IsZero() || !rec.Bad.IsZero() {
		t.Errorf("recorded %+v; want %+v first seen at %v, neither confirmed nor bad", rec, first, c.now())
	}

	// The same bytes again, by another way in: no error, the first record kept.
	again := first
	again.Provenance, again.CarriedBy = Provenance{Source: SourceInstalled}, "v2.1.0"
	if err := r.RecordLauncher(ctx, again); err != nil {
		t.Errorf("the same digest again = %v, want no error", err)
	}
	if rec, _, _ := r.LookupLauncher(ctx, "v1.2.0"); rec.LauncherVersion != first {
		t.Errorf("after recording it again: %+v, want the first record %+v", rec.LauncherVersion, first)
	}
	if has, err := r.HasLauncherDigest(ctx, first.Digest); err != nil || !has {
		t.Errorf("HasLauncherDigest(recorded) = %v, %v", has, err)
	}
	if has, err := r.HasLauncherDigest(ctx, digest.Digest(sha256Of("other"))); err != nil || has {
		t.Errorf("HasLauncherDigest(never seen) = %v, %v", has, err)
	}

	// Other bytes under the same version: refused, naming both digests; the record unchanged.
	other := first
	other.Digest = digest.Digest(sha256Of("rebuilt launcher v1.2.0"))
	err = r.RecordLauncher(ctx, other)
	var conflict *DigestConflict
	if !errors.As(err, &conflict) || conflict.Recorded != first.Digest || conflict.Got != other.Digest || !strings.Contains(err.Error(), "launcher v1.2.0") {
		t.Errorf("another digest = %v, want a *DigestConflict naming launcher v1.2.0, %s and %s", err, first.Digest, other.Digest)
	}
	if rec, _, _ := r.LookupLauncher(ctx, "v1.2.0"); rec.Digest != first.Digest {
		t.Errorf("after the conflict the record says %s, want %s", rec.Digest, first.Digest)
	}
}

func TestRecordLauncherRefusesWhatCannotBeALauncherVersion(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	good := digest.Digest(sha256Of("launcher"))
	for _, tc := range []struct {
		name, version string
		digest        digest.Digest
		says          []string
	}{
		{"an empty version", "", good, []string{`record launcher ""`, "not"}},
		{"a version without its v", "1.2.0", good, []string{`"1.2.0"`}},
		{"a version that is not canonical", "v1.2", good, []string{`"v1.2"`}},
		{"a version that is a path", "v1.2.0/../../etc", good, []string{`"v1.2.0/../../etc"`}},
		{"an overlong version is named cut", "v1.0.0-" + strings.Repeat("a", 5000), good, []string{"record launcher"}},
		{"an empty digest", "v1.2.0", "", []string{"record digest of launcher v1.2.0"}},
		{"a digest of the wrong length", "v1.2.0", "sha256:abcd", []string{"record digest of launcher v1.2.0"}},
		{"a digest of an unknown algorithm", "v1.2.0", "md5:d41d8cd98f00b204e9800998ecf8427e", []string{"record digest of launcher v1.2.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.RecordLauncher(ctx, LauncherVersion{Version: tc.version, Digest: tc.digest})
			if err == nil {
				t.Fatal("recorded")
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if len(err.Error()) > 1024 {
				t.Errorf("error is %d bytes: unbounded", len(err.Error()))
			}
		})
	}
	if all, err := r.Launchers(ctx, root); err != nil || len(all) != 0 {
		t.Errorf("after the refusals: %+v, %v; want nothing recorded", all, err)
	}
}

// schema5Records makes ROOT/records.db as a launcher of schema 5 (before launcher versions) left
// it, and opens it as a host does: without migrating.
func schema5Records(t *testing.T, root string) *Records {
	t.Helper()
	ctx := context.Background()
	db, _, err := sqlitefile.Create(ctx, RecordsPath(root), migrations[:launchersSchema-1])
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	r, err := OpenForHost(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// A host may open records an older launcher made (schema 5): every launcher method says there
// are none, reads return nothing, writes are refused with errNoLauncherSchema, and the file is
// never migrated by them.
func TestLauncherMethodsOnSchema5RecordsDegradeWithoutMigrating(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r := schema5Records(t, root)
	placeLauncher(t, root, "v1.2.0", "")
	if r.HasLaunchers() {
		t.Fatal("HasLaunchers on schema 5 = true")
	}
	d := digest.Digest(sha256Of("launcher v1.2.0"))

	for _, tc := range []struct {
		name  string
		write func() error
		want  error // nil: no error, nothing done
	}{
		{"RecordLauncher", func() error { return r.RecordLauncher(ctx, LauncherVersion{Version: "v1.2.0", Digest: d}) }, errNoLauncherSchema},
		{"SetCurrentLauncher", func() error { return r.SetCurrentLauncher(ctx, "v1.2.0", false, true) }, errNoLauncherSchema},
		{"UnitStarted", func() error { return r.UnitStarted(ctx, "v1.1.0", DefaultFloor) }, errNoLauncherSchema},
		{"CountLauncherFailure", func() error { _, err := r.CountLauncherFailure(ctx); return err }, errNoLauncherSchema},
		{"PinFloor", func() error { return r.PinFloor(ctx, "why") }, errNoLauncherSchema},
		{"ConfirmLauncher", func() error { return r.ConfirmLauncher(ctx, "v1.2.0") }, errNoLauncherSchema},
		{"MarkLauncherBad", func() error { return r.MarkLauncherBad(ctx, "v1.2.0", "why", "out") }, errNoLauncherSchema},
		{"RecordLauncherRollback", func() error {
			return r.RecordLauncherRollback(ctx, LauncherRollback{From: "v1.2.0", To: "v1.1.0", Reason: "why"})
		}, errNoLauncherSchema},
		// An end or the floor's path is no reason to fail a launcher's stop: nothing to record.
		{"EndCurrentLauncher", func() error { return r.EndCurrentLauncher(ctx) }, nil},
		{"SetFloor", func() error { return r.SetFloor(ctx, "v1.1.0", DefaultFloor) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write()
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Errorf("= %v, want %v", err, tc.want)
			}
			if tc.want != nil && !strings.Contains(err.Error(), "schema 6") {
				t.Errorf("error %q does not say which schema is needed", err)
			}
		})
	}

	if rec, ok, err := r.LookupLauncher(ctx, "v1.2.0"); ok || err != nil || rec.Version != "" {
		t.Errorf("LookupLauncher = %+v, %v, %v; want nothing", rec, ok, err)
	}
	if has, err := r.HasLauncherDigest(ctx, d); has || err != nil {
		t.Errorf("HasLauncherDigest = %v, %v", has, err)
	}
	if bad, why, err := r.IsLauncherBad(ctx, "v1.2.0", d); bad || why != "" || err != nil {
		t.Errorf("IsLauncherBad = %v, %q, %v", bad, why, err)
	}
	if c, err := r.ChooseLauncher(ctx, root, "v1.0.0"); err != nil || c.Version != "" || len(c.Skipped) != 0 {
		t.Errorf("ChooseLauncher = %+v, %v; want nothing chosen", c, err)
	}
	if c, err := r.CurrentLauncher(ctx); err != nil || c != (CurrentLauncher{}) {
		t.Errorf("CurrentLauncher = %+v, %v; want the zero value", c, err)
	}
	if rbs, err := r.LauncherRollbacks(ctx, 10); err != nil || len(rbs) != 0 {
		t.Errorf("LauncherRollbacks = %+v, %v", rbs, err)
	}
	// What is on disk is still listed, as found: status shows it.
	all, err := r.Launchers(ctx, root)
	if err != nil || len(all) != 1 || all[0].Version != "v1.2.0" || all[0].Provenance.Source != SourceFound || !all[0].OnDisk {
		t.Errorf("Launchers = %+v, %v; want v1.2.0 found on disk", all, err)
	}
	rep, err := r.LauncherStatus(ctx, root)
	if err != nil || rep.Version != "" || rep.State != "" || len(rep.Rollbacks) != 0 || len(rep.Versions) != 1 {
		t.Errorf("LauncherStatus = %+v, %v", rep, err)
	}
	if v, err := r.schemaVersion(ctx); err != nil || v != 5 {
		t.Errorf("schema after all of it = %d, %v; want 5, never migrated by a host", v, err)
	}
}

// launcherOnDisk is one launcher version a ChooseLauncher case sets up.
type launcherOnDisk struct {
	version   string
	recorded  bool
	confirmed bool
	bad       string // its bad reason, "" when not bad
	rewritten bool   // its bytes changed after they were recorded
	missing   bool   // recorded, its directory there, its binary gone
}

func TestChooseLauncher(t *testing.T) {
	for _, tc := range []struct {
		name      string
		self      string
		on        []launcherOnDisk
		other     []string // other entries under ROOT/launchers: directories, or files when suffixed "!"
		want      string
		confirmed bool
		skipped   map[string]string // version → what its reason says
	}{
		{
			name: "the newest newer than self is chosen, on trial",
			self: "v1.1.0",
			on:   []launcherOnDisk{{version: "v1.2.0", recorded: true, confirmed: true}, {version: "v1.3.0", recorded: true}},
			want: "v1.3.0",
		},
		{
			name: "a confirmed one is chosen as confirmed",
			self: "v1.1.0",
			on:   []launcherOnDisk{{version: "v1.2.0", recorded: true, confirmed: true}},
			want: "v1.2.0", confirmed: true,
		},
		{
			name: "a bad one is passed over with its reason",
			self: "v1.1.0",
			on:   []launcherOnDisk{{version: "v1.2.0", recorded: true, confirmed: true}, {version: "v1.3.0", recorded: true, bad: "it crashed: panic: boom"}},
			want: "v1.2.0", confirmed: true,
			skipped: map[string]string{"v1.3.0": "bad: it crashed: panic: boom"},
		},
		{
			name:    "a directory nothing recorded is passed over as not recorded",
			self:    "v1.1.0",
			on:      []launcherOnDisk{{version: "v1.2.0", recorded: true}, {version: "v1.3.0"}},
			want:    "v1.2.0",
			skipped: map[string]string{"v1.3.0": "not recorded"},
		},
		{
			name:    "a binary whose bytes no longer match the recorded digest is passed over",
			self:    "v1.1.0",
			on:      []launcherOnDisk{{version: "v1.2.0", recorded: true}, {version: "v1.3.0", recorded: true, confirmed: true, rewritten: true}},
			want:    "v1.2.0",
			skipped: map[string]string{"v1.3.0": "recorded when it was staged"},
		},
		{
			name:    "a recorded version whose binary is gone is passed over",
			self:    "v1.1.0",
			on:      []launcherOnDisk{{version: "v1.3.0", recorded: true, missing: true}},
			skipped: map[string]string{"v1.3.0": LauncherBinaryName},
		},
		{
			name: "versions not newer than self are never chosen nor listed as passed over",
			self: "v1.2.0",
			on:   []launcherOnDisk{{version: "v1.1.0", recorded: true, confirmed: true}, {version: "v1.2.0", recorded: true, confirmed: true}, {version: "v1.0.0", bad: "x"}},
		},
		{
			name: "a prerelease of self's version is older than self",
			self: "v1.2.0",
			on:   []launcherOnDisk{{version: "v1.2.0-rc.1", recorded: true, confirmed: true}},
		},
		{
			name:  "staging directories and names that are not versions are ignored",
			self:  "v1.1.0",
			on:    []launcherOnDisk{{version: "v1.2.0", recorded: true}},
			other: []string{".staging-123", "latest", "v9", "v9.0", "9.0.0", "v9.0.0!"},
			want:  "v1.2.0",
		},
		{
			name: "nothing under ROOT/launchers chooses nothing",
			self: "v1.1.0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			root := newRoot(t)
			r, _ := openRecords(t, root)
			for _, l := range tc.on {
				if !l.recorded {
					placeLauncher(t, root, l.version, "")
					continue
				}
				recordLauncher(t, r, root, l.version)
				if l.confirmed {
					if err := r.ConfirmLauncher(ctx, l.version); err != nil {
						t.Fatal(err)
					}
				}
				if l.bad != "" {
					if err := r.MarkLauncherBad(ctx, l.version, l.bad, ""); err != nil {
						t.Fatal(err)
					}
				}
				if l.rewritten {
					placeLauncher(t, root, l.version, "launcher "+l.version+" with other bytes")
				}
				if l.missing {
					if err := os.Remove(LauncherPath(root, l.version)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, name := range tc.other {
				path := filepath.Join(LaunchersDir(root), strings.TrimSuffix(name, "!"))
				if strings.HasSuffix(name, "!") {
					if err := os.WriteFile(path, []byte("launcher"), 0o755); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(path, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(path, LauncherBinaryName), []byte("launcher "+name), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			c, err := r.ChooseLauncher(ctx, root, tc.self)
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != tc.want || c.Confirmed != tc.confirmed {
				t.Errorf("chose %q (confirmed %v), want %q (confirmed %v); skipped %+v", c.Version, c.Confirmed, tc.want, tc.confirmed, c.Skipped)
			}
			if len(c.Skipped) != len(tc.skipped) {
				t.Errorf("skipped %+v, want %v", c.Skipped, tc.skipped)
			}
			for _, s := range c.Skipped {
				if want, ok := tc.skipped[s.Version]; !ok || !strings.Contains(s.Why, want) {
					t.Errorf("skipped %s because %q, want a reason saying %q", s.Version, s.Why, want)
				}
			}
		})
	}
}

// The floor pinned passes over every launcher recorded when it was pinned, and only those; a
// newer one that arrives runs on trial, and its confirmation lifts the pin.
func TestPinnedFloorPassesOverWhatWasRecordedUntilANewerLauncherConfirms(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	recordLauncher(t, r, root, "v1.2.0")
	recordLauncher(t, r, root, "v1.3.0")
	for _, v := range []string{"v1.2.0", "v1.3.0"} {
		if err := r.ConfirmLauncher(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	const why = "launcher v1.3.0, the launcher rolled back to, ended without stopping too"
	if err := r.PinFloor(ctx, why); err != nil {
		t.Fatal(err)
	}
	if cur := current(t, r); cur.FloorPinned != why || cur.FloorPinnedUpTo != "v1.3.0" {
		t.Fatalf("pinned: %q up to %q; want %q up to v1.3.0", cur.FloorPinned, cur.FloorPinnedUpTo, why)
	}
	choose := func() LauncherChoice {
		t.Helper()
		c, err := r.ChooseLauncher(ctx, root, "v1.1.0")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := choose()
	if c.Version != "" || len(c.Skipped) != 2 {
		t.Fatalf("while pinned: chose %q, skipped %+v; want nothing, both passed over", c.Version, c.Skipped)
	}
	for _, s := range c.Skipped {
		if !strings.Contains(s.Why, "the floor runs: "+why) {
			t.Errorf("%s passed over because %q, want the pin's reason", s.Version, s.Why)
		}
	}

	// Neither a launcher at the pin nor one below it lifts the pin by confirming.
	for _, v := range []string{"v1.3.0", "v1.2.0"} {
		if err := r.SetCurrentLauncher(ctx, v, false, false); err != nil {
			t.Fatal(err)
		}
		if err := r.ConfirmLauncher(ctx, v); err != nil {
			t.Fatal(err)
		}
		if cur := current(t, r); cur.FloorPinned != why {
			t.Errorf("after %s (not newer than the pin) confirmed: pinned %q, want still %q", v, cur.FloorPinned, why)
		}
	}

	recordLauncher(t, r, root, "v1.4.0")
	if c := choose(); c.Version != "v1.4.0" || c.Confirmed {
		t.Errorf("a newer launcher while pinned: chose %q (confirmed %v), want v1.4.0 on trial", c.Version, c.Confirmed)
	}
	// Recording it did not move the pin: it still runs only while nothing at or below v1.3.0 does.
	if cur := current(t, r); cur.FloorPinnedUpTo != "v1.3.0" {
		t.Errorf("pin moved to %q", cur.FloorPinnedUpTo)
	}
	if err := r.SetCurrentLauncher(ctx, "v1.4.0", false, true); err != nil {
		t.Fatal(err)
	}
	if err := r.ConfirmLauncher(ctx, "v1.4.0"); err != nil {
		t.Fatal(err)
	}
	if cur := current(t, r); cur.FloorPinned != "" || cur.Trial {
		t.Errorf("after v1.4.0 confirmed: pinned %q, trial %v; want the pin lifted and no trial", cur.FloorPinned, cur.Trial)
	}
	// With the pin lifted, what it passed over may run again.
	if err := os.RemoveAll(LauncherDir(root, "v1.4.0")); err != nil {
		t.Fatal(err)
	}
	if c := choose(); c.Version != "v1.3.0" || !c.Confirmed || len(c.Skipped) != 0 {
		t.Errorf("after the pin was lifted: chose %q (confirmed %v), skipped %+v; want v1.3.0 confirmed", c.Version, c.Confirmed, c.Skipped)
	}

	// Pinned again, then lifted by hand ("").
	if err := r.PinFloor(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if err := r.PinFloor(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if cur := current(t, r); cur.FloorPinned != "" || cur.FloorPinnedUpTo != "" {
		t.Errorf("after PinFloor(\"\"): %q up to %q", cur.FloorPinned, cur.FloorPinnedUpTo)
	}
}

func TestCurrentLauncherFailuresCarryOverForTheSameVersionAndAcrossTheFloorOnly(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, c := openRecords(t, root)
	recordLauncher(t, r, root, "v1.2.0")
	recordLauncher(t, r, root, "v1.3.0")
	if cur := current(t, r); cur != (CurrentLauncher{}) {
		t.Errorf("fresh records: %+v, want the zero value", cur)
	}
	type want struct {
		version         string
		floor, trial    bool
		ended           bool
		failures        int
		floorPinned     bool
		unitStartedSeen bool
	}
	var tookOver time.Time
	for _, step := range []struct {
		name string
		do   func() error
		want want
	}{
		{"the floor records itself at the unit's start", func() error {
			if err := r.UnitStarted(ctx, "v1.1.0", DefaultFloor); err != nil {
				return err
			}
			return r.SetCurrentLauncher(ctx, "v1.1.0", true, false)
		}, want{version: "v1.1.0", floor: true, unitStartedSeen: true}},
		{"a launcher on trial taking over", func() error { return r.SetCurrentLauncher(ctx, "v1.2.0", false, true) },
			want{version: "v1.2.0", trial: true, unitStartedSeen: true}},
		{"its end judged is counted and ends it", func() error { _, err := r.CountLauncherFailure(ctx); return err },
			want{version: "v1.2.0", trial: true, ended: true, failures: 1, unitStartedSeen: true}},
		{"the same version again keeps its count", func() error { return r.SetCurrentLauncher(ctx, "v1.2.0", false, true) },
			want{version: "v1.2.0", trial: true, failures: 1, unitStartedSeen: true}},
		{"counted again", func() error { _, err := r.CountLauncherFailure(ctx); return err },
			want{version: "v1.2.0", trial: true, ended: true, failures: 2, unitStartedSeen: true}},
		{"confirming clears the trial and the count", func() error {
			if err := r.SetCurrentLauncher(ctx, "v1.2.0", false, true); err != nil {
				return err
			}
			return r.ConfirmLauncher(ctx, "v1.2.0")
		}, want{version: "v1.2.0", unitStartedSeen: true}},
		{"counted after confirming", func() error { _, err := r.CountLauncherFailure(ctx); return err },
			want{version: "v1.2.0", ended: true, failures: 1, unitStartedSeen: true}},
		{"the floor judging it keeps the count", func() error { return r.SetCurrentLauncher(ctx, "v1.1.0", true, false) },
			want{version: "v1.1.0", floor: true, failures: 1, unitStartedSeen: true}},
		{"and the launcher it runs again keeps it", func() error { return r.SetCurrentLauncher(ctx, "v1.2.0", false, false) },
			want{version: "v1.2.0", failures: 1, unitStartedSeen: true}},
		{"an end as a launcher should starts the count again", func() error { return r.EndCurrentLauncher(ctx) },
			want{version: "v1.2.0", ended: true, unitStartedSeen: true}},
		{"counted once more", func() error { _, err := r.CountLauncherFailure(ctx); return err },
			want{version: "v1.2.0", ended: true, failures: 1, unitStartedSeen: true}},
		{"another version taking over from it starts at 0", func() error {
			tookOver = c.now()
			return r.SetCurrentLauncher(ctx, "v1.3.0", false, true)
		}, want{version: "v1.3.0", trial: true, unitStartedSeen: true}},
		{"confirming another version leaves the one running on trial", func() error { return r.ConfirmLauncher(ctx, "v1.2.0") },
			want{version: "v1.3.0", trial: true, unitStartedSeen: true}},
		{"an end as a launcher should is not a failure", func() error { return r.EndCurrentLauncher(ctx) },
			want{version: "v1.3.0", trial: true, ended: true, unitStartedSeen: true}},
	} {
		c.advance(1e9)
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		cur := current(t, r)
		got := want{cur.Version, cur.Floor, cur.Trial, cur.Ended, cur.Failures, cur.FloorPinned != "", !cur.UnitStarted.IsZero()}
		if got != step.want {
			t.Errorf("%s: %+v, want %+v", step.name, got, step.want)
		}
		if cur.Boot != r.BootID() || cur.FloorVersion != "v1.1.0" || cur.FloorPath != DefaultFloor {
			t.Errorf("%s: boot %q (want %q), floor %q at %q", step.name, cur.Boot, r.BootID(), cur.FloorVersion, cur.FloorPath)
		}
	}
	// Since is when the image took over, not when it was counted or ended.
	if cur := current(t, r); !cur.Since.Equal(tookOver) {
		t.Errorf("since %v, want %v (when v1.3.0 took over)", cur.Since, tookOver)
	}
	if rec, _, _ := r.LookupLauncher(ctx, "v1.3.0"); !rec.Confirmed.IsZero() {
		t.Errorf("v1.3.0 confirmed at %v by another version's confirmation", rec.Confirmed)
	}
}

func TestMarkLauncherBadKeepsTheFirstReasonBoundedAndRedacted(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	d := recordLauncher(t, r, root, "v1.2.0")
	out := "level=ERROR msg=\"cannot reach nats://mesh:hunter2@bus:4222\"\n" + strings.Repeat("x", 100<<10)
	if err := r.MarkLauncherBad(ctx, "v1.2.0", "it failed: nats://mesh:hunter2@bus:4222 "+strings.Repeat("y", 10<<10), out); err != nil {
		t.Fatal(err)
	}
	if err := r.MarkLauncherBad(ctx, "v1.2.0", "a second reason", "second output"); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := r.LookupLauncher(ctx, "v1.2.0")
	if rec.Bad.IsZero() || !strings.HasPrefix(rec.BadReason, "it failed: ") || !strings.HasPrefix(rec.BadOutput, "level=ERROR") {
		t.Errorf("bad %v, reason %.40q, output %.40q; want the first mark kept", rec.Bad, rec.BadReason, rec.BadOutput)
	}
	if strings.Contains(rec.BadReason+rec.BadOutput, "hunter2") {
		t.Error("the password in a URL is kept in the bad mark as read")
	}
	if len(rec.BadReason) > maxReason+16 || len(rec.BadOutput) > maxLauncherOutput+16 {
		t.Errorf("reason %d bytes, output %d bytes: not bounded", len(rec.BadReason), len(rec.BadOutput))
	}
	for _, q := range []struct {
		version string
		d       digest.Digest
	}{{"v1.2.0", "sha256:none"}, {"v9.9.9", d}} {
		if bad, why, err := r.IsLauncherBad(ctx, q.version, q.d); !bad || err != nil || strings.Contains(why, "hunter2") {
			t.Errorf("IsLauncherBad(%s, %s) = %v, %q, %v; want bad by version or by digest, redacted", q.version, q.d, bad, why, err)
		}
	}
	if bad, _, err := r.IsLauncherBad(ctx, "v1.3.0", "sha256:none"); bad || err != nil {
		t.Errorf("IsLauncherBad(another) = %v, %v", bad, err)
	}
}

func TestLauncherRollbacksKeepTheNewestTen(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	for i := range 12 {
		if err := r.RecordLauncherRollback(ctx, LauncherRollback{From: "v1.2.0", To: "v1.1.0", Reason: strings.Repeat("r", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	rbs, err := r.LauncherRollbacks(ctx, 100)
	if err != nil || len(rbs) != maxLauncherRollbacks || len(rbs[0].Reason) != 12 || len(rbs[9].Reason) != 3 {
		t.Errorf("rollbacks = %d (%v), newest %q; want the newest %d, newest first", len(rbs), err, rbs[0].Reason, maxLauncherRollbacks)
	}
}

func TestCleanStagingRemovesLauncherLeftoversAndKeepsOneUnderWay(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	recordLauncher(t, r, root, "v1.2.0")
	crashed := filepath.Join(LaunchersDir(root), StagingPrefix+"crashed")
	if err := os.MkdirAll(crashed, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(crashed, LauncherBinaryName), []byte("half"), 0o755); err != nil {
		t.Fatal(err)
	}
	hostLeftover := filepath.Join(VersionsDir(root), StagingPrefix+"host")
	if err := os.MkdirAll(hostLeftover, 0o755); err != nil {
		t.Fatal(err)
	}
	live, err := NewLauncherStaging(root)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Discard()
	if filepath.Dir(live.Dir()) != LaunchersDir(root) || filepath.Base(live.BinaryPath()) != LauncherBinaryName {
		t.Errorf("launcher staging at %s, binary %s", live.Dir(), live.BinaryPath())
	}

	removed, err := CleanStaging(root)
	slices.Sort(removed)
	want := []string{StagingPrefix + "host", filepath.Join(launchersDir, StagingPrefix+"crashed")}
	slices.Sort(want)
	if err != nil || !slices.Equal(removed, want) {
		t.Errorf("CleanStaging = %q, %v; want %q", removed, err, want)
	}
	for path, kept := range map[string]bool{crashed: false, hostLeftover: false, live.Dir(): true, LauncherPath(root, "v1.2.0"): true} {
		if exists(t, path) != kept {
			t.Errorf("%s: exists %v, want %v", path, !kept, kept)
		}
	}

	// The one under way is put in place whole, its record first.
	if err := os.WriteFile(live.BinaryPath(), []byte("launcher v1.3.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	lv := LauncherVersion{Version: "v1.3.0", Digest: digest.Digest(sha256Of("launcher v1.3.0")), Provenance: Provenance{Source: SourceDelivered}}
	if err := live.CommitLauncher(ctx, r, lv); err != nil {
		t.Fatal(err)
	}
	if c, err := r.ChooseLauncher(ctx, root, "v1.1.0"); err != nil || c.Version != "v1.3.0" {
		t.Errorf("after CommitLauncher: chose %q, %v; want v1.3.0", c.Version, err)
	}
	if removed, err := CleanStaging(root); err != nil || len(removed) != 0 {
		t.Errorf("CleanStaging after the commit = %q, %v", removed, err)
	}
}

func TestLauncherStatusSaysTheStateAndWhatItRolledBackFrom(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	d2 := recordLauncher(t, r, root, "v1.2.0")
	recordLauncher(t, r, root, "v1.3.0")
	placeLauncher(t, root, "v1.4.0", "") // copied by hand
	for _, step := range []struct {
		name           string
		do             func() error
		state, digest  string
		rolledBackFrom string
	}{
		{"nothing has run", func() error { return nil }, "", "", ""},
		{"the floor", func() error {
			if err := r.UnitStarted(ctx, "v1.1.0", DefaultFloor); err != nil {
				return err
			}
			return r.SetCurrentLauncher(ctx, "v1.1.0", true, false)
		}, LauncherFloor, "", ""},
		{"a launcher on trial", func() error { return r.SetCurrentLauncher(ctx, "v1.2.0", false, true) }, LauncherTrial, d2.String(), ""},
		{"confirmed", func() error { return r.ConfirmLauncher(ctx, "v1.2.0") }, LauncherConfirmed, d2.String(), ""},
		{"rolled back to from v1.3.0", func() error {
			return r.RecordLauncherRollback(ctx, LauncherRollback{From: "v1.3.0", To: "v1.2.0", Reason: "it crashed"})
		}, LauncherConfirmed, d2.String(), "v1.3.0"},
		{"the floor, after a rollback to another", func() error { return r.SetCurrentLauncher(ctx, "v1.1.0", true, false) }, LauncherFloor, "", ""},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		rep, err := r.LauncherStatus(ctx, root)
		if err != nil {
			t.Fatal(err)
		}
		if rep.State != step.state || rep.Digest.String() != step.digest || rep.RolledBackFrom != step.rolledBackFrom {
			t.Errorf("%s: state %q, digest %q, rolled back from %q; want %q, %q, %q", step.name, rep.State, rep.Digest, rep.RolledBackFrom, step.state, step.digest, step.rolledBackFrom)
		}
		var versions []string
		for _, v := range rep.Versions {
			versions = append(versions, v.Version+":"+v.Provenance.Source)
		}
		if want := []string{"v1.4.0:found", "v1.3.0:delivered", "v1.2.0:delivered"}; !slices.Equal(versions, want) {
			t.Errorf("%s: versions %v, want %v", step.name, versions, want)
		}
		if rep.Rollbacks == nil || rep.Versions == nil {
			t.Errorf("%s: nil lists would be JSON null", step.name)
		}
	}
}

func TestRecordUnitExitKeepsSystemdsWordsAndRefusesOthers(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		result, code, status string
		ok                   bool
	}{
		{"a SIGKILL", "signal", "killed", "KILL", true},
		{"the watchdog", "watchdog", "dumped", "ABRT", true},
		{"an exit status", "exit-code", "exited", "1", true},
		{"an empty word", "signal", "", "KILL", false},
		{"a word with a space", "signal", "killed", "KILL 9", false},
		{"a word too long", strings.Repeat("x", 33), "killed", "KILL", false},
		{"a control character", "signal", "killed\n", "KILL", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := openRecords(t, newRoot(t))
			err := r.RecordUnitExit(context.Background(), tc.result, tc.code, tc.status)
			if (err == nil) != tc.ok {
				t.Fatalf("RecordUnitExit: %v, want ok %v", err, tc.ok)
			}
			cur, err := r.CurrentLauncher(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			want := UnitExit{}
			if tc.ok {
				want = UnitExit{Result: tc.result, Code: tc.code, Status: tc.status, At: cur.UnitExit.At}
				if cur.UnitExit.At.IsZero() {
					t.Error("no time recorded with systemd's word")
				}
			}
			if cur.UnitExit != want {
				t.Errorf("recorded %+v, want %+v", cur.UnitExit, want)
			}
		})
	}
}
