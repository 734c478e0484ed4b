package rollback

import (
	"context"
	"testing"
)

// A withdrawn version is marked bad by the host, not failed: marking a confirmed, known-good
// version bad makes Choose and KnownGood pass over it, Confirm of the version stepped down to
// retires it, status shows it bad with the reason, and no failure is counted and no rollback
// recorded.
func TestMarkBadOfAConfirmedVersionCountsNoFailureAndRecordsNoRollback(t *testing.T) {
	ctx := context.Background()
	root, r, c := seenV1(t)
	confirm(t, r, root, "v1.0.0")
	stage(t, root, "v1.1.0", "")
	see(t, r, root)
	startEnded(t, r, c, "v1.1.0", OutcomeStoodAside) // v1.0.0 stood aside for it earlier
	confirm(t, r, root, "v1.1.0")
	if kg, _ := r.KnownGood(ctx, root); kg != "v1.1.0" {
		t.Fatalf("setup: known-good %q", kg)
	}
	if ch, err := r.ChooseWithout(ctx, root, "v1.1.0"); err != nil || ch.Version != "v1.0.0" {
		t.Fatalf("ChooseWithout v1.1.0 = %q, %v; want v1.0.0 (nothing marked yet)", ch.Version, err)
	}
	if bad, _, _ := r.IsBad(ctx, "v1.1.0"); bad {
		t.Fatal("ChooseWithout marked the version bad")
	}

	if err := r.MarkBad(ctx, "v1.1.0", "withdrawn: leaks memory"); err != nil {
		t.Fatal(err)
	}
	if ch := see(t, r, root); ch.Version != "v1.0.0" {
		t.Errorf("Choose = %q, want v1.0.0", ch.Version)
	}
	if kg, _ := r.KnownGood(ctx, root); kg != "v1.0.0" {
		t.Errorf("known-good = %q, want v1.0.0", kg)
	}
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range st.Versions {
		if v.Failures != 0 || v.FailuresTotal != 0 {
			t.Errorf("%s counts failures %d/%d", v.Version, v.Failures, v.FailuresTotal)
		}
		if v.Version == "v1.1.0" && (!v.Bad || v.BadReason != "withdrawn: leaks memory" || !v.Confirmed) {
			t.Errorf("v1.1.0 in status: %+v, want bad with the withdrawal's reason and still confirmed", v)
		}
	}
	if len(st.Rollbacks) != 0 {
		t.Errorf("rollbacks %+v, want none", st.Rollbacks)
	}
	if s := standing(t, r, root, "v1.0.0"); s.RollbackTarget || s.Failures != 0 || !s.Confirmed {
		t.Errorf("v1.0.0 standing %+v: want confirmed, no failures, not a rollback target", s)
	}
	start, err := r.BeginStart(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	removed, err := r.Confirm(ctx, root, "v1.0.0", start)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "v1.1.0" {
		t.Errorf("confirming v1.0.0 removed %v, want the withdrawn v1.1.0", removed)
	}
	if bad, reason, _ := r.IsBad(ctx, "v1.1.0"); !bad || reason != "withdrawn: leaks memory" {
		t.Errorf("v1.1.0 after retiring: bad %v %q", bad, reason)
	}
}

func TestChooseWithoutNamesNothingWhenTheOnlyVersionIsPassedOver(t *testing.T) {
	root, r, _ := seenV1(t)
	ch, err := r.ChooseWithout(context.Background(), root, "v1.0.0")
	if err != nil || ch.Version != "" || len(ch.Skipped) != 1 || !ch.Skipped[0].Bad {
		t.Fatalf("ChooseWithout = %+v, %v; want nothing, v1.0.0 passed over", ch, err)
	}
}
