package rollout

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

// plan is the fleet of a rollout and its batches, from every node's last heartbeat as of now.
// o must be validated and carry its defaults.
func plan(o Options, entries []fleet.Entry, now time.Time) (nodes, ran []string, batches []Batch, err error) {
	type member struct {
		node, ran string
		hash      [sha256.Size]byte
	}
	var members []member
	why := make(map[string]string) // why a heard node is not in the fleet, for --canary-nodes
	for _, e := range newestPerNode(entries) {
		switch {
		case e.Err != nil:
			why[e.Node] = "its last heartbeat is unreadable"
			continue
		case now.Sub(e.Heard) > o.Alive:
			why[e.Node] = fmt.Sprintf("it was last heard %s ago, longer than --alive %s", roundDur(now.Sub(e.Heard)), o.Alive)
			continue
		case alreadyHas(e.Heartbeat, o.Version):
			why[e.Node] = fmt.Sprintf("its known-good %s is already %s or newer", text(e.Heartbeat.KnownGood), o.Version)
			continue
		}
		r := e.Heartbeat.Running
		if !wire.ValidVersion(r) {
			r = e.Heartbeat.KnownGood
		}
		if !wire.ValidVersion(r) {
			r = ""
		}
		members = append(members, member{node: e.Node, ran: r, hash: sha256.Sum256([]byte(o.Version + "/" + e.Node))})
	}
	// The hash order: deterministic for a release, different from one release to the next.
	sort.Slice(members, func(i, j int) bool {
		if c := strings.Compare(string(members[i].hash[:]), string(members[j].hash[:])); c != 0 {
			return c < 0
		}
		return members[i].node < members[j].node
	})
	if o.Policy == PolicyImmediate {
		for _, m := range members {
			nodes, ran = append(nodes, m.node), append(ran, m.ran)
		}
		return nodes, ran, nil, nil
	}
	canaries := min(o.Canary, len(members))
	if len(o.CanaryNodes) > 0 {
		at := make(map[string]int, len(members))
		for i, m := range members {
			at[m.node] = i
		}
		var first []member
		for _, n := range o.CanaryNodes {
			i, ok := at[n]
			if !ok {
				reason := why[n]
				if reason == "" {
					reason = "it has never heartbeated on this bus"
				}
				return nil, nil, nil, fmt.Errorf("--canary-nodes: %s is not in the fleet of this rollout: %s", n, reason)
			}
			first = append(first, members[i])
		}
		rest := slices.DeleteFunc(slices.Clone(members), func(m member) bool { return slices.Contains(o.CanaryNodes, m.node) })
		members, canaries = append(first, rest...), len(first)
	}
	for _, m := range members {
		nodes, ran = append(nodes, m.node), append(ran, m.ran)
	}
	return nodes, ran, cut(len(nodes), canaries, o.Steps), nil
}

// cut makes the batches of n nodes: the canaries, then each cumulative step of the whole fleet
// (canaries included) that adds a node. The last step is 100%, so the last batch ends at n.
func cut(n, canaries int, steps []int) []Batch {
	if n == 0 {
		return nil
	}
	batches := []Batch{{Name: "canary", End: canaries}}
	if canaries == 0 {
		batches = nil
	}
	end := canaries
	for _, p := range steps {
		e := (p*n + 99) / 100
		if e <= end {
			continue
		}
		batches = append(batches, Batch{Name: fmt.Sprintf("%d%%", p), End: e})
		end = e
	}
	return batches
}

// alreadyHas reports whether a node's known-good is v or newer: it needs no rollout of v.
func alreadyHas(hb wire.Heartbeat, v string) bool {
	return wire.ValidVersion(hb.KnownGood) && semver.Compare(hb.KnownGood, v) >= 0
}

// BatchNodes returns the nodes of batch i (nil when there is none).
func (s State) BatchNodes(i int) []string {
	if i < 0 || i >= len(s.Batches) {
		return nil
	}
	start := 0
	if i > 0 {
		start = s.Batches[i-1].End
	}
	end := s.Batches[i].End
	if start > end || end > len(s.Nodes) {
		return nil
	}
	return s.Nodes[start:end]
}

// batchStart is the index in Nodes of batch i's first node.
func (s State) batchStart(i int) int {
	if i <= 0 {
		return 0
	}
	return s.Batches[i-1].End
}

// newestPerNode keeps one entry per node, the newest heard, in the order nodes first appear: a
// node listed twice would be a member twice, and its batch, counting it twice, could never end.
func newestPerNode(entries []fleet.Entry) []fleet.Entry {
	at := make(map[string]int, len(entries))
	out := make([]fleet.Entry, 0, len(entries))
	for _, e := range entries {
		i, ok := at[e.Node]
		switch {
		case !ok:
			at[e.Node] = len(out)
			out = append(out, e)
		case e.Heard.After(out[i].Heard):
			out[i] = e
		}
	}
	return out
}
