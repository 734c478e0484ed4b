package web

import (
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// The rollout section's platforms (issue 28): each platform's progress over the whole rollout,
// the platforms it left out, and how each fared in a halt.

// platformView is one platform of the current rollout: its nodes as planned, the confirmed
// among those of the batches begun (by the platform their heartbeat says, as the metrics count
// them), and its nodes that showed trouble in the halt.
type platformView struct {
	Platform, Slug             string
	Nodes, Confirmed, Troubled int
}

// skippedView is a platform the rollout left out, how many nodes, and why.
type skippedView struct {
	Platform, Why string
	Nodes         int
}

// maxPlatformRows bounds the platforms drawn, each list: a manifest lists at most as many.
const maxPlatformRows = wire.MaxPlatforms

// rolloutPlatforms is st by platform: nil for a rollout whose nodes said no platform.
func rolloutPlatforms(st rollout.State, byNode map[string]*wire.Heartbeat) ([]platformView, []skippedView) {
	var skipped []skippedView
	for _, s := range st.Skipped[:min(len(st.Skipped), maxPlatformRows)] {
		skipped = append(skipped, skippedView{Platform: s.Platform, Nodes: s.Nodes, Why: st.SkippedWhy(s)})
	}
	at := map[string]int{}
	var out []platformView
	var other platformView // past maxPlatformRows: counted nowhere drawn
	view := func(p string) *platformView {
		i, ok := at[p]
		if !ok && len(out) == maxPlatformRows {
			return &other
		}
		if !ok {
			i = len(out)
			at[p] = i
			out = append(out, platformView{Platform: p, Slug: slug(p)})
		}
		return &out[i]
	}
	for i, bt := range st.Batches {
		for _, c := range bt.Platforms {
			view(c.Platform).Nodes += c.Nodes
		}
		if bt.Started.IsZero() || i > st.Current {
			continue
		}
		for _, n := range st.BatchNodes(i) {
			hb, ok := byNode[n]
			if !ok || hb.State != wire.StateRunning || hb.Running != st.Version || hb.KnownGood != st.Version {
				continue
			}
			if j, known := at[rollout.PlatformLabel(*hb)]; known {
				out[j].Confirmed++
			}
		}
	}
	if h := st.Halt; h != nil {
		for _, o := range h.Platforms {
			if j, ok := at[o.Platform]; ok {
				out[j].Troubled = o.Troubled
			}
		}
	}
	return out, skipped
}

// slug is a platform as an element id: linux/arm/v7 is linux-arm-v7.
func slug(p string) string {
	b := []byte(p)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}
