package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
)

func res(typ, id, spec string) wire.Resource {
	return wire.Resource{Type: typ, ID: id, Spec: json.RawMessage(spec)}
}

// The ledger keeps the order resources were first applied in and the created flag of their
// first record, takes the newest spec, parses specs, forgets on Drop, and survives a restart.
func TestOwnedLedgerKeepsFirstOrderAndCreatedAcrossARestart(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	at := time.UnixMilli(1_700_000_000_000)
	for _, step := range []struct {
		r       wire.Resource
		created bool
	}{
		{res("directory", "/srv/a", `{}`), true},
		{res("file", "/srv/a/f", `{"content":"x"}`), true},
		{res("directory", "/srv/b", `{"mode":"0700"}`), false},
		// Applied again: a new spec, reported created this time; seq and created stay.
		{res("directory", "/srv/a", `{"mode":"0750"}`), false},
		{res("directory", "/srv/b", `{"mode":"0700"}`), true},
	} {
		if err := s.Record(ctx, step.r, step.created, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Drop(ctx, "file", "/srv/a/f"); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop(ctx, "file", "/never/owned"); err != nil {
		t.Fatalf("dropping what is not owned: %v", err)
	}
	s.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	owned, err := s.Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != 2 {
		t.Fatalf("owned %+v, want /srv/a and /srv/b", owned)
	}
	a, b := owned[0], owned[1]
	if a.ID != "/srv/a" || !a.Created || a.Seq >= b.Seq || string(a.Spec) != `{"mode":"0750"}` || !a.AppliedAt.Equal(at) {
		t.Errorf("first owned %+v: want /srv/a first, created, newest spec", a)
	}
	if spec, ok := a.Parsed.(*wire.DirectorySpec); !ok || spec.Mode != "0750" {
		t.Errorf("parsed spec %#v, want *wire.DirectorySpec mode 0750", a.Parsed)
	}
	if b.ID != "/srv/b" || b.Created {
		t.Errorf("second owned %+v: want /srv/b, not created (its first record said so)", b)
	}
	n, err := s.OwnedCount(ctx)
	if err != nil || n.Total != 2 || n.ByType["directory"] != 2 {
		t.Errorf("count %+v, %v", n, err)
	}
}

// A spec the ledger can no longer parse is returned unparsed rather than failing every
// reconcile; the engine keeps such a resource.
func TestOwnedReturnsASpecThatNoLongerParsesUnparsed(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	if err := s.Record(ctx, res("directory", "/srv/a", `{"colour":"blue"}`), true, time.Now()); err != nil {
		t.Fatal(err)
	}
	owned, err := s.Owned(ctx)
	if err != nil || len(owned) != 1 || owned[0].Parsed != nil {
		t.Fatalf("owned %+v, %v; want it returned with Parsed nil", owned, err)
	}
}

// LastApplied is the end of the last reconcile that completed ok.
func TestLastAppliedIsTheLastCompleteReconcile(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	if _, ok, err := s.LastApplied(ctx); ok || err != nil {
		t.Fatalf("a new store: ok=%v err=%v", ok, err)
	}
	clock := time.UnixMilli(1_700_000_000_000)
	s.now = func() time.Time { return clock }
	id, _ := s.BeginReconcile(ctx, wire.TriggerStart)
	s.EndReconcile(ctx, id, true, "")
	clock = clock.Add(time.Minute)
	id, _ = s.BeginReconcile(ctx, wire.TriggerTimer)
	s.EndReconcile(ctx, id, false, "resources[0] failed")
	at, ok, err := s.LastApplied(ctx)
	if !ok || err != nil || !at.Equal(time.UnixMilli(1_700_000_000_000)) {
		t.Errorf("LastApplied = %v %v %v; want the first (ok) reconcile's end", at, ok, err)
	}
}

// plan and owned open the store read-only beside a running host: the host's running reconcile
// is not closed as interrupted, and what it owns is read.
func TestOpenReadOnlyReadsOwnedAndLeavesARunningReconcileAlone(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	if _, err := s.BeginReconcile(ctx, wire.TriggerStart); err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, res("directory", "/srv/a", `{}`), true, time.Now()); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if owned, err := ro.Owned(ctx); err != nil || len(owned) != 1 {
		t.Errorf("owned %v, %v", owned, err)
	}
	if err := ro.Record(ctx, res("directory", "/srv/b", `{}`), true, time.Now()); err == nil {
		t.Errorf("a read-only store recorded")
	}
	rs, err := s.Reconciles(ctx, 1)
	if err != nil || len(rs) != 1 || !rs[0].Ended.IsZero() {
		t.Errorf("the running reconcile %+v, %v: want it still running", rs, err)
	}
}

// A store written before the owned table existed, opened read-only (plan, owned), owns nothing.
func TestOpenReadOnlyOfAStoreWithoutTheOwnedTableOwnsNothing(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	if _, err := s.db.ExecContext(ctx, `DROP TABLE owned`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if owned, err := ro.Owned(ctx); err != nil || len(owned) != 0 {
		t.Errorf("owned %v, %v; want nothing", owned, err)
	}
}

// RecordAll records a run as Record would each, in the run's order, in one transaction: one
// already owned keeps its seq and created flag; a run that fails part way records none of it.
func TestRecordAllRecordsARunInOrderOrNoneOfIt(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t)
	at := time.UnixMilli(1_700_000_000_000)
	if err := s.Record(ctx, res("directory", "/srv/a", `{}`), true, at); err != nil {
		t.Fatal(err)
	}
	run := []apply.Applied{
		{Resource: res("file", "/srv/a/1", `{"content":"1"}`), Created: true, At: at},
		{Resource: res("directory", "/srv/a", `{"mode":"0700"}`), Created: false, At: at},
		{Resource: res("file", "/srv/a/2", `{"content":"2"}`), Created: false, At: at},
	}
	if err := s.RecordAll(ctx, run); err != nil {
		t.Fatal(err)
	}
	owned, err := s.Owned(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range owned {
		got = append(got, fmt.Sprintf("%s %v %s", o.ID, o.Created, o.Spec))
	}
	want := []string{`/srv/a true {"mode":"0700"}`, `/srv/a/1 true {"content":"1"}`, `/srv/a/2 false {"content":"2"}`}
	if !slices.Equal(got, want) {
		t.Fatalf("owned %q, want %q", got, want)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.RecordAll(cancelled, []apply.Applied{{Resource: res("file", "/srv/a/3", `{}`), At: at}}); err == nil {
		t.Fatal("a run recorded under a cancelled context")
	}
	if owned, _ := s.Owned(ctx); len(owned) != 3 {
		t.Fatalf("%d owned after a failed run, want the 3 before it", len(owned))
	}
}
