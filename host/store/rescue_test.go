package store

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
)

// A rescue is pending from BeginRescue until EndRescue, which records its outcome; the last
// rescue is read back whole, and a store with none says so.
func TestARescueIsPendingUntilItEnds(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok, err := s.LastRescue(ctx); ok || err != nil {
		t.Fatalf("a new store has a rescue (%v, %v)", ok, err)
	}
	if err := s.BeginRescue(ctx, "mesh-host rescue", "/var/lib/mesh-host/rescued/x", []string{"v0.9.0"}); err != nil {
		t.Fatal(err)
	}
	p, ok, err := s.PendingRescue(ctx)
	if !ok || err != nil || p.Reason != "mesh-host rescue" || !p.Ended.IsZero() || !slices.Equal(p.SetAside, []string{"v0.9.0"}) {
		t.Fatalf("pending %+v, %v, %v", p, ok, err)
	}
	if err := s.EndRescue(ctx, Rescue{OK: true, Adopted: 3, Changed: 1, NotAdopted: []string{"created file /etc/b"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.PendingRescue(ctx); ok {
		t.Error("the rescue is still pending after it ended")
	}
	r, ok, err := s.LastRescue(ctx)
	if !ok || err != nil || !r.OK || r.Adopted != 3 || r.Changed != 1 || r.Ended.IsZero() || r.MovedTo != "/var/lib/mesh-host/rescued/x" ||
		!slices.Equal(r.NotAdopted, []string{"created file /etc/b"}) || !slices.Equal(r.SetAside, []string{"v0.9.0"}) {
		t.Errorf("last rescue %+v, %v, %v", r, ok, err)
	}
}

// The accepted sequence numbers and the withdrawn versions of a store set aside are carried
// into the new one, so a rescue takes no older target and runs no withdrawn version.
func TestCarryTrustKeepsAcceptedValuesAndWithdrawnVersions(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old, err := Open(ctx, filepath.Join(dir, "old.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO accepted (what, key, seq, signature, at) VALUES ('target', 'fleet', 42, 'sig', 1)`,
		`INSERT INTO withdrawn (version, reason, at, seq) VALUES ('v1.2.0', 'corrupts', '2026-12-01T00:00:00Z', 7)`,
	} {
		if _, err := old.db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	old.Close()
	s, err := Open(ctx, filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.CarryTrust(ctx, filepath.Join(dir, "old.db")); err != nil {
		t.Fatal(err)
	}
	var seq int64
	var reason string
	if err := s.db.QueryRowContext(ctx, `SELECT seq FROM accepted WHERE what = 'target' AND key = 'fleet'`).Scan(&seq); err != nil || seq != 42 {
		t.Errorf("accepted seq %d, %v; want 42 carried", seq, err)
	}
	if err := s.db.QueryRowContext(ctx, `SELECT reason FROM withdrawn WHERE version = 'v1.2.0'`).Scan(&reason); err != nil || reason != "corrupts" {
		t.Errorf("withdrawn %q, %v; want v1.2.0 carried", reason, err)
	}
}
