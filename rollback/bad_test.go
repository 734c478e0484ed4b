package rollback

import (
	"context"
	"reflect"
	"testing"
	"time"
)

func TestMarkBadKeepsReasonAndFirstMarkWins(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	stage(t, root, "v2.0.0", "")
	r, c := openRecords(t, root)
	ctx := context.Background()
	see(t, r, root)
	if _, err := r.candidate(ctx, root, "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	if bad, reason, err := r.IsBad(ctx, "v2.0.0"); err != nil || bad || reason != "" {
		t.Fatalf("IsBad before marking = %v, %q, %v", bad, reason, err)
	}
	if err := r.MarkBad(ctx, "v2.0.0", "failed 3 times: panic: boom"); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Hour)
	if err := r.MarkBad(ctx, "v2.0.0", "a later, different reason"); err != nil {
		t.Fatal(err)
	}
	bad, reason, err := r.IsBad(ctx, "v2.0.0")
	if err != nil || !bad || reason != "failed 3 times: panic: boom" {
		t.Errorf("IsBad = %v, %q, %v; want bad with the first reason", bad, reason, err)
	}
	recs, err := r.versionRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !fromUS(recs["v2.0.0"].BadAt).Equal(t0) {
		t.Errorf("bad_at = %v, want the first mark %v", fromUS(recs["v2.0.0"].BadAt), t0)
	}
	if b, _, _ := r.IsBad(ctx, "v1.0.0"); b {
		t.Error("marking v2.0.0 bad marked v1.0.0 too")
	}
}

func TestIsBadOfUnknownVersionIsFalse(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	if bad, reason, err := r.IsBad(context.Background(), "v9.9.9"); err != nil || bad || reason != "" {
		t.Errorf("IsBad(unknown) = %v, %q, %v; want false", bad, reason, err)
	}
}

func TestRollbacksAreListedNewestFirstAndLimited(t *testing.T) {
	root := newRoot(t)
	r, c := openRecords(t, root)
	ctx := context.Background()
	if rbs, err := r.Rollbacks(ctx, 10); err != nil || len(rbs) != 0 {
		t.Fatalf("Rollbacks of fresh records = %v, %v", rbs, err)
	}
	explicit := t0.Add(-24 * time.Hour)
	in := []Rollback{
		{From: "v2.0.0", To: "v1.0.0", Reason: "first", Output: "panic: one"},
		{From: "v3.0.0", To: "v1.0.0", Reason: "second", At: explicit},
		{From: "v4.0.0", To: "v3.0.0", Reason: "third"},
	}
	for _, rb := range in {
		if err := r.RecordRollback(ctx, rb); err != nil {
			t.Fatal(err)
		}
		c.advance(time.Minute)
	}
	got, err := r.Rollbacks(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []Rollback{
		{From: "v4.0.0", To: "v3.0.0", Reason: "third", At: t0.Add(2 * time.Minute)},
		{From: "v3.0.0", To: "v1.0.0", Reason: "second", At: explicit},
		{From: "v2.0.0", To: "v1.0.0", Reason: "first", At: t0, Output: "panic: one"},
	}
	if len(got) != len(want) {
		t.Fatalf("Rollbacks = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.From != w.From || g.To != w.To || g.Reason != w.Reason || g.Output != w.Output || !g.At.Equal(w.At) {
			t.Errorf("Rollbacks[%d] = %+v, want %+v (order is by when recorded, newest first)", i, g, w)
		}
	}
	if got, _ := r.Rollbacks(ctx, 1); len(got) != 1 || got[0].Reason != "third" {
		t.Errorf("Rollbacks(1) = %+v, want only the newest", got)
	}
}

func TestSetFailedAndClearFailed(t *testing.T) {
	root := newRoot(t)
	r, c := openRecords(t, root)
	ctx := context.Background()
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Failed || st.FailedReason != "" {
		t.Fatalf("fresh records are failed: %+v", st)
	}
	if err := r.SetFailed(ctx, "nothing to roll back to"); err != nil {
		t.Fatal(err)
	}
	if st, _ = r.Status(ctx, root, DefaultPolicy); !st.Failed || st.FailedReason != "nothing to roll back to" {
		t.Errorf("after SetFailed: failed=%v reason=%q", st.Failed, st.FailedReason)
	}
	c.advance(time.Minute)
	was, err := r.ClearFailed(ctx)
	if err != nil || was != "nothing to roll back to" {
		t.Errorf("ClearFailed = %q, %v; want the reason it was failed", was, err)
	}
	if st, _ = r.Status(ctx, root, DefaultPolicy); st.Failed {
		t.Error("still failed after ClearFailed")
	}
	if was, err := r.ClearFailed(ctx); err != nil || was != "" {
		t.Errorf("second ClearFailed = %q, %v; want nothing", was, err)
	}
}

func TestStartRecordsPIDEndAndOutput(t *testing.T) {
	_, r, c := seenV1(t)
	ctx := context.Background()
	id, err := r.BeginStart(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	exact := t0.Add(1500 * time.Microsecond)
	if err := r.SetPID(ctx, id, 4242, exact); err != nil {
		t.Fatal(err)
	}
	ended := t0.Add(3*time.Second + 7*time.Microsecond)
	c.advance(time.Minute) // the explicit exit time is what is kept, not the moment it was recorded
	if err := r.EndStart(ctx, id, End{Outcome: OutcomeFailed, ExitCode: -1, Signal: "killed", Output: "a\nb", At: ended}); err != nil {
		t.Fatal(err)
	}
	id2 := startEnded(t, r, c, "v1.0.0", OutcomeStoodAside)
	starts, err := r.Starts(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) != 2 {
		t.Fatalf("Starts = %+v, want 2", starts)
	}
	s := starts[0]
	if s.ID != id || s.PID != 4242 || !s.StartedAt.Equal(exact) || !s.EndedAt.Equal(ended) ||
		s.ExitCode != -1 || s.Signal != "killed" || s.Outcome != OutcomeFailed || s.Output != "a\nb" || !s.ConfirmedAt.IsZero() {
		t.Errorf("first start = %+v", s)
	}
	if s := starts[1]; s.ID != id2 || s.Outcome != OutcomeStoodAside || s.Signal != "" || !s.EndedAt.Equal(t0.Add(time.Minute+time.Second)) {
		t.Errorf("second start = %+v (an end without a time is recorded at now)", s)
	}
	if got, err := r.Outcomes(ctx, "v1.0.0"); err != nil || !reflect.DeepEqual(got, []string{"failed", "stood-aside"}) {
		t.Errorf("Outcomes = %v, %v", got, err)
	}
	recs, _ := r.versionRows(ctx)
	var firstStarted int64
	if err := r.db.QueryRow(`SELECT first_started FROM versions WHERE version = 'v1.0.0'`).Scan(&firstStarted); err != nil {
		t.Fatal(err)
	}
	if firstStarted != us(t0) {
		t.Errorf("first_started = %v, want the first start at %v (%v)", time.UnixMicro(firstStarted), t0, recs["v1.0.0"])
	}
}

func TestEndInterruptedClosesOpenStartsWithoutCountingThem(t *testing.T) {
	root, r, c := seenV1(t)
	ctx := context.Background()
	startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	if _, err := r.BeginStart(ctx, "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.BeginStart(ctx, "v1.0.0"); err != nil {
		t.Fatal(err)
	}
	st, _ := r.Status(ctx, root, DefaultPolicy)
	if st.Running == nil {
		t.Fatal("an open start is not shown as running")
	}
	n, err := r.EndInterrupted(ctx)
	if err != nil || n != 2 {
		t.Fatalf("EndInterrupted = %d, %v; want 2 closed", n, err)
	}
	if got, _ := r.Outcomes(ctx, "v1.0.0"); !reflect.DeepEqual(got, []string{"failed", "interrupted", "interrupted"}) {
		t.Errorf("Outcomes = %v", got)
	}
	if s := standing(t, r, root, "v1.0.0"); s.Failures != 1 {
		t.Errorf("Failures = %d, want 1: an interrupted start is not a failure", s.Failures)
	}
	if st, _ := r.Status(ctx, root, DefaultPolicy); st.Running != nil {
		t.Errorf("Running = %+v after EndInterrupted, want none", st.Running)
	}
	if n, err := r.EndInterrupted(ctx); err != nil || n != 0 {
		t.Errorf("second EndInterrupted = %d, %v; want 0", n, err)
	}
}
