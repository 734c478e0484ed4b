package lab

import (
	"testing"
	"time"

	"github.com/novox/mesh-host/release/rollout"
)

// Issue 18, 2b, as it was found: a rollout of v1.1.0 (one canary, then the rest, a long soak)
// is superseded, once its canary confirmed, by another rollout of v1.1.0 with a short soak. The
// second plan leaves the canary out (it runs v1.1.0 already); when it completes, no node keeps
// a key of its own — the canary's too falls back to the fleet key, so that a later fleet target
// reaches it.
func TestRolloutSupersededByOneOfTheSameReleaseLeavesNoPerNodeTargetBehind(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 3})
	s.ship("v1.1.0", PkgHost)
	scaled := []string{"--window", "20s", "--alive", "1m", "--silent-after", "5s", "--lease", "6s"}

	first := s.rollout(append([]string{"start", "v1.1.0", "--canary", "1", "--steps", "100%", "--soak", "30s", "--follow"}, scaled...)...)
	if _, err := first.WaitLine(s.ctx, "confirmed v1.1.0"); err != nil {
		t.Fatal(err)
	}
	old := s.waitState("v1.1.0 soaking its canary", func(st rollout.State) bool { return st.Status == rollout.StatusRunning })
	canary := BatchNodes(old, 0)
	// A rollout's id is its start to the second and its version: start the second one after.
	for time.Now().Unix() <= old.Created.Unix() {
		time.Sleep(50 * time.Millisecond)
	}
	second := s.rollout(append([]string{"start", "v1.1.0", "--canary", "1", "--steps", "100%", "--soak", "1s", "--supersede"}, scaled...)...)
	if code := s.exit(second); code != 0 {
		t.Fatalf("the superseding rollout exited %d, want 0 (completed)", code)
	}
	if code := s.exit(first); code != 4 {
		t.Errorf("the superseded rollout exited %d, want 4", code)
	}
	st := s.waitState("v1.1.0 completed", func(st rollout.State) bool { return st.Status.Final() })
	if st.Status != rollout.StatusCompleted || st.ID == old.ID {
		t.Fatalf("the current rollout is %s %s, want the second one completed", st.ID, st.Status)
	}
	for _, n := range st.Nodes {
		if n == canary[0] {
			t.Fatalf("the second plan %v holds the canary %s; the case needs it left out", st.Nodes, n)
		}
	}
	t.Logf("the superseding rollout printed:\n%s", second.Output())
	s.allOn(s.f.Names(), "v1.1.0")
	s.targetsAfterCompletion("v1.1.0", s.f.Names())
}
