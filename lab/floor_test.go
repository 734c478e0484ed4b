package lab

import (
	"os"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// A release built from the same tree as the package's launcher carries that launcher, byte for
// byte (the lab's fleet ships the floor's build in every release): a node runs it as its floor
// already, and staged it again under launchers/<v>, listed on trial beside the floor for ever
// (issue 27 §1.1). Every node takes the host release and stages no launcher.
func TestARolloutOfAReleaseCarryingTheFloorsLauncherStagesNone(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 8*time.Minute, FleetOptions{Nodes: 2}) // its builds included: minutes on a loaded machine
	s.ship("v1.1.0", PkgHost)
	c := s.rollout(append([]string{"start", "v1.1.0", "--json"}, rolloutFlags(30*time.Second, 2*time.Second)...)...)
	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d, want 0 (completed):\n%s", code, c.Output())
	}
	// A launcher is staged before the host version it came with appears: once every node runs
	// v1.1.0, any launcher it staged is on disk.
	s.allOn(s.f.Names(), "v1.1.0")
	for _, name := range s.f.Names() {
		n := s.f.Node(name)
		if ents, err := os.ReadDir(rollback.LaunchersDir(n.Root)); err == nil && len(ents) > 0 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%s: launchers/ holds %v, want nothing: its floor is the release's launcher", name, names)
		}
		rep := launcherRecords(t, n.Root)
		if rep.State != rollback.LauncherFloor || len(rep.Versions) != 0 {
			t.Errorf("%s: launcher %s %s with %d delivered versions recorded, want the floor alone", name, rep.Version, rep.State, len(rep.Versions))
		}
		for _, b := range s.f.Beats.All() {
			if b.Node == name && b.Fetch != nil && b.Fetch.LauncherNote != "" {
				t.Errorf("%s heartbeat a launcher note %q", name, b.Fetch.LauncherNote)
				break
			}
		}
	}
}
