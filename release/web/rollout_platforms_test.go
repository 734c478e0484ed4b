package web

import (
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// The issue (§3): the fleet page's rollout section shows each platform's progress — its nodes,
// how many run the version confirmed by their heartbeats' platform, its troubled nodes in a
// halt — the platforms left out, and how each platform fared in the halt.
func TestTheRolloutSectionShowsEachPlatformsProgress(t *testing.T) {
	s, hs := newTestServer(t)
	for _, n := range []struct{ node, platform, version string }{
		{"amd-1", "linux/amd64", "v2.0.0"}, {"arm-1", "linux/arm64", "v1.0.0"}, {"amd-2", "linux/amd64", "v1.0.0"}, {"arm-2", "linux/arm64", "v1.0.0"},
	} {
		e := running(n.node, n.version)
		e.Heartbeat.Profile = &wire.Profile{OS: "linux", Platform: n.platform}
		s.Update(e)
	}
	amdArm := []rollout.PlatformCount{{Platform: "linux/amd64", Nodes: 1}, {Platform: "linux/arm64", Nodes: 1}}
	st := rollout.State{ID: "r9", Version: "v2.0.0", Status: rollout.StatusHalted, Created: now.Add(-time.Minute),
		Nodes: []string{"amd-1", "arm-1", "amd-2", "arm-2"}, Ran: []string{"v1.0.0", "v1.0.0", "v1.0.0", "v1.0.0"},
		Batches: []rollout.Batch{{Name: "canary", End: 2, Started: now, Platforms: amdArm}, {Name: "100%", End: 4, Platforms: amdArm}},
		Skipped: []rollout.SkippedPlatform{{Platform: "linux/arm/v7", Nodes: 12, Why: rollout.SkipNoBuild}},
		Halt: &rollout.Halt{At: now, Batch: 0, Nodes: []rollout.NodeReason{{Node: "arm-1", Why: rollout.WhyRolledBack}},
			Platforms: []rollout.PlatformOutcome{{Platform: "linux/arm64", Nodes: 1, Troubled: 1, Why: rollout.WhyRolledBack}, {Platform: "linux/amd64", Nodes: 1, Confirmed: 1}}}}
	s.SetBuckets(st, true, wire.Withdrawals{}, 0)
	s.MarkReady()
	_, _, body := fetch(t, "GET", hs.URL+"/")
	for _, want := range []string{
		`id="rollout-platforms"`,
		`id="platform-linux-amd64">` + "\n" + `<td>linux/amd64</td><td>2</td><td class="confirmed">1/2</td>`,
		`class="platform trouble" id="platform-linux-arm64">` + "\n" + `<td>linux/arm64</td><td>2</td><td class="confirmed">0/2</td>`,
		"<td>1 in the halt</td>",
		`id="rollout-skipped">left out by platform (never targeted by this rollout): linux/arm/v7, 12 nodes: --skip-platform: v2.0.0 has no linux/arm/v7 build`,
		`id="halt-by-platform">1 of 1 linux/arm64 canary rolled back; linux/amd64 canary confirmed`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
}
