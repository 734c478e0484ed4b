package rollout

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

// A rollout and the platforms of its fleet (issue 28, decision 0043): the platform gate refuses
// a version that lacks a build for a node it would target, or whose manifest schema a node's
// host cannot read; the canary batch holds a node of every platform; batches are judged and
// shown per platform.

// UnknownPlatform names, in counts and labels, the nodes whose heartbeat carries no machine
// profile (a host older than issue 12, or one whose first detection has not ended): the gate
// cannot check them, and no canary is owed to them.
const UnknownPlatform = "unknown"

// maxPlatformsNamed bounds the platforms a message or a refusal names; the rest are counted.
const maxPlatformsNamed = 8

// platformOf is a node's platform as its heartbeat's machine profile says it
// (wire.ProfilePlatform), and "" when the heartbeat carries no profile or one naming no os/arch.
func platformOf(hb wire.Heartbeat) (wire.Platform, string) {
	if hb.Profile == nil {
		return wire.Platform{}, ""
	}
	p := wire.ProfilePlatform(*hb.Profile)
	if p.OS == "" || p.Arch == "" {
		return wire.Platform{}, ""
	}
	return p, text(p.String())
}

// platformLabel is p, or UnknownPlatform for "".
func platformLabel(p string) string {
	if p == "" {
		return UnknownPlatform
	}
	return p
}

// release is what the gate needs of the version's manifest: its schema, its platforms, and
// whether it serves a node of a platform (wire.Manifest.For: arm takes the highest variant not
// above the node's).
type release struct {
	version   string
	schema    int
	platforms []string
	serves    func(wire.Platform) bool
}

// releaseOf is m as the gate sees it.
func releaseOf(m wire.Manifest) release {
	r := release{version: m.Version, schema: m.Schema, serves: func(p wire.Platform) bool { _, err := m.For(p); return err == nil }}
	for _, p := range m.PlatformList() {
		r.platforms = append(r.platforms, p.String())
	}
	return r
}

// Why a platform's nodes were left out of a rollout (SkippedPlatform.Why).
const (
	SkipNoBuild = "no-build" // --skip-platform, and the version has no build for it
	SkipAsked   = "asked"    // --skip-platform of a platform the version has a build for
	// SkipOldHosts: --skip-old-hosts, nodes whose hosts cannot read the version's manifest
	// schema (their heartbeats say no manifest_schema of it or more).
	SkipOldHosts = "old-hosts"
)

// SkippedPlatform is nodes of one platform a rollout left out explicitly (--skip-platform,
// --skip-old-hosts), and why: they are not in its node list and are never targeted by it.
type SkippedPlatform struct {
	Platform string `json:"platform"`
	Nodes    int    `json:"nodes"`
	Why      string `json:"why,omitempty"` // SkipNoBuild, SkipAsked or SkipOldHosts
}

// PlatformCount is how many nodes of one platform.
type PlatformCount struct {
	Platform string `json:"platform"`
	Nodes    int    `json:"nodes"`
}

// PlatformError refuses a version that cannot reach every node a rollout or a fleet target
// would target: platforms it has no build for, and nodes whose hosts cannot read its manifest.
type PlatformError struct {
	Version string
	Has     []string        // the platforms the version has builds for
	Missing []PlatformCount // platforms of the fleet it has no build for, and how many nodes each
	// Old are the nodes, by platform, whose hosts read manifests of a schema below Schema.
	Old    []PlatformCount
	Schema int
}

func (e *PlatformError) Error() string {
	var says []string
	if len(e.Missing) > 0 {
		var parts, flags []string
		for i, m := range e.Missing {
			if i == maxPlatformsNamed {
				parts = append(parts, fmt.Sprintf("and %d more platforms without a build", len(e.Missing)-maxPlatformsNamed))
				break
			}
			parts = append(parts, fmt.Sprintf("%s has no %s build; %s %s", e.Version, m.Platform, count(m.Nodes, "node"), runs(m.Nodes, m.Platform)))
			flags = append(flags, "--skip-platform "+m.Platform)
		}
		says = append(says, fmt.Sprintf("%s. Publish a version with %s (%s has %s), or leave %s out with %s",
			strings.Join(parts, "; "), thoseBuilds(len(parts)), e.Version, strings.Join(e.Has, ", "), them(len(parts)), strings.Join(flags, " ")))
	}
	if len(e.Old) > 0 {
		n := 0
		for _, o := range e.Old {
			n += o.Nodes
		}
		says = append(says, fmt.Sprintf("%s's manifest is schema %d, which the hosts of %s cannot read (%s): their heartbeats say no manifest_schema of %d or more. "+
			"Publish it for them as schema 3 with `mesh-release publish --manifest-schema 3`, or leave them out with --skip-old-hosts",
			e.Version, e.Schema, count(n, "node"), countsText(e.Old), e.Schema))
	}
	return strings.Join(says, ". ")
}

func thoseBuilds(n int) string {
	if n == 1 {
		return "that build"
	}
	return "those builds"
}

func them(n int) string {
	if n == 1 {
		return "its nodes"
	}
	return "their nodes"
}

func runs(n int, p string) string {
	if n == 1 {
		return "runs " + p
	}
	return "run " + p
}

// countsText is "linux/amd64: 5, linux/arm64: 2", at most maxPlatformsNamed of them.
func countsText(cs []PlatformCount) string {
	var parts []string
	for i, c := range cs {
		if i == maxPlatformsNamed {
			parts = append(parts, fmt.Sprintf("and %d more platforms", len(cs)-maxPlatformsNamed))
			break
		}
		parts = append(parts, fmt.Sprintf("%s: %d", platformLabel(c.Platform), c.Nodes))
	}
	return strings.Join(parts, ", ")
}

// gate keeps the members a rollout of rel may target and says which it leaves out, or refuses
// (a *PlatformError): a member whose platform rel has no build for, unless --skip-platform
// names it, and — for a manifest of schema wire.ManifestSchemaPlatforms or newer — a member
// whose host cannot read it, unless --skip-old-hosts. A member of no known platform is kept:
// nothing says what it runs, and its host refuses a version it cannot take by name.
// why (when not nil) gets why each member left out is, for --canary-nodes.
func gate(o Options, rel release, members []planMember, why map[string]string) ([]planMember, []SkippedPlatform, error) {
	skip := make(map[string]bool, len(o.SkipPlatforms))
	for _, p := range o.SkipPlatforms {
		if pp, err := wire.ParsePlatform(p); err == nil {
			skip[pp.String()] = true
		}
	}
	asked := map[string]int{}
	missing := map[string]int{}
	old := map[string]int{}
	served := map[string]bool{}
	kept := make([]planMember, 0, len(members))
	for _, m := range members {
		switch {
		case m.platform != "" && skip[m.platform]:
			asked[m.platform]++
			if why != nil {
				why[m.node] = fmt.Sprintf("its platform %s is left out by --skip-platform", m.platform)
			}
			continue
		case m.platform != "" && !servedBy(rel, m, served):
			missing[m.platform]++
			continue
		case rel.schema >= wire.ManifestSchemaPlatforms && m.reads < rel.schema:
			old[platformLabel(m.platform)]++
			if why != nil {
				why[m.node] = fmt.Sprintf("its host cannot read %s's manifest schema %d (--skip-old-hosts)", rel.version, rel.schema)
			}
			continue
		}
		kept = append(kept, m)
	}
	if len(missing) > 0 || (len(old) > 0 && !o.SkipOldHosts) {
		e := &PlatformError{Version: rel.version, Has: rel.platforms, Missing: counts(missing), Schema: rel.schema}
		if !o.SkipOldHosts {
			e.Old = counts(old)
		}
		return nil, nil, e
	}
	var skipped []SkippedPlatform
	for p := range skip {
		why := SkipAsked
		if pp, err := wire.ParsePlatform(p); err == nil && !rel.serves(pp) {
			why = SkipNoBuild
		}
		skipped = append(skipped, SkippedPlatform{Platform: p, Nodes: asked[p], Why: why})
	}
	for _, c := range counts(old) {
		skipped = append(skipped, SkippedPlatform{Platform: c.Platform, Nodes: c.Nodes, Why: SkipOldHosts})
	}
	slices.SortFunc(skipped, func(a, b SkippedPlatform) int {
		return cmp.Or(cmp.Compare(a.Why, b.Why), cmp.Compare(a.Platform, b.Platform))
	})
	return kept, skipped, nil
}

// servedBy reports whether rel has a build for m's platform, remembering the answer per platform.
func servedBy(rel release, m planMember, memo map[string]bool) bool {
	ok, seen := memo[m.platform]
	if !seen {
		ok = rel.serves(m.plat)
		memo[m.platform] = ok
	}
	return ok
}

// counts is by as counts sorted by platform.
func counts(by map[string]int) []PlatformCount {
	out := make([]PlatformCount, 0, len(by))
	for p, n := range by {
		out = append(out, PlatformCount{Platform: p, Nodes: n})
	}
	slices.SortFunc(out, func(a, b PlatformCount) int { return cmp.Compare(a.Platform, b.Platform) })
	return out
}

// platformsOf are the known platforms of members, sorted.
func platformsOf(members []planMember) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range members {
		if m.platform != "" && !seen[m.platform] {
			seen[m.platform] = true
			out = append(out, m.platform)
		}
	}
	slices.Sort(out)
	return out
}

// CanaryError refuses --canary N below the number of platforms a rollout targets: each holds a
// canary.
type CanaryError struct {
	Canary    int
	Platforms []string
}

func (e *CanaryError) Error() string {
	names := e.Platforms
	more := ""
	if len(names) > maxPlatformsNamed {
		names, more = names[:maxPlatformsNamed], fmt.Sprintf(" and %d more", len(e.Platforms)-maxPlatformsNamed)
	}
	return fmt.Sprintf("--canary %d: this rollout targets %d platforms (%s%s) and puts a canary on each: give --canary %d or more",
		e.Canary, len(e.Platforms), strings.Join(names, ", "), more, len(e.Platforms))
}

// chooseCanaries puts the canaries first among members (in the release's hash order, the
// metered ones last when deferred) and says how many they are: the named ones (--canary-nodes)
// when given, else want of them; either way at least one node of every platform, the first of
// it in hash order (a metered one only when the platform has no other), then — for the canaries
// beyond one per platform — nodes of an OS version, then of a kernel, no canary has yet, then
// the rest in hash order. given: --canary was given, and below the platforms it is refused
// rather than raised.
func chooseCanaries(members []planMember, want int, given bool, named []string, isMetered func(planMember) bool, why map[string]string) ([]planMember, int, error) {
	platforms := platformsOf(members)
	chosen := make([]bool, len(members))
	n := 0
	take := func(i int) { chosen[i] = true; n++ }
	covered := map[string]bool{}
	if len(named) > 0 {
		var err error
		if members, err = namedCanariesFirst(members, named, why); err != nil {
			return nil, 0, err
		}
		chosen = make([]bool, len(members))
		for i := range named {
			take(i)
			covered[members[i].platform] = true
		}
	} else if given && want < len(platforms) {
		return nil, 0, &CanaryError{Canary: want, Platforms: platforms}
	}
	for _, p := range platforms {
		if covered[p] {
			continue
		}
		i := firstOf(members, chosen, func(m planMember) bool { return m.platform == p && !isMetered(m) })
		if i < 0 {
			i = firstOf(members, chosen, func(m planMember) bool { return m.platform == p })
		}
		if i >= 0 {
			take(i)
		}
	}
	if len(named) == 0 {
		spread(members, chosen, &n, want, isMetered)
	}
	// The canaries first, each part keeping its order.
	out := make([]planMember, 0, len(members))
	for i, m := range members {
		if chosen[i] {
			out = append(out, m)
		}
	}
	for i, m := range members {
		if !chosen[i] {
			out = append(out, m)
		}
	}
	return out, n, nil
}

// spread takes unmetered members as canaries until *n reaches want: first those of an OS
// version no canary runs, then of a kernel none runs, then any, each pass in hash order.
func spread(members []planMember, chosen []bool, n *int, want int, isMetered func(planMember) bool) {
	oses, kernels := map[string]bool{}, map[string]bool{}
	for i, m := range members {
		if chosen[i] {
			oses[m.os], kernels[m.kernel] = true, true
		}
	}
	for _, fresh := range []func(planMember) bool{
		func(m planMember) bool { return !oses[m.os] },
		func(m planMember) bool { return !kernels[m.kernel] },
		func(planMember) bool { return true },
	} {
		for i, m := range members {
			if *n >= want {
				return
			}
			if chosen[i] || isMetered(m) || !fresh(m) {
				continue
			}
			chosen[i], *n = true, *n+1
			oses[m.os], kernels[m.kernel] = true, true
		}
	}
}

func firstOf(members []planMember, chosen []bool, f func(planMember) bool) int {
	for i, m := range members {
		if !chosen[i] && f(m) {
			return i
		}
	}
	return -1
}

// batchPlatforms counts the nodes of each platform in members (UnknownPlatform for those of
// none), sorted by platform; nil when no member has a known platform.
func batchPlatforms(members []planMember) []PlatformCount {
	by := map[string]int{}
	known := false
	for _, m := range members {
		by[platformLabel(m.platform)]++
		known = known || m.platform != ""
	}
	if !known {
		return nil
	}
	return counts(by)
}

// judgedNode is what per-platform judgement needs of one judged node of a batch.
type judgedNode struct {
	platform          string
	confirmed, soaked bool
	why               string // its trouble (a Why* constant), "" for none
}

// platformOutcomes is how each platform of nodes fared: troubled platforms first, then by
// platform; nil when no node said its platform.
func platformOutcomes(nodes []judgedNode) []PlatformOutcome {
	at := map[string]int{}
	var out []PlatformOutcome
	known := false
	for _, n := range nodes {
		label := platformLabel(n.platform)
		known = known || n.platform != ""
		i, ok := at[label]
		if !ok {
			i = len(out)
			at[label] = i
			out = append(out, PlatformOutcome{Platform: label})
		}
		o := &out[i]
		o.Nodes++
		o.Confirmed += b2i(n.confirmed)
		o.Soaked += b2i(n.soaked)
		if n.why != "" {
			if o.Troubled == 0 {
				o.Why = n.why
			} else if o.Why != n.why {
				o.Why = ""
			}
			o.Troubled++
		}
	}
	if !known {
		return nil
	}
	slices.SortFunc(out, func(a, b PlatformOutcome) int {
		return cmp.Or(-cmp.Compare(min(a.Troubled, 1), min(b.Troubled, 1)), cmp.Compare(a.Platform, b.Platform))
	})
	return out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// outcomesText says how each platform fared, in one clause each: "2 of 2 linux/arm64
// canaries rolled back; linux/amd64 canaries confirmed". canary: the batch is the canaries.
func outcomesText(outs []PlatformOutcome, canary bool) string {
	noun := func(n int) string {
		switch {
		case canary && n == 1:
			return "canary"
		case canary:
			return "canaries"
		case n == 1:
			return "node"
		}
		return "nodes"
	}
	parts := make([]string, 0, len(outs))
	for i, o := range outs {
		if i == maxPlatformsNamed {
			parts = append(parts, fmt.Sprintf("and %d more platforms", len(outs)-maxPlatformsNamed))
			break
		}
		p := oneLine(o.Platform, maxIDText)
		switch {
		case o.Troubled > 0:
			parts = append(parts, fmt.Sprintf("%d of %d %s %s %s", o.Troubled, o.Nodes, p, noun(o.Nodes), troubleWords(o.Why)))
		case o.Confirmed == o.Nodes:
			parts = append(parts, fmt.Sprintf("%s %s confirmed", p, noun(o.Nodes)))
		default:
			parts = append(parts, fmt.Sprintf("%s: %d of %d %s confirmed", p, o.Confirmed, o.Nodes, noun(o.Nodes)))
		}
	}
	return strings.Join(parts, "; ")
}

// troubleWords says a Why* as a verb phrase; "" (mixed reasons) is "showed trouble".
func troubleWords(why string) string {
	switch why {
	case WhyRolledBack:
		return "rolled back"
	case WhyLauncherRolledBack:
		return "had their launcher roll back"
	case WhySilent:
		return "went silent"
	case WhyRestarted:
		return "restarted after confirming"
	case WhyRefused:
		return "refused it"
	case WhyNotConfirmed:
		return "did not confirm in time"
	case WhyTrustExpired:
		return "had their trust expire"
	}
	return "showed trouble"
}

// progressText is a batch's progress by platform: "linux/amd64 1/1 confirmed 1/1 soaked,
// linux/arm64 0/1 confirmed 0/1 soaked"; "" unless the batch holds two platforms or more.
func progressText(outs []PlatformOutcome) string {
	if len(outs) < 2 {
		return ""
	}
	parts := make([]string, 0, len(outs))
	for i, o := range outs {
		if i == maxPlatformsNamed {
			parts = append(parts, fmt.Sprintf("and %d more platforms", len(outs)-maxPlatformsNamed))
			break
		}
		s := fmt.Sprintf("%s %d/%d confirmed %d/%d soaked", oneLine(o.Platform, maxIDText), o.Confirmed, o.Nodes, o.Soaked, o.Nodes)
		if o.Troubled > 0 {
			s += fmt.Sprintf(" %d troubled", o.Troubled)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

// batchOutcomes is how each platform of batch i fares now, by the tracks; reasons (a halt's,
// every troubled node) override the tracks' own trouble.
func (r *runner) batchOutcomes(i int, reasons []NodeReason) []PlatformOutcome {
	why := make(map[string]string, len(reasons))
	for _, rs := range reasons {
		why[rs.Node] = rs.Why
	}
	var nodes []judgedNode
	for _, n := range r.st.BatchNodes(i) {
		t := r.tracks[n]
		if !t.judged() {
			continue
		}
		j := judgedNode{platform: t.platform, confirmed: t.confirmed, soaked: t.soaked, why: why[n]}
		if reasons == nil && t.trouble != nil {
			j.why = t.trouble.Why
		}
		nodes = append(nodes, j)
	}
	return platformOutcomes(nodes)
}

// FleetGate is the platform gate of `mesh-release target --fleet` (o.Version, o.SkipPlatforms,
// o.SkipOldHosts, o.Alive): every node heard within o.Alive falls back to the fleet target, so
// each must be served by the version, or left out explicitly. It returns the nodes left out by
// platform, or a *PlatformError; the version must be published with a manifest hosts read.
func FleetGate(ctx context.Context, js jetstream.JetStream, n wire.Names, o Options) ([]SkippedPlatform, error) {
	o = o.WithDefaults()
	m, err := publishedManifest(ctx, js, n, o.Version, nil)
	if err != nil {
		return nil, err
	}
	entries, err := fleet.Read(ctx, js, n)
	if err != nil {
		return nil, fmt.Errorf("read the heartbeats for the platform gate: %w", err)
	}
	now := time.Now()
	var members []planMember
	for _, e := range newestPerNode(entries) {
		if e.Err == nil && now.Sub(e.Heard) <= o.Alive {
			members = append(members, memberOf(o.Version, e))
		}
	}
	_, skipped, err := gate(o, releaseOf(m), members, nil)
	return skipped, err
}

// SkippedText says nodes left out by platform in one line, for a person: "linux/arm/v7: 12
// nodes (no build)"; "" for none.
func SkippedText(skipped []SkippedPlatform) string {
	return strings.TrimPrefix(skippedWords(State{Skipped: skipped}), "; left out by platform: ")
}

// PlatformLabel is a node's platform as its heartbeat says it, for a count or a label: its
// profile's (wire.ProfilePlatform), printable and bounded, or UnknownPlatform.
func PlatformLabel(hb wire.Heartbeat) string {
	_, p := platformOf(hb)
	return platformLabel(p)
}

// Platforms are the platforms st names — of its batches, of the nodes it left out by
// platform, of its halt — sorted: a bounded set (a planned platform passed the gate, so the
// version has a build for it), what per-platform counts of it are labelled with.
func (st State) Platforms() []string {
	seen := map[string]bool{}
	for _, b := range st.Batches {
		for _, c := range b.Platforms {
			seen[c.Platform] = true
		}
	}
	for _, s := range st.Skipped {
		seen[s.Platform] = true
	}
	if st.Halt != nil {
		for _, o := range st.Halt.Platforms {
			seen[o.Platform] = true
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for p := range seen {
			if !yield(p) {
				return
			}
		}
	})
}

// HaltByPlatform says how each platform of st's halted batch fared ("2 of 2 linux/arm64
// canaries rolled back; linux/amd64 canaries confirmed"); "" when the halt says none by
// platform, or its batch held one platform only (the halt's nodes say it all then).
func (st State) HaltByPlatform() string {
	if st.Halt == nil || len(st.Halt.Platforms) < 2 {
		return ""
	}
	return outcomesText(st.Halt.Platforms, isCanary(st, st.Halt.Batch))
}

// mixedCounts reports whether cs holds two platforms or more: a text about a batch of one
// platform says nothing by platform, as before issue 28.
func mixedCounts(cs []PlatformCount) bool { return len(cs) >= 2 }

// mixedBatches reports whether st's batches hold two platforms or more between them.
func (st State) mixedBatches() bool {
	seen := map[string]bool{}
	for _, b := range st.Batches {
		for _, c := range b.Platforms {
			seen[c.Platform] = true
		}
	}
	return len(seen) >= 2
}

// SkippedWhy says why a platform's nodes were left out of st, for a person.
func (st State) SkippedWhy(s SkippedPlatform) string { return skippedWhy(st, s) }
