package rollout

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

// plan is the fleet of a rollout and its batches, from every node's last heartbeat as of now,
// for a release with a build for every platform. o must be validated and carry its defaults.
func plan(o Options, entries []fleet.Entry, now time.Time) (nodes, ran []string, batches []Batch, err error) {
	p, err := planFleet(o, anyRelease(o.Version), entries, now)
	return p.nodes, p.ran, p.batches, err
}

// anyRelease is a release of version with a build for every platform, whose manifest every
// host reads.
func anyRelease(version string) release {
	return release{version: version, serves: func(wire.Platform) bool { return true }}
}

// plannedFleet is a plan, how many metered nodes it deferred to its last batch, the nodes it
// left out by platform (gate), and how many canaries it chose.
type plannedFleet struct {
	nodes, ran []string
	batches    []Batch
	metered    int
	skipped    []SkippedPlatform
	canaries   int
	// plan and readers are set when some node reads plans (decision 0047): the plan the
	// batches were cut by, and, index for index with nodes, whether each reads it.
	plan    *PlanRef
	readers []bool
}

// planFleet is plan for rel, saying how many metered nodes (heartbeat link_class metered) it
// deferred to the last batch: unless o.IncludeMetered, they are never canaries (but when named,
// or the only nodes of their platform) and come after every other node, all in the last batch.
// A fleet of metered nodes only is planned as any. Its phases: the fleet's members in hash
// order, the platform gate, the metered ones last, the canaries first (chooseCanaries), then
// the batches cut, each counting its nodes by platform.
func planFleet(o Options, rel release, entries []fleet.Entry, now time.Time) (plannedFleet, error) {
	return planPinned(o, rel, entries, now, nil)
}

// planPinned is planFleet for a fleet in which the nodes of pinned have a target key of their
// own when it is planned: each gets its target from the rollout, as before plans (its batch
// sets the key, which a plan would not win over), though its host reads plans.
func planPinned(o Options, rel release, entries []fleet.Entry, now time.Time, pinned map[string]bool) (plannedFleet, error) {
	all, why := fleetMembers(o, entries, now)
	for i := range all {
		all[i].plans = all[i].plans && !pinned[all[i].node]
	}
	members, skipped, err := gate(o, rel, all, why)
	if err != nil {
		return plannedFleet{}, err
	}
	if o.Policy == PolicyImmediate {
		p := plannedFleet{skipped: skipped}
		for _, m := range members {
			p.nodes, p.ran = append(p.nodes, m.node), append(p.ran, m.ran)
		}
		return p, nil
	}
	// Metered nodes last (each part in hash order), unless every node is metered.
	defer_ := !o.IncludeMetered && slices.ContainsFunc(members, func(m planMember) bool { return !m.metered })
	if defer_ {
		slices.SortStableFunc(members, func(a, b planMember) int {
			switch {
			case a.metered == b.metered:
				return 0
			case b.metered:
				return -1
			}
			return 1
		})
	}
	isMetered := func(m planMember) bool { return defer_ && m.metered }
	var ref *PlanRef
	if slices.ContainsFunc(members, func(m planMember) bool { return m.plans }) {
		ref = &PlanRef{Salt: o.Salt, MeteredLast: defer_, SkipPlatforms: planSkips(skipped)}
		if ref.Salt == "" {
			ref.Salt = wire.PlanSalt(o.Version)
		}
		for _, step := range o.Steps {
			ref.Waves = append(ref.Waves, wire.PercentToPlanScale(step))
		}
		inPlanOrder(members, ref.Salt, isMetered)
	}
	members, canaries, err := chooseCanaries(members, o.Canary, o.CanaryGiven, o.CanaryNodes, isMetered, why)
	if err != nil {
		return plannedFleet{}, err
	}
	p := plannedFleet{skipped: skipped, canaries: canaries, plan: ref}
	for i, m := range members {
		p.nodes, p.ran = append(p.nodes, m.node), append(p.ran, m.ran)
		if i >= canaries && isMetered(m) {
			p.metered++
		}
	}
	if ref != nil {
		if canaries > wire.MaxPlanCanaries {
			return plannedFleet{}, fmt.Errorf("%d canaries: a rollout plan names at most %d", canaries, wire.MaxPlanCanaries)
		}
		ref.Canaries = canaries
		p.readers = make([]bool, len(members))
		for i, m := range members {
			p.readers[i] = m.plans
		}
		p.batches = cutWaves(members, canaries, p.metered, ref.Waves, o.Steps)
	} else {
		p.batches = cut(len(p.nodes)-p.metered, canaries, o.Steps)
	}
	if ref == nil && p.metered > 0 && len(p.batches) > 0 {
		p.batches[len(p.batches)-1].End = len(p.nodes) // the metered nodes join the last batch
	}
	start := 0
	for i := range p.batches {
		p.batches[i].Platforms = batchPlatforms(members[start:p.batches[i].End])
		start = p.batches[i].End
	}
	return p, nil
}

// planMember is a node of a rollout's fleet as planning sees it: its platform (plat, and
// platform as text, "" when its heartbeat says none), the OS version and kernel its profile
// reports, and the newest manifest schema its host reads (0: it does not say, schema 3 or older).
type planMember struct {
	node, ran  string
	hash       [sha256.Size]byte
	metered    bool
	plat       wire.Platform
	platform   string
	os, kernel string
	reads      int
	// plans: its heartbeat says it reads rollout plans; bucket is where the plan's salt puts
	// it (wire.PlanBucket), set when the rollout has a plan.
	plans  bool
	bucket uint32
}

// fleetMembers are the nodes of a rollout of o.Version as of now, in the hash order of the
// release — deterministic for a release, different from one release to the next — and why
// each heard node left out is not a member, for --canary-nodes.
func fleetMembers(o Options, entries []fleet.Entry, now time.Time) ([]planMember, map[string]string) {
	members := make([]planMember, 0, len(entries))
	why := make(map[string]string)
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
		members = append(members, memberOf(o.Version, e))
	}
	slices.SortFunc(members, func(a, b planMember) int {
		return cmp.Or(bytes.Compare(a.hash[:], b.hash[:]), strings.Compare(a.node, b.node))
	})
	return members, why
}

// memberOf is e's node as a member of a rollout of version.
func memberOf(version string, e fleet.Entry) planMember {
	hb := e.Heartbeat
	r := hb.Running
	if !wire.ValidVersion(r) {
		r = hb.KnownGood
	}
	if !wire.ValidVersion(r) {
		r = ""
	}
	m := planMember{node: e.Node, ran: r, hash: sha256.Sum256([]byte(version + "/" + e.Node)),
		metered: hb.LinkClass == wire.LinkMetered, reads: hb.ManifestSchema, plans: hb.Plans >= wire.PlanSchema}
	m.plat, m.platform = platformOf(hb)
	if pr := hb.Profile; pr != nil {
		m.os, m.kernel = text(pr.OSID+" "+pr.OSVersion), text(pr.Kernel)
	}
	return m
}

// namedCanariesFirst puts the nodes named by --canary-nodes first, in the order given; one that
// is not a member is refused with why (from fleetMembers).
func namedCanariesFirst(members []planMember, named []string, why map[string]string) ([]planMember, error) {
	at := make(map[string]int, len(members))
	for i, m := range members {
		at[m.node] = i
	}
	var first []planMember
	for _, n := range named {
		i, ok := at[n]
		if !ok {
			reason := why[n]
			if reason == "" {
				reason = "it has never heartbeated on this bus"
			}
			return nil, fmt.Errorf("--canary-nodes: %s is not in the fleet of this rollout: %s", n, reason)
		}
		first = append(first, members[i])
	}
	rest := slices.DeleteFunc(slices.Clone(members), func(m planMember) bool { return slices.Contains(named, m.node) })
	return append(first, rest...), nil
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

// inPlanOrder puts members in the order of the plan salted with salt (wire.PlanBucket, then the
// node id), the metered ones (isMetered) last: the order in which the plan's waves take them.
func inPlanOrder(members []planMember, salt string, isMetered func(planMember) bool) {
	for i := range members {
		members[i].bucket = wire.PlanBucket(salt, members[i].node)
	}
	slices.SortFunc(members, func(a, b planMember) int {
		am, bm := isMetered(a), isMetered(b)
		switch {
		case am && !bm:
			return 1
		case bm && !am:
			return -1
		}
		return cmp.Or(cmp.Compare(a.bucket, b.bucket), strings.Compare(a.node, b.node))
	})
}

// cutWaves makes the batches of a rollout with a plan: the canaries (the first canaries of
// members, plan batch 1), then each wave that holds a node not in an earlier batch — exactly the
// nodes a node evaluating the plan finds itself in (wire.Plan.BatchOf): those whose bucket is
// below the wave's fraction, and the metered ones (the last metered of members) in the last.
// A wave that adds no node is no batch: the next batch's In steps over it.
func cutWaves(members []planMember, canaries, metered int, waves []uint32, steps []int) []Batch {
	if len(members) == 0 {
		return nil
	}
	var batches []Batch
	if canaries > 0 {
		batches = append(batches, Batch{Name: "canary", End: canaries, In: 1})
	}
	rest := members[canaries:]
	plain := len(rest) - metered
	end, j := canaries, 0
	for k, w := range waves {
		for j < plain && rest[j].bucket < w {
			j++
		}
		e := canaries + j
		if k == len(waves)-1 {
			e = len(members)
		}
		if e <= end {
			continue
		}
		batches = append(batches, Batch{Name: fmt.Sprintf("%d%%", steps[k]), End: e, In: k + 2})
		end = e
	}
	return batches
}

// planSkips are the platforms a plan leaves out: those skipped by platform (not the old hosts,
// whom no plan reaches).
func planSkips(skipped []SkippedPlatform) []string {
	var out []string
	for _, s := range skipped {
		if s.Why == SkipOldHosts {
			continue
		}
		if p, err := wire.ParsePlatform(s.Platform); err == nil && !slices.Contains(out, p.String()) {
			out = append(out, p.String())
		}
	}
	return out
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
