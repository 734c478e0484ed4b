package rollback

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

func TestChoosePicksFirstCandidateThatIsNeitherBadNorMismatched(t *testing.T) {
	tests := []struct {
		name       string
		candidates []Candidate
		want       string
	}{
		{"no candidates → none", nil, ""},
		{"newest wins", []Candidate{{Version: "v2.0.0"}, {Version: "v1.0.0"}}, "v2.0.0"},
		{"bad newest skipped", []Candidate{{Version: "v2.0.0", Bad: true}, {Version: "v1.0.0"}}, "v1.0.0"},
		{"mismatched newest skipped", []Candidate{{Version: "v2.0.0", Mismatch: "binary changed"}, {Version: "v1.0.0"}}, "v1.0.0"},
		{"bad and mismatched both skipped", []Candidate{{Version: "v3.0.0", Bad: true}, {Version: "v2.0.0", Mismatch: "no usable binary"}, {Version: "v1.0.0"}}, "v1.0.0"},
		{"all bad → none", []Candidate{{Version: "v2.0.0", Bad: true}, {Version: "v1.0.0", Bad: true}}, ""},
		{"all mismatched → none", []Candidate{{Version: "v1.0.0", Mismatch: "x"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Choose(tt.candidates); got != tt.want {
				t.Errorf("Choose = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRecordsChooseNewestSemverWins(t *testing.T) {
	tests := []struct {
		name     string
		versions []string
		want     string
	}{
		{"v1.10.0 is newer than v1.9.0", []string{"v1.9.0", "v1.10.0", "v1.2.0"}, "v1.10.0"},
		{"a prerelease is older than its release", []string{"v2.0.0-rc.1", "v2.0.0", "v1.9.9"}, "v2.0.0"},
		{"a prerelease is newer than the previous release", []string{"v2.0.0-rc.1", "v1.9.9"}, "v2.0.0-rc.1"},
		{"rc.10 is newer than rc.9", []string{"v2.0.0-rc.9", "v2.0.0-rc.10"}, "v2.0.0-rc.10"},
		{"major beats minor", []string{"v10.0.0", "v9.99.99"}, "v10.0.0"},
		{"single version", []string{"v0.0.1"}, "v0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRoot(t)
			for _, v := range tt.versions {
				stage(t, root, v, "")
			}
			r, _ := openRecords(t, root)
			ch := see(t, r, root)
			if ch.Version != tt.want {
				t.Errorf("Choose = %q, want %q", ch.Version, tt.want)
			}
			if len(ch.Skipped) != 0 {
				t.Errorf("Skipped = %+v, want none", ch.Skipped)
			}
		})
	}
}

func TestRecordsChooseWithNoVersionsChoosesNone(t *testing.T) {
	for _, name := range []string{"empty versions directory", "missing versions directory"} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if name == "empty versions directory" {
				root = newRoot(t)
			}
			r, _ := openRecords(t, root)
			ch := see(t, r, root)
			if ch.Version != "" || len(ch.Skipped) != 0 {
				t.Errorf("Choose = %+v, want none", ch)
			}
		})
	}
}

func TestRecordsChooseIgnoresNonCanonicalNames(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	for _, name := range []string{"1.2.0", "v1.2", "v2", "latest", ".staging-x", "v3.0.0+build.1", "V4.0.0"} {
		stage(t, root, name, "binary "+name)
	}
	// A file named like a version is not a version directory.
	if err := os.WriteFile(VersionDir(root, "v5.0.0"), []byte("a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ := openRecords(t, root)
	ch := see(t, r, root)
	if ch.Version != "v1.0.0" {
		t.Fatalf("Choose = %q, want v1.0.0 (every other entry is not a canonical version directory)", ch.Version)
	}
	recs, err := r.versionRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Errorf("records hold %d versions, want only v1.0.0: %v", len(recs), recs)
	}
}

func TestChooseSkipsBadVersion(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	stage(t, root, "v2.0.0", "")
	r, _ := openRecords(t, root)
	ctx := context.Background()
	see(t, r, root)
	if err := r.MarkBad(ctx, "v2.0.0", "crashed"); err != nil {
		t.Fatal(err)
	}
	ch := see(t, r, root)
	if ch.Version != "v1.0.0" {
		t.Fatalf("Choose = %q, want v1.0.0", ch.Version)
	}
	if len(ch.Skipped) != 1 || ch.Skipped[0].Version != "v2.0.0" || !ch.Skipped[0].Bad {
		t.Errorf("Skipped = %+v, want v2.0.0 bad", ch.Skipped)
	}
}

func TestChooseSkipsVersionWhoseBinaryChanged(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	before := stage(t, root, "v2.0.0", "the original binary")
	r, _ := openRecords(t, root)
	if ch := see(t, r, root); ch.Version != "v2.0.0" {
		t.Fatalf("Choose = %q before the change, want v2.0.0", ch.Version)
	}
	// Different length, so no file-identity cache can take it for the old one.
	after := stage(t, root, "v2.0.0", "a different, tampered binary")

	for _, fresh := range []bool{false, true} {
		r := r
		if fresh { // a new process, with no cache, sees the same
			r2, err := OpenForHost(context.Background(), root)
			if err != nil {
				t.Fatal(err)
			}
			defer r2.Close()
			r = r2
		}
		ch := see(t, r, root)
		if ch.Version != "v1.0.0" {
			t.Fatalf("fresh=%v: Choose = %q, want v1.0.0", fresh, ch.Version)
		}
		if len(ch.Skipped) != 1 || ch.Skipped[0].Version != "v2.0.0" {
			t.Fatalf("fresh=%v: Skipped = %+v, want v2.0.0", fresh, ch.Skipped)
		}
		why := ch.Skipped[0].Mismatch
		for _, want := range []string{"changed", before, after} {
			if !strings.Contains(why, want) {
				t.Errorf("fresh=%v: Mismatch %q does not name %q", fresh, why, want)
			}
		}
	}
}

func TestChooseSkipsVersionWithMissingBinary(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	if err := os.MkdirAll(VersionDir(root, "v2.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A directory where the binary should be is not a usable binary either.
	if err := os.MkdirAll(BinaryPath(root, "v3.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, _ := openRecords(t, root)
	ch := see(t, r, root)
	if ch.Version != "v1.0.0" {
		t.Fatalf("Choose = %q, want v1.0.0", ch.Version)
	}
	if len(ch.Skipped) != 2 {
		t.Fatalf("Skipped = %+v, want v3.0.0 and v2.0.0", ch.Skipped)
	}
	for i, v := range []string{"v3.0.0", "v2.0.0"} {
		s := ch.Skipped[i]
		if s.Version != v || !strings.Contains(s.Mismatch, "no usable binary") {
			t.Errorf("Skipped[%d] = %+v, want %s with no usable binary", i, s, v)
		}
	}
	// Nothing was recorded for a version without a binary.
	recs, err := r.versionRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs["v2.0.0"]; ok {
		t.Errorf("a digest was recorded for v2.0.0, which has no binary")
	}
}

func TestChooseSkipsVersionWhoseBinaryWasRemovedAfterItWasSeen(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	stage(t, root, "v2.0.0", "")
	r, _ := openRecords(t, root)
	see(t, r, root)
	if err := os.Remove(BinaryPath(root, "v2.0.0")); err != nil {
		t.Fatal(err)
	}
	if ch := see(t, r, root); ch.Version != "v1.0.0" {
		t.Errorf("Choose = %q, want v1.0.0", ch.Version)
	}
}

func TestChooseRecordsDigestOnFirstSightAndNeverOverwritesIt(t *testing.T) {
	root := newRoot(t)
	want := stage(t, root, "v1.0.0", "first")
	r, c := openRecords(t, root)
	ctx := context.Background()
	see(t, r, root)
	recs, err := r.versionRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := recs["v1.0.0"]
	if got.Digest != want {
		t.Fatalf("recorded digest %q, want %q", got.Digest, want)
	}
	if !fromUS(got.FirstSeen).Equal(t0) {
		t.Errorf("first_seen = %v, want %v", fromUS(got.FirstSeen), t0)
	}

	c.advance(time.Hour)
	stage(t, root, "v1.0.0", "second, longer content")
	see(t, r, root)
	var dc *DigestConflict
	if err := r.RecordVersion(ctx, "v1.0.0", digestOf("third"), Provenance{Source: SourceInstalled}); !errors.As(err, &dc) || dc.Recorded != digest.Digest(want) {
		t.Fatalf("recording other bytes for v1.0.0 = %v, want a DigestConflict naming the first digest", err)
	}
	recs, err = r.versionRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if recs["v1.0.0"].Digest != want {
		t.Errorf("digest overwritten: %q, want the first %q", recs["v1.0.0"].Digest, want)
	}
	if !fromUS(recs["v1.0.0"].FirstSeen).Equal(t0) {
		t.Errorf("first_seen moved to %v", fromUS(recs["v1.0.0"].FirstSeen))
	}
}

func TestRecordVersionRefusesAnInvalidDigest(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	err := r.RecordVersion(context.Background(), "v1.0.0", "sha256:nothex", Provenance{})
	if err == nil || !strings.Contains(err.Error(), "v1.0.0") {
		t.Errorf("RecordVersion of an invalid digest = %v, want an error naming v1.0.0", err)
	}
}

func TestChooseOnlyChecksVersionsNewerThanTheAnswer(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	stage(t, root, "v2.0.0", "")
	r, _ := openRecords(t, root)
	see(t, r, root)
	recs, err := r.versionRows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := recs["v1.0.0"]; ok {
		t.Errorf("v1.0.0 was hashed and recorded though v2.0.0 was chosen before it")
	}
	if _, ok := recs["v2.0.0"]; !ok {
		t.Errorf("v2.0.0 was chosen but its digest not recorded")
	}
}

func TestBinaryDigestIsTheSHA256OfTheFile(t *testing.T) {
	root := newRoot(t)
	want := stage(t, root, "v1.0.0", "some bytes")
	r, _ := openRecords(t, root)
	for i := 0; i < 2; i++ { // the second is served from the cache
		got, err := r.BinaryDigest(BinaryPath(root, "v1.0.0"))
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want {
			t.Errorf("BinaryDigest = %s, want %s", got, want)
		}
	}
}
