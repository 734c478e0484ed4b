package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

// on is a node heard a second ago on platform p (its profile saying it, on osv and kernel),
// whose host reads manifest schema 4.
func on(node, p, osv, kernel string) fleet.Entry {
	e := heardAgo(node, "v1.0.0", time.Second)
	pp, _ := wire.ParsePlatform(p)
	e.Heartbeat.Profile = &wire.Profile{OS: pp.OS, Arch: pp.Arch, Platform: p, OSID: "debian", OSVersion: osv, Kernel: kernel}
	e.Heartbeat.ManifestSchema = wire.ManifestSchemaPlatforms
	return e
}

// mixed is n nodes of each platform given, named <slug>-<i>, on Debian 12 and kernel 6.1.
func mixed(n map[string]int) []fleet.Entry {
	var es []fleet.Entry
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range n {
			if !yield(p) {
				return
			}
		}
	}) {
		pp, _ := wire.ParsePlatform(p)
		for i := range n[p] {
			es = append(es, on(fmt.Sprintf("%s-%02d", pp.Slug(), i), p, "12", "6.1.0"))
		}
	}
	return es
}

func platformOfNode(es []fleet.Entry) map[string]string {
	out := map[string]string{}
	for _, e := range es {
		_, out[e.Node] = platformOf(e.Heartbeat)
	}
	return out
}

// The issue (§2): a version lacking a platform of a node it would target is refused, naming
// the platform and how many nodes run it; --skip-platform leaves those nodes out, recorded;
// a schema 4 version is refused for hosts that cannot read it unless --skip-old-hosts; a node
// that says no platform passes (nothing says what it runs).
func TestThePlatformGateRefusesAVersionMissingAPlatformOfTheFleetUnlessItIsSkipped(t *testing.T) {
	fleet3 := mixed(map[string]int{"linux/amd64": 3, "linux/arm64": 2, "linux/arm/v7": 12})
	old := append(mixed(map[string]int{"linux/amd64": 2}), heardAgo("no-profile", "v1.0.0", time.Second))
	old[0].Heartbeat.ManifestSchema = 0 // a host from before schema 4
	twoPlatforms := releaseOf(manifestOf(t, "v1.4.0", "linux/amd64", "linux/arm64"))
	withV6 := releaseOf(manifestOf(t, "v1.4.0", "linux/amd64", "linux/arm/v6", "linux/arm64"))
	for _, tc := range []struct {
		name    string
		rel     release
		es      []fleet.Entry
		o       func(*Options)
		nodes   int
		skipped []SkippedPlatform
		refuse  []string // substrings of the refusal; nil: planned
	}{
		{name: "a platform the version lacks is refused by name, with its nodes", rel: twoPlatforms, es: fleet3,
			refuse: []string{"v1.4.0 has no linux/arm/v7 build; 12 nodes run linux/arm/v7", "v1.4.0 has linux/amd64, linux/arm64", "--skip-platform linux/arm/v7"}},
		{name: "--skip-platform leaves its nodes out, recorded", rel: twoPlatforms, es: fleet3,
			o:     func(o *Options) { o.SkipPlatforms = []string{"linux/arm/v7"} },
			nodes: 5, skipped: []SkippedPlatform{{Platform: "linux/arm/v7", Nodes: 12, Why: SkipNoBuild}}},
		{name: "skipping a platform the version has is recorded as asked", rel: twoPlatforms, es: fleet3,
			o:     func(o *Options) { o.SkipPlatforms = []string{"linux/arm/v7", "linux/arm64"} },
			nodes: 3, skipped: []SkippedPlatform{{Platform: "linux/arm64", Nodes: 2, Why: SkipAsked}, {Platform: "linux/arm/v7", Nodes: 12, Why: SkipNoBuild}}},
		{name: "an arm/v7 node takes an arm/v6 build", rel: withV6, es: fleet3, nodes: 17},
		{name: "a schema 4 version is refused for hosts that cannot read it", rel: twoPlatforms, es: old,
			refuse: []string{"v1.4.0's manifest is schema 4, which the hosts of 2 nodes cannot read (linux/amd64: 1, unknown: 1)", "`mesh-release publish --manifest-schema 3`", "--skip-old-hosts"}},
		{name: "--skip-old-hosts leaves them out, recorded by platform", rel: twoPlatforms, es: old,
			o:     func(o *Options) { o.SkipOldHosts = true },
			nodes: 1, skipped: []SkippedPlatform{{Platform: "linux/amd64", Nodes: 1, Why: SkipOldHosts}, {Platform: UnknownPlatform, Nodes: 1, Why: SkipOldHosts}}},
		{name: "a schema 3 version: old hosts read it, a node saying no platform passes", rel: releaseOf(wire.Manifest{Schema: 3, Version: "v1.4.0", OS: "linux", Arch: "amd64"}),
			es: old, nodes: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Version: "v1.4.0"}
			if tc.o != nil {
				tc.o(&o)
			}
			p, err := planFleet(o.WithDefaults(), tc.rel, tc.es, planNow)
			if tc.refuse != nil {
				var pe *PlatformError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a *PlatformError", err)
				}
				for _, want := range tc.refuse {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.nodes) != tc.nodes || !slices.Equal(p.skipped, tc.skipped) {
				t.Errorf("%d nodes, skipped %+v; want %d, %+v", len(p.nodes), p.skipped, tc.nodes, tc.skipped)
			}
		})
	}
}

// The issue (§3): the canary batch holds a node of every platform the rollout targets, each the
// first of its platform in the release's hash order (so a new release picks others), then nodes
// of an OS version and a kernel no canary runs; --canary below the platforms is refused with
// the number needed, and the default is raised to it; a platform of metered nodes only gets a
// metered canary; named canaries get one of each platform they miss.
func TestTheCanaryBatchHoldsANodeOfEveryPlatform(t *testing.T) {
	two := mixed(map[string]int{"linux/amd64": 10, "linux/arm64": 2})
	three := mixed(map[string]int{"linux/amd64": 4, "linux/arm64": 2, "linux/arm/v7": 2})
	spreadOut := append(mixed(map[string]int{"linux/amd64": 6}),
		on("trixie", "linux/amd64", "13", "6.1.0"), on("new-kernel", "linux/amd64", "12", "6.12.0"))
	meteredArm := mixed(map[string]int{"linux/amd64": 4, "linux/arm64": 1})
	meteredArm[4].Heartbeat.LinkClass = wire.LinkMetered
	for _, tc := range []struct {
		name      string
		es        []fleet.Entry
		o         func(*Options)
		canaries  int
		platforms map[string]int // of the canary batch
		must      []string       // nodes among the canaries
		refuse    string
	}{
		{name: "two platforms, two canaries: one of each", es: two, canaries: 2,
			platforms: map[string]int{"linux/amd64": 1, "linux/arm64": 1}},
		{name: "three platforms: the default of 2 is raised to 3", es: three, canaries: 3,
			platforms: map[string]int{"linux/amd64": 1, "linux/arm64": 1, "linux/arm/v7": 1}},
		{name: "--canary 2 given for three platforms is refused with the number needed", es: three,
			o: func(o *Options) { o.Canary, o.CanaryGiven = 2, true }, refuse: "--canary 2: this rollout targets 3 platforms (linux/amd64, linux/arm/v7, linux/arm64) and puts a canary on each: give --canary 3 or more"},
		{name: "more canaries go to an OS version, then a kernel, no canary runs", es: spreadOut,
			o: func(o *Options) { o.Canary = 3 }, canaries: 3, must: []string{"trixie", "new-kernel"}},
		{name: "a platform of metered nodes only gets its metered canary", es: meteredArm, canaries: 2,
			platforms: map[string]int{"linux/amd64": 1, "linux/arm64": 1}, must: []string{"linux-arm64-00"}},
		{name: "a named canary of a platform left out is refused, saying so", es: three,
			o: func(o *Options) {
				o.CanaryNodes, o.SkipPlatforms = []string{"linux-arm-v7-00"}, []string{"linux/arm/v7"}
			},
			refuse: "--canary-nodes: linux-arm-v7-00 is not in the fleet of this rollout: its platform linux/arm/v7 is left out by --skip-platform"},
		{name: "named canaries get one of each platform they miss", es: three,
			o: func(o *Options) { o.CanaryNodes = []string{"linux-amd64-03"} }, canaries: 3,
			platforms: map[string]int{"linux/amd64": 1, "linux/arm64": 1, "linux/arm/v7": 1}, must: []string{"linux-amd64-03"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Version: "v1.4.0", Steps: []int{50, 100}}
			if tc.o != nil {
				tc.o(&o)
			}
			o = o.WithDefaults()
			p, err := planFleet(o, anyRelease(o.Version), tc.es, planNow)
			if tc.refuse != "" {
				if err == nil || err.Error() != tc.refuse {
					t.Fatalf("err = %v\nwant %s", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			canaries := p.nodes[:p.batches[0].End]
			if p.batches[0].Name != "canary" || len(canaries) != tc.canaries {
				t.Fatalf("canaries %v (%s), want %d", canaries, ends(p.batches), tc.canaries)
			}
			if tc.platforms != nil {
				got := map[string]int{}
				for _, c := range p.batches[0].Platforms {
					got[c.Platform] = c.Nodes
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.platforms) {
					t.Errorf("the canaries' platforms %v, want %v", got, tc.platforms)
				}
			}
			for _, n := range tc.must {
				if !slices.Contains(canaries, n) {
					t.Errorf("%s is not a canary: %v", n, canaries)
				}
			}
		})
	}
}

// The canaries are chosen from the release: each platform's is the first of it in the hash
// order of that version, so releases differ in their first nodes, and one release plans the
// same every time.
func TestEachPlatformsCanaryIsTheFirstOfItInTheReleasesHashOrder(t *testing.T) {
	es := mixed(map[string]int{"linux/amd64": 20, "linux/arm64": 20})
	plat := platformOfNode(es)
	var ids []string
	for _, e := range es {
		ids = append(ids, e.Node)
	}
	seen := map[string]bool{}
	for _, v := range []string{"v1.4.0", "v1.5.0", "v1.6.0", "v1.7.0"} {
		o := Options{Version: v}.WithDefaults()
		p, err := planFleet(o, anyRelease(v), es, planNow)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		got := map[string]bool{}
		for _, n := range hashOrder(v, ids) {
			if !got[plat[n]] {
				got[plat[n]] = true
				want = append(want, n)
			}
		}
		canaries := p.nodes[:p.batches[0].End]
		if !slices.Equal(slices.Sorted(slices.Values(canaries)), slices.Sorted(slices.Values(want))) {
			t.Errorf("%s: canaries %v, want the first of each platform in its hash order %v", v, canaries, want)
		}
		again, _ := planFleet(o, anyRelease(v), es, planNow)
		if !slices.Equal(again.nodes, p.nodes) {
			t.Errorf("%s planned twice differs", v)
		}
		seen[strings.Join(canaries, ",")] = true
	}
	if len(seen) < 2 {
		t.Errorf("four releases chose the same canaries: %v", seen)
	}
}

// The issue (§3): a halt says which platform failed — each platform of the batch in one clause,
// the troubled ones first; a platform's clause names the shared reason, or "showed trouble".
func TestAHaltSaysHowEachPlatformFared(t *testing.T) {
	amd, arm := "linux/amd64", "linux/arm64"
	for _, tc := range []struct {
		name   string
		nodes  []judgedNode
		canary bool
		want   string
	}{
		{"the issue's canaries", []judgedNode{
			{platform: amd, confirmed: true}, {platform: arm, why: WhyRolledBack}, {platform: amd, confirmed: true}, {platform: arm, why: WhyRolledBack}},
			true, "2 of 2 linux/arm64 canaries rolled back; linux/amd64 canaries confirmed"},
		{"one canary each, the amd64 one not confirmed yet", []judgedNode{{platform: amd}, {platform: arm, why: WhySilent}},
			true, "1 of 1 linux/arm64 canary went silent; linux/amd64: 0 of 1 canary confirmed"},
		{"mixed reasons, two platforms troubled, a later batch", []judgedNode{
			{platform: arm, why: WhyRolledBack}, {platform: arm, why: WhyRefused}, {platform: "linux/arm/v7", why: WhyNotConfirmed}, {platform: amd, confirmed: true}},
			false, "1 of 1 linux/arm/v7 node did not confirm in time; 2 of 2 linux/arm64 nodes showed trouble; linux/amd64 node confirmed"},
		{"a node that said no platform is counted as unknown", []judgedNode{{platform: amd, why: WhyRestarted}, {confirmed: true}},
			false, "1 of 1 linux/amd64 node restarted after confirming; unknown node confirmed"},
		{"no node said its platform: nothing by platform", []judgedNode{{why: WhyRolledBack}, {confirmed: true}}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomesText(platformOutcomes(tc.nodes), tc.canary); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A halted rollout of a mixed fleet says, in its halt event, its status and its one-line
// summary, which platform failed; status counts each batch's nodes by platform and reports the
// platforms left out; the started event names the canaries' platforms and those left out.
func TestAMixedFleetsRolloutSaysItsPlatformsInEveryText(t *testing.T) {
	st := sampleHalted()
	st.Batches[0].Platforms = []PlatformCount{{Platform: "linux/amd64", Nodes: 1}, {Platform: "linux/arm64", Nodes: 1}}
	st.Batches[2].Platforms = []PlatformCount{{Platform: "linux/amd64", Nodes: 2}, {Platform: "linux/arm64", Nodes: 1}}
	st.Skipped = []SkippedPlatform{{Platform: "linux/arm/v7", Nodes: 12, Why: SkipNoBuild}}
	st.Halt.Platforms = platformOutcomes([]judgedNode{{platform: "linux/amd64", confirmed: true}, {platform: "linux/arm64", why: WhyRolledBack}})
	var status strings.Builder
	if err := WriteStatus(&status, st, at(13, 16, 0)); err != nil {
		t.Fatal(err)
	}
	running := st
	running.Status, running.Halt = StatusRunning, nil
	for _, tc := range []struct{ what, got, want string }{
		{"halted event", haltedMessage(st, 0, 1, 2), "HALTED in batch 1/3 (canary): 1 of 1 linux/arm64 canary rolled back; linux/amd64 canary confirmed; v1.2.0 was not set"},
		{"status, halt", status.String(), "\n  by platform: 1 of 1 linux/arm64 canary rolled back; linux/amd64 canary confirmed\n"},
		{"status, batches", status.String(), "  1/3  canary  2 nodes (linux/amd64 1, linux/arm64 1)  HALTED 13:15:02"},
		{"status, fleet", status.String(), "  fleet    6 nodes in 3 batches, 1 left out, 12 left out by platform (below)\n"},
		{"status, left out by platform", status.String(), "  linux/arm/v7  12 nodes  --skip-platform: v1.2.0 has no linux/arm/v7 build\n"},
		{"summary", Summary(st, at(13, 16, 0)), "HALTED in batch 1/3 (canary) at 13:15 — 1 of 1 linux/arm64 canary rolled back ("},
		{"started", startedMessage(running), "(canary node-a, node-b (linux/amd64 1, linux/arm64 1); then 50%, 100%)"},
		{"started, left out", startedMessage(running), "; left out by platform: linux/arm/v7 (12 nodes, no build)"},
		{"batch", batchMessage(running, 2, []string{"node-d"}, nil, 0), "targets set for 1 node (the batch: linux/amd64 2, linux/arm64 1): node-d"},
	} {
		if !strings.Contains(tc.got, tc.want) {
			t.Errorf("%s:\n%s\ndoes not say\n%s", tc.what, tc.got, tc.want)
		}
	}
}

// Progress by platform is said only when a batch holds two platforms or more.
func TestProgressIsSaidByPlatformWhenABatchHoldsSeveral(t *testing.T) {
	for _, tc := range []struct {
		name string
		outs []PlatformOutcome
		want string
	}{
		{"one platform: nothing more", []PlatformOutcome{{Platform: "linux/amd64", Nodes: 3, Confirmed: 1}}, ""},
		{"two", []PlatformOutcome{{Platform: "linux/amd64", Nodes: 2, Confirmed: 2, Soaked: 1}, {Platform: "linux/arm64", Nodes: 1, Troubled: 1}},
			"linux/amd64 2/2 confirmed 1/2 soaked, linux/arm64 0/1 confirmed 0/1 soaked 1 troubled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressText(tc.outs); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// BenchmarkPlanHundredThousandMixedNodes plans a rollout of 100,000 nodes of three platforms,
// four OS versions and six kernels, with 10 canaries: the gate, the canaries spread over them,
// the batches counted by platform.
func BenchmarkPlanHundredThousandMixedNodes(b *testing.B) {
	platforms := []string{"linux/amd64", "linux/arm64", "linux/arm/v7"}
	var es []fleet.Entry
	for i := range 100_000 {
		es = append(es, on(fmt.Sprintf("web-%06d.eu-west-1", i), platforms[i%3], fmt.Sprint(10+i%4), fmt.Sprintf("6.%d.0", i%6)))
	}
	o := Options{Version: "v1.4.0", Canary: 10, Steps: []int{1, 10, 50, 100}}.WithDefaults()
	rel := releaseOf(manifestOf(b, "v1.4.0", platforms...))
	for b.Loop() {
		p, err := planFleet(o, rel, es, planNow)
		if err != nil || len(p.nodes) != 100_000 || p.canaries != 10 {
			b.Fatalf("%d nodes, %d canaries, %v", len(p.nodes), p.canaries, err)
		}
	}
}

// A fleet of one platform reads as before issue 28: no text says anything by platform.
func TestARolloutOfOnePlatformSaysNothingByPlatform(t *testing.T) {
	st := sampleHalted()
	one := []PlatformCount{{Platform: "linux/amd64", Nodes: 2}}
	st.Batches[0].Platforms, st.Batches[2].Platforms = one, []PlatformCount{{Platform: "linux/amd64", Nodes: 3}}
	st.Halt.Platforms = platformOutcomes([]judgedNode{{platform: "linux/amd64", why: WhyRolledBack}, {platform: "linux/amd64", why: WhySilent}})
	var status strings.Builder
	if err := WriteStatus(&status, st, at(13, 16, 0)); err != nil {
		t.Fatal(err)
	}
	running := st
	running.Status, running.Halt = StatusRunning, nil
	for what, got := range map[string]string{
		"halted": haltedMessage(st, 0, 2, 2), "status": status.String(), "summary": Summary(st, at(13, 16, 0)),
		"started": startedMessage(running), "batch": batchMessage(running, 0, []string{"node-a", "node-b"}, nil, 0),
	} {
		if strings.Contains(got, "linux/") {
			t.Errorf("%s speaks of platforms: %s", what, got)
		}
	}
	if want := "HALTED in batch 1/3 (canary): 2 of 2 nodes showed trouble;"; !strings.Contains(haltedMessage(st, 0, 2, 2), want) {
		t.Errorf("halted: %q, want %q", haltedMessage(st, 0, 2, 2), want)
	}
}
