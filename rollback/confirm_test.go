package rollback

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConfirmRetiresVersionsOlderThanPredecessorAndBadOnes(t *testing.T) {
	root := newRoot(t)
	r, c := openRecords(t, root)
	ctx := context.Background()
	// History: v1.0.0, v1.0.5 (never confirmed), v1.1.0, v1.3.0 confirmed; v1.2.0 and v1.6.0 bad.
	for _, v := range []string{"v1.0.0", "v1.0.5", "v1.1.0", "v1.2.0", "v1.3.0", "v1.4.0", "v1.5.0", "v1.6.0"} {
		stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []string{"v1.0.0", "v1.1.0", "v1.3.0"} {
		confirm(t, r, root, v) // each confirm retires nothing that matters here
		c.advance(time.Minute)
	}
	// Put back what those confirms may have retired, to start from every directory on disk.
	for _, v := range []string{"v1.0.0", "v1.0.5"} {
		if !exists(t, VersionDir(root, v)) {
			stage(t, root, v, "")
		}
	}
	for _, v := range []string{"v1.2.0", "v1.6.0"} {
		if err := r.MarkBad(ctx, v, "crashed at start"); err != nil {
			t.Fatal(err)
		}
		stage(t, root, v, "") // bad, but its directory still there
	}
	for _, name := range []string{"latest", ".staging-x"} {
		if err := os.MkdirAll(filepath.Join(VersionsDir(root), name), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	start, err := r.BeginStart(ctx, "v1.4.0")
	if err != nil {
		t.Fatal(err)
	}
	removed, err := r.Confirm(ctx, root, "v1.4.0", start)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"v1.6.0", "v1.2.0", "v1.1.0", "v1.0.5", "v1.0.0"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	// Kept: the predecessor, the confirming version, the newer staged one, and what is not a version.
	if got, want := dirNames(t, root), []string{".staging-x", "latest", "v1.3.0", "v1.4.0", "v1.5.0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left on disk %v, want %v", got, want)
	}
	// Records stay: a bad version stays bad, so it is never staged again.
	recs, err := r.versionRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 8 {
		t.Errorf("records hold %d versions after retiring, want all 8", len(recs))
	}
	for _, v := range []string{"v1.2.0", "v1.6.0"} {
		if bad, reason, err := r.IsBad(ctx, v); err != nil || !bad || reason != "crashed at start" {
			t.Errorf("IsBad(%s) = %v, %q, %v after retiring; want still bad", v, bad, reason, err)
		}
	}
	if ok, err := r.StartConfirmed(ctx, start); err != nil || !ok {
		t.Errorf("StartConfirmed = %v, %v; want true", ok, err)
	}
	if !recs["v1.4.0"].Confirmed {
		t.Error("v1.4.0 not confirmed in the records")
	}
}

func TestConfirmOfFirstVersionRemovesOnlyBadOnes(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	for _, v := range []string{"v0.9.0", "v0.9.5", "v1.0.0", "v2.0.0"} {
		stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.MarkBad(ctx, "v0.9.5", "bad"); err != nil {
		t.Fatal(err)
	}
	removed, err := r.Confirm(ctx, root, "v1.0.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"v0.9.5"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %v, want %v (no predecessor: nothing is older than it)", removed, want)
	}
	if got, want := dirNames(t, root), []string{"v0.9.0", "v1.0.0", "v2.0.0"}; !reflect.DeepEqual(got, want) {
		t.Errorf("left %v, want %v", got, want)
	}
}

func TestConfirmNeverRemovesTheConfirmingVersion(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	for _, v := range []string{"v1.0.0", "v2.0.0"} {
		stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
	}
	confirm(t, r, root, "v1.0.0")
	// Even marked bad (say, by a racing launcher), the version that is running and confirming stays.
	if err := r.MarkBad(ctx, "v2.0.0", "bad"); err != nil {
		t.Fatal(err)
	}
	removed, err := r.Confirm(ctx, root, "v2.0.0", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 0 {
		t.Errorf("removed %v, want nothing", removed)
	}
	if !exists(t, BinaryPath(root, "v2.0.0")) || !exists(t, BinaryPath(root, "v1.0.0")) {
		t.Error("a directory was removed")
	}
}

func TestConfirmOfRollbackTargetRetiresTheBadVersion(t *testing.T) {
	root, r, _ := rolledBack(t)
	ctx := context.Background()
	if !exists(t, VersionDir(root, "v2.0.0")) {
		t.Fatal("setup: v2.0.0 is not on disk")
	}
	start, err := r.BeginStart(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	removed, err := r.Confirm(ctx, root, "v1.0.0", start)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"v2.0.0"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	if bad, _, _ := r.IsBad(ctx, "v2.0.0"); !bad {
		t.Error("v2.0.0 is no longer bad once its directory is gone")
	}
}

func TestConfirmOfUnknownVersionIsAnErrorNamingIt(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	start, err := r.BeginStart(ctx, "v7.7.7")
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Confirm(ctx, root, "v7.7.7", start)
	if err == nil || !strings.Contains(err.Error(), "v7.7.7") {
		t.Fatalf("Confirm of an unknown version = %v, want an error naming v7.7.7", err)
	}
	if ok, _ := r.StartConfirmed(ctx, start); ok {
		t.Error("the start was marked confirmed though Confirm failed")
	}
}

func TestConfirmKeepsTheFirstConfirmationTime(t *testing.T) {
	root, r, c := seenV1(t)
	ctx := context.Background()
	first := confirm(t, r, root, "v1.0.0")
	c.advance(time.Hour)
	second := confirm(t, r, root, "v1.0.0")
	recs, err := r.versionRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !fromUS(recs["v1.0.0"].ConfirmedAt).Equal(t0) {
		t.Errorf("confirmed_at = %v, want the first confirmation %v", fromUS(recs["v1.0.0"].ConfirmedAt), t0)
	}
	for _, id := range []int64{first, second} {
		if ok, err := r.StartConfirmed(ctx, id); err != nil || !ok {
			t.Errorf("start %d confirmed = %v, %v", id, ok, err)
		}
	}
}

func TestStartConfirmedOfUnconfirmedAndUnknownStarts(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	r, _ := openRecords(t, root)
	ctx := context.Background()
	see(t, r, root)
	id, err := r.BeginStart(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := r.StartConfirmed(ctx, id); err != nil || ok {
		t.Errorf("StartConfirmed of a fresh start = %v, %v; want false", ok, err)
	}
	if _, err := r.StartConfirmed(ctx, id+100); err == nil {
		t.Error("StartConfirmed of an unknown start succeeded")
	}
}

func TestKnownGoodAndPredecessor(t *testing.T) {
	ctx := context.Background()
	root := newRoot(t)
	r, _ := openRecords(t, root)
	for _, v := range []string{"v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0", "v1.4.0"} {
		stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, wantKG string, preds map[string]string) {
		t.Helper()
		kg, err := r.KnownGood(ctx, root)
		if err != nil || kg != wantKG {
			t.Errorf("%s: KnownGood = %q, %v; want %q", when, kg, err, wantKG)
		}
		for v, want := range preds {
			got, err := r.Predecessor(ctx, root, v)
			if err != nil || got != want {
				t.Errorf("%s: Predecessor(%s) = %q, %v; want %q", when, v, got, err, want)
			}
		}
	}
	check("nothing confirmed", "", map[string]string{"v1.4.0": "", "v1.0.0": ""})

	if _, err := r.Confirm(ctx, root, "v1.0.0", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Confirm(ctx, root, "v1.1.0", 0); err != nil {
		t.Fatal(err)
	}
	stage(t, root, "v1.0.0", "") // put back what retiring may remove, to look at it below
	if _, err := r.Confirm(ctx, root, "v1.3.0", 0); err != nil {
		t.Fatal(err)
	}
	stage(t, root, "v1.0.0", "")
	check("v1.0.0, v1.1.0, v1.3.0 confirmed", "v1.3.0", map[string]string{
		"v1.4.0": "v1.3.0", "v1.3.0": "v1.1.0", "v1.2.0": "v1.1.0", "v1.1.0": "v1.0.0", "v1.0.0": "",
		"v9.0.0": "v1.3.0", // a version not on disk still has one
	})

	if err := r.MarkBad(ctx, "v1.3.0", "bad"); err != nil {
		t.Fatal(err)
	}
	check("v1.3.0 bad", "v1.1.0", map[string]string{"v1.4.0": "v1.1.0"})

	if err := os.RemoveAll(VersionDir(root, "v1.1.0")); err != nil {
		t.Fatal(err)
	}
	check("v1.1.0 retired from disk", "v1.0.0", map[string]string{"v1.4.0": "v1.0.0"})

	// A confirmed version whose binary changed is still listed here; Choose is what refuses it.
	stage(t, root, "v1.0.0", "tampered, longer binary")
	check("v1.0.0 changed on disk", "v1.0.0", nil)
}

func TestRetireWithoutConfirmTouchesNothingButBad(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	for _, v := range []string{"v1.0.0", "v2.0.0", "v3.0.0"} {
		stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
	}
	before := snapshot(t, root)
	removed, err := r.Retire(ctx, root, "v2.0.0")
	if err != nil || len(removed) != 0 {
		t.Fatalf("Retire = %v, %v; want nothing (nothing confirmed, nothing bad)", removed, err)
	}
	if !reflect.DeepEqual(snapshot(t, root), before) {
		t.Error("Retire changed the versions directory")
	}
}
