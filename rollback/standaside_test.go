package rollback

import (
	"database/sql"
	"testing"
	"time"
)

// After a stand-aside the launcher records the old start's end with the new start: both at
// once, in one commit, so the gap holds one fsync and no reader sees neither running.
func TestBeginStartAfterRecordsTheStandAsideAndTheNextStartTogether(t *testing.T) {
	root, r, c := seenV1(t)
	stage(t, root, "v1.1.0", "")
	see(t, r, root)
	ctx := t.Context()
	old, err := r.BeginStart(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	exited := c.now()
	next, err := r.BeginStartAfter(ctx, "v1.1.0", EndedStart{Start: old, End: End{Outcome: OutcomeStoodAside, At: exited}})
	if err != nil {
		t.Fatal(err)
	}
	var outcome string
	var endedAt sql.NullInt64
	if err := r.db.QueryRowContext(ctx, `SELECT outcome, ended_at FROM starts WHERE id = ?`, old).Scan(&outcome, &endedAt); err != nil {
		t.Fatal(err)
	}
	if outcome != string(OutcomeStoodAside) || !fromUS(endedAt).Equal(exited) {
		t.Errorf("the old start = %s at %v, want stood-aside at %v", outcome, fromUS(endedAt), exited)
	}
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running == nil || st.Running.StartID != next || st.Running.Version != "v1.1.0" {
		t.Errorf("running = %+v, want start %d of v1.1.0", st.Running, next)
	}
}
