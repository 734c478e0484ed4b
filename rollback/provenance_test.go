package rollback

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// schema2Records makes ROOT/records.db as a launcher of schema 2 left it, with v1.0.0 recorded.
func schema2Records(t *testing.T, root string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+RecordsPath(root))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		migrations[0], migrations[1], `PRAGMA user_version = 2`,
		`INSERT INTO versions (version, digest, first_seen, confirmed_at) VALUES ('v1.0.0', '` + sha256Of("binary v1.0.0") + `', 100, 200)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func TestEachWayInRecordsItsProvenanceAndTheFirstRecordWins(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	for _, tc := range []struct {
		version string
		p       Provenance
		says    string
	}{
		{"v1.0.0", Provenance{Source: SourceInstalled, From: "/usr/share/mesh-host/mesh-host"}, "installed by hand"},
		{"v1.1.0", Provenance{Source: SourceDelivered, SignedBy: "3f2a9c0d1e2b4a5c"}, "delivered, signed by key 3f2a9c0d1e2b4a5c"},
	} {
		d := digestOf(tc.version)
		if err := r.RecordVersion(ctx, tc.version, d, tc.p); err != nil {
			t.Fatal(err)
		}
		// Recorded again with the same bytes by another way in: no error, the first record kept.
		if err := r.RecordVersion(ctx, tc.version, d, Provenance{Source: SourceFound}); err != nil {
			t.Errorf("recording the same digest again = %v", err)
		}
		rec, ok, err := r.Lookup(ctx, tc.version)
		if err != nil || !ok || rec.Digest != d || rec.Provenance != tc.p || rec.Provenance.String() != tc.says {
			t.Errorf("Lookup(%s) = %+v, %v, %v; want %+v (%q)", tc.version, rec, ok, err, tc.p, tc.says)
		}
	}
	// A directory nothing recorded on its way in is found by Choose, and says so.
	stage(t, root, "v1.2.0", "")
	see(t, r, root)
	if rec, _, _ := r.Lookup(ctx, "v1.2.0"); rec.Provenance.Source != SourceFound {
		t.Errorf("a version copied in by hand has provenance %+v, want found", rec.Provenance)
	}
	if _, ok, err := r.Lookup(ctx, "v9.9.9"); ok || err != nil {
		t.Errorf("Lookup of a version never seen = %v, %v", ok, err)
	}
}

func TestStatusShowsEachVersionsProvenance(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	stage(t, root, "v1.0.0", "")
	if err := r.RecordVersion(ctx, "v1.0.0", digestOf("binary v1.0.0"), Provenance{Source: SourceInstalled, From: "/x"}); err != nil {
		t.Fatal(err)
	}
	stage(t, root, "v1.1.0", "")
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range st.Versions {
		got[v.Version] = v.Provenance.Source
	}
	if got["v1.0.0"] != SourceInstalled || got["v1.1.0"] != SourceFound {
		t.Errorf("status provenance = %v; want v1.0.0 installed, v1.1.0 found", got)
	}
}

// Schema 2 → 3: versions recorded before keep everything and read "not recorded".
func TestSchema2RecordsAreMigratedAndTheirVersionsReadNotRecorded(t *testing.T) {
	root := newRoot(t)
	schema2Records(t, root)
	stage(t, root, "v1.0.0", "")
	r, _ := openRecords(t, root)
	if got := userVersion(t, r); got != SchemaVersion {
		t.Fatalf("user_version = %d, want %d", got, SchemaVersion)
	}
	ctx := context.Background()
	rec, ok, err := r.Lookup(ctx, "v1.0.0")
	if err != nil || !ok || rec.Digest != digestOf("binary v1.0.0") || rec.Provenance != (Provenance{}) || rec.Provenance.String() != "not recorded" {
		t.Errorf("v1.0.0 after migration = %+v, %v, %v", rec, ok, err)
	}
	if kg, err := r.KnownGood(ctx, root); err != nil || kg != "v1.0.0" {
		t.Errorf("known-good after migration = %q, %v", kg, err)
	}
}

// A newer host on records an older launcher made (schema 2) never migrates them: it records a
// delivered version without its provenance, and status still reads.
func TestAHostOnSchema2RecordsRecordsVersionsWithoutProvenance(t *testing.T) {
	root := newRoot(t)
	schema2Records(t, root)
	ctx := context.Background()
	h, err := OpenForHost(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.RecordVersion(ctx, "v1.1.0", digestOf("binary v1.1.0"), Provenance{Source: SourceDelivered, SignedBy: "k"}); err != nil {
		t.Fatalf("RecordVersion on schema 2 = %v", err)
	}
	stage(t, root, "v1.1.0", "")
	st, err := h.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Versions) != 2 || st.Versions[0].Version != "v1.1.0" || st.Versions[0].Digest != sha256Of("binary v1.1.0") {
		t.Errorf("status on schema 2 = %+v; want v1.1.0 as recorded, then v1.0.0", st.Versions)
	}
	for _, v := range st.Versions {
		if v.Provenance != (Provenance{}) {
			t.Errorf("%s has provenance %+v on schema 2", v.Version, v.Provenance)
		}
	}
	if v, _ := h.schemaVersion(ctx); v != 2 {
		t.Errorf("the host migrated the records to %d", v)
	}
}

func TestStagingCommitRecordsFirstThenRenamesAndRefusesWhatIsThere(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	commit := func(version, content string) error {
		st, err := NewStaging(root)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Discard()
		if err := os.WriteFile(st.BinaryPath(), []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return st.Commit(ctx, r, version, digestOf(content), Provenance{Source: SourceInstalled})
	}
	if err := commit("v1.0.0", "one"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(BinaryPath(root, "v1.0.0")); err != nil || string(b) != "one" {
		t.Fatalf("versions/v1.0.0 = %q, %v", b, err)
	}
	if err := commit("v1.0.0", "one"); !errors.Is(err, ErrVersionExists) {
		t.Errorf("committing over a version in place = %v, want ErrVersionExists", err)
	}
	var dc *DigestConflict
	if err := commit("v1.0.0", "two"); !errors.As(err, &dc) || dc.Recorded != digestOf("one") || dc.Got != digestOf("two") {
		t.Errorf("committing other bytes = %v, want a DigestConflict", err)
	}
	// An empty directory in the way is not replaced either (rename(2) would).
	if err := os.Mkdir(VersionDir(root, "v2.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := commit("v2.0.0", "x"); !errors.Is(err, ErrVersionExists) {
		t.Errorf("committing over an empty directory = %v, want ErrVersionExists", err)
	}
	dirs, _ := ScanVersions(root)
	for _, d := range dirs {
		if d.Staging {
			t.Errorf("staging %s left behind", d.Name)
		}
	}
}

func TestCleanStagingLeavesAStagingUnderWayAlone(t *testing.T) {
	root := newRoot(t)
	busy, err := NewStaging(root)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Discard()
	crashed := filepath.Join(VersionsDir(root), StagingPrefix+"crashed")
	if err := os.Mkdir(crashed, 0o700); err != nil {
		t.Fatal(err)
	}
	removed, err := CleanStaging(root)
	if err != nil || len(removed) != 1 || removed[0] != filepath.Base(crashed) {
		t.Errorf("CleanStaging = %v, %v; want only the crashed one", removed, err)
	}
	dir := busy.Dir()
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the staging under way was removed: %v", err)
	}
	busy.Discard()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Error("Discard left the staging directory")
	}
}

var _ VersionRecorder = (*Records)(nil)
