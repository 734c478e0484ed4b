package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestStoreHoldsTheDeclarationAcrossARestart(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	if _, _, ok, err := s.Held(ctx); ok || err != nil {
		t.Fatalf("a new store holds something: ok=%v err=%v", ok, err)
	}
	if err := s.Hold(ctx, []byte(`{"a":1}`), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(ctx, []byte(`{"a":2}`), 9); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	decl, rev, ok, err := s2.Held(ctx)
	if err != nil || !ok || rev != 9 || string(decl) != `{"a":2}` {
		t.Fatalf("held = %s rev %d ok %v err %v", decl, rev, ok, err)
	}
}

func TestStoreRefusalLeavesTheHeldDeclaration(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	if err := s.Hold(ctx, []byte("good"), 4); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordRefusal(ctx, "declaration", 5, "declaration: version 2 is not supported"); err != nil {
		t.Fatal(err)
	}
	decl, rev, _, _ := s.Held(ctx)
	if string(decl) != "good" || rev != 4 {
		t.Fatalf("held = %s@%d after a refusal", decl, rev)
	}
	r, ok, err := s.LastRefusal(ctx)
	if err != nil || !ok || r.Revision != 5 || r.What != "declaration" || !strings.Contains(r.Reason, "version 2") {
		t.Fatalf("last refusal = %+v ok %v err %v", r, ok, err)
	}
	if w := r.Wire(); w.Revision != 5 || w.Error != r.Reason {
		t.Fatalf("wire refusal = %+v", w)
	}
}

// Settling the target refusals up to a revision forgets those and only those: the heartbeat's
// last refusal is then the one still true.
func TestSettlingTargetRefusalsForgetsOnlyThoseUpToTheRevision(t *testing.T) {
	ctx := t.Context()
	s, _ := openTemp(t)
	for _, r := range []struct {
		what string
		rev  uint64
	}{{"target", 3}, {"declaration", 4}, {"target", 5}, {"target", 9}} {
		if err := s.RecordRefusal(ctx, r.what, r.rev, "refused"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		through  uint64
		wantWhat string
		wantRev  uint64
	}{
		{through: 5, wantWhat: "target", wantRev: 9},
		{through: 9, wantWhat: "declaration", wantRev: 4},
	} {
		if err := s.SettleRefusals(ctx, "target", tc.through); err != nil {
			t.Fatal(err)
		}
		r, ok, err := s.LastRefusal(ctx)
		if err != nil || !ok || r.What != tc.wantWhat || r.Revision != tc.wantRev {
			t.Errorf("after settling targets through %d: last refusal %+v ok %v err %v; want %s at %d", tc.through, r, ok, err, tc.wantWhat, tc.wantRev)
		}
	}
}

func TestStoreRecordsEveryReconcile(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	if _, ok, _ := s.LastReconcile(ctx); ok {
		t.Fatal("a new store has a last reconcile")
	}
	id1, err := s.BeginReconcile(ctx, "start")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EndReconcile(ctx, id1, true, ""); err != nil {
		t.Fatal(err)
	}
	id2, err := s.BeginReconcile(ctx, "declaration")
	if err != nil {
		t.Fatal(err)
	}
	if last, _, _ := s.LastReconcile(ctx); last.ID != id1 {
		t.Fatalf("last reconcile while #2 runs = %d, want the ended #1", last.ID)
	}
	if err := s.EndReconcile(ctx, id2, false, "file /etc/x: permission denied"); err != nil {
		t.Fatal(err)
	}
	last, ok, err := s.LastReconcile(ctx)
	if err != nil || !ok || last.ID != id2 || last.OK || last.Trigger != "declaration" || last.Error == "" || last.Ended.IsZero() {
		t.Fatalf("last = %+v ok %v err %v", last, ok, err)
	}
	if w := last.Wire(); w.Trigger != "declaration" || w.OK || w.Error != last.Error {
		t.Fatalf("wire = %+v", w)
	}
	all, err := s.Reconciles(ctx, 10)
	if err != nil || len(all) != 2 || all[0].ID != id2 {
		t.Fatalf("reconciles = %+v err %v", all, err)
	}
}

func TestStoreRefusesBadReconcileCalls(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	if _, err := s.BeginReconcile(ctx, "whim"); err == nil {
		t.Fatal("unknown trigger accepted")
	}
	id, _ := s.BeginReconcile(ctx, "timer")
	if err := s.EndReconcile(ctx, id, true, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.EndReconcile(ctx, id, true, ""); err == nil {
		t.Fatal("ending a reconcile twice was accepted")
	}
}

func TestStoreClosesAReconcileInterruptedByAStop(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	if _, err := s.BeginReconcile(ctx, "timer"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	last, ok, err := s2.LastReconcile(ctx)
	if err != nil || !ok || last.OK || !strings.Contains(last.Error, "interrupted") {
		t.Fatalf("last = %+v ok %v err %v", last, ok, err)
	}
}

func TestStoreCorruptFileNamesTheFileAndTheFix(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte(strings.Repeat("this is not sqlite\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), path)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "move") {
		t.Fatalf("error does not name the file and the fix: %v", err)
	}
	aside, err := MoveAside(path, time.Date(2026, 11, 29, 7, 12, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(aside, ".corrupt-20261129T071200") {
		t.Fatalf("aside = %s", aside)
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open after moving aside: %v", err)
	}
	s.Close()
	if _, err := os.Stat(aside); err != nil {
		t.Fatalf("the corrupt file was not kept: %v", err)
	}
}

func TestStoreRefusesANewerSchema(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	if _, err := s.db.ExecContext(ctx, `PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "schema version 99") {
		t.Fatalf("err = %v", err)
	}
}

func TestStorePrunesOldReconciles(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	for i := 0; i < keepHistory+5; i++ {
		id, err := s.BeginReconcile(ctx, "timer")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.EndReconcile(ctx, id, true, ""); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM reconciles`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != keepHistory {
		t.Fatalf("%d reconciles kept, want %d", n, keepHistory)
	}
}

// A host that crashes during every reconcile never ends one, and pruning ran only when a
// reconcile ended: a crash loop added a row per start for ever. Each reconcile begun prunes
// too, in the transaction that adds it.
func TestStorePrunesReconcilesThatNeverEnd(t *testing.T) {
	ctx := t.Context()
	s, _ := openTemp(t)
	for i := 0; i < keepHistory+5; i++ {
		if _, err := s.BeginReconcile(ctx, "timer"); err != nil { // the host crashes before EndReconcile
			t.Fatal(err)
		}
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM reconciles`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > keepHistory {
		t.Fatalf("%d reconciles kept after %d begun and never ended, want at most %d", n, keepHistory+5, keepHistory)
	}
}

// Refusals are kept to the newest keepHistory, each reason bounded by its caller, and a
// refusal recorded after many is still the one reported.
func TestStorePrunesOldRefusals(t *testing.T) {
	ctx := t.Context()
	s, _ := openTemp(t)
	for i := 0; i < keepHistory+5; i++ {
		if err := s.RecordRefusal(ctx, "declaration", uint64(i), "refused"); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM refusals`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != keepHistory {
		t.Fatalf("%d refusals kept, want %d", n, keepHistory)
	}
	if r, ok, err := s.LastRefusal(ctx); err != nil || !ok || r.Revision != keepHistory+4 {
		t.Fatalf("LastRefusal = %+v, %v, %v; want revision %d", r, ok, err, keepHistory+4)
	}
}
