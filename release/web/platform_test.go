package web

import (
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
)

// The node table has each node's platform; a mixed fleet is counted by platform above it (an
// older host's arm without a variant, a node with no profile "unknown", the nodes in trouble
// said by platform), a fleet of one platform is not.
func TestFleetPageShowsEachNodesPlatformAndCountsAMixedFleet(t *testing.T) {
	type node struct{ name, arch, platform string } // arch "": no profile
	for _, tc := range []struct {
		name   string
		nodes  []node
		cells  []string
		counts string // the line above the table; "" for none
	}{
		{"one platform", []node{{"a1", "amd64", "linux/amd64"}, {"a2", "amd64", "linux/amd64"}},
			[]string{`<td class="node-platform">linux/amd64</td>`}, ""},
		{"mixed", []node{{"a1", "amd64", "linux/amd64"}, {"a2", "amd64", "linux/amd64"}, {"b1", "arm64", "linux/arm64"}, {"c1", "arm", ""}, {"d1", "", ""}},
			[]string{`<td class="node-platform">linux/arm64</td>`, `<td class="node-platform">linux/arm/v7</td>`, `<td class="node-platform">-</td>`},
			"by platform: 2 linux/amd64, 1 linux/arm/v7, 1 linux/arm64 (1 rolled back), 1 unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, hs := newTestServer(t)
			for _, n := range tc.nodes {
				e := running(n.name, "v1.2.0")
				if n.name == "b1" {
					e.Heartbeat.Rollbacks = []wire.Rollback{{From: "v1.3.0", To: "v1.2.0", At: now, Reason: "exited 2"}}
					e.Heartbeat.Target = "v1.3.0"
				}
				if n.arch != "" {
					e.Heartbeat.Profile = &wire.Profile{OS: "linux", Arch: n.arch, Platform: n.platform}
				}
				s.Update(e)
			}
			s.MarkReady()
			_, _, body := fetch(t, "GET", hs.URL+"/")
			for _, want := range append(tc.cells, "<th>platform</th>") {
				if !strings.Contains(body, want) {
					t.Errorf("the page lacks %q:\n%s", want, body)
				}
			}
			counts := ""
			if i := strings.Index(body, `id="fleet-platforms">`); i >= 0 {
				counts = body[i+len(`id="fleet-platforms">`):]
				counts = counts[:strings.Index(counts, "</p>")]
				counts = strings.NewReplacer(`<span class="platform-count">`, "", "</span>", "").Replace(counts)
			}
			if counts != tc.counts {
				t.Errorf("counts %q, want %q", counts, tc.counts)
			}
		})
	}
}
