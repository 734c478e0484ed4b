package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

// Nodes are counted by platform: the node's own word, an older host's os/arch (arm with no
// variant), "unknown" with no profile, "invalid" for text that is no platform; beyond
// MaxPlatforms values the smallest are summed as "other". --node-metrics labels each node's.
func TestNodesAreCountedByABoundedPlatformLabel(t *testing.T) {
	profile := func(arch, platform string) *wire.Profile {
		return &wire.Profile{OS: "linux", Arch: arch, Platform: platform}
	}
	for _, tc := range []struct {
		name     string
		profiles []*wire.Profile
		want     map[string]float64 // platform label → nodes
		values   int                // distinct values of the label
	}{
		{"a mixed fleet", []*wire.Profile{profile("amd64", "linux/amd64"), profile("amd64", "linux/amd64"), profile("arm64", "linux/arm64"),
			profile("arm", "linux/arm/v7"), profile("arm", ""), nil, profile("x\x1b[2J", "")},
			map[string]float64{"linux/amd64": 2, "linux/arm64": 1, "linux/arm/v7": 2, "unknown": 1, "invalid": 1}, 5},
		{"more platforms than the bound", func() []*wire.Profile {
			ps := []*wire.Profile{profile("amd64", "linux/amd64"), profile("amd64", "linux/amd64")}
			for i := range MaxPlatforms + 4 {
				ps = append(ps, profile(fmt.Sprintf("arch%d", i), ""))
			}
			return ps
		}(), map[string]float64{"linux/amd64": 2, "other": 6}, MaxPlatforms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{NodeMetrics: true})
			now := time.Now()
			for i, p := range tc.profiles {
				node := fmt.Sprintf("n%02d", i)
				e.Update(fleet.Entry{Node: node, Heard: now, Heartbeat: heartbeat(node, func(hb *wire.Heartbeat) { hb.Profile = p })})
			}
			e.MarkReady()
			s := gather(t, e)
			for platform, n := range tc.want {
				name := fmt.Sprintf("mesh_fleet_nodes_by_platform{platform=%q}", platform)
				if got, ok := s[name]; !ok || got != n {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, n)
				}
			}
			values, sum := 0, 0.0
			for name, v := range s {
				if strings.HasPrefix(name, "mesh_fleet_nodes_by_platform{") {
					values++
					sum += v
				}
			}
			if values != tc.values || int(sum) != len(tc.profiles) {
				t.Errorf("%d platform values summing to %v; want %d summing to %d", values, sum, tc.values, len(tc.profiles))
			}
			if _, ok := s[`mesh_node_info{known_good="v1.2.0",launcher="v0.3.0",node="n00",platform="linux/amd64",running="v1.2.0",state="ok"}`]; !ok {
				t.Error("mesh_node_info does not label n00's platform")
			}
		})
	}
}
