package rollout

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

var planNow = time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC)

// heardAgo is a node's last heartbeat, heard ago, running and known-good on running.
func heardAgo(node, running string, ago time.Duration) fleet.Entry {
	return fleet.Entry{Node: node, Heard: planNow.Add(-ago),
		Heartbeat: wire.Heartbeat{Node: node, State: wire.StateRunning, Running: running, KnownGood: running}}
}

func entries(n int) []fleet.Entry {
	var es []fleet.Entry
	for i := 0; i < n; i++ {
		es = append(es, heardAgo(fmt.Sprintf("n%04d", i), "v1.0.0", time.Second))
	}
	return es
}

// hashOrder is the nodes sorted by sha256(version/node), as 0006 says.
func hashOrder(version string, nodes []string) []string {
	out := slices.Clone(nodes)
	sort.Slice(out, func(i, j int) bool {
		a, b := sha256.Sum256([]byte(version+"/"+out[i])), sha256.Sum256([]byte(version+"/"+out[j]))
		return string(a[:]) < string(b[:])
	})
	return out
}

func ends(bs []Batch) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, fmt.Sprintf("%s:%d", b.Name, b.End))
	}
	return strings.Join(parts, " ")
}

func TestPlanningTheFleetAndItsBatches(t *testing.T) {
	six := entries(6)
	var sixIDs []string
	for _, e := range six {
		sixIDs = append(sixIDs, e.Node)
	}
	mixed := []fleet.Entry{
		heardAgo("old", "v1.0.0", time.Minute),
		heardAgo("has-it", "v1.1.0", time.Minute),
		heardAgo("newer", "v1.2.0", time.Minute),
		heardAgo("gone", "v1.0.0", 2*time.Hour),
		{Node: "garbled", Heard: planNow, Err: errors.New("heartbeat: schema 2 is not supported")},
		heardAgo("old2", "v0.9.0", time.Minute),
	}
	for _, tc := range []struct {
		name    string
		o       func(*Options)
		es      []fleet.Entry
		nodes   []string // nil: not checked
		batches string
		err     string
	}{
		{name: "canaries are the smallest hashes, the rest follow in hash order", es: six,
			nodes: hashOrder("v1.1.0", sixIDs), batches: "canary:2 50%:3 100%:6"},
		{name: "steps are cumulative shares of the whole fleet, canaries included", es: entries(100),
			o: func(o *Options) { o.Steps = []int{10, 50, 100} }, batches: "canary:2 10%:10 50%:50 100%:100"},
		{name: "a step adding no node is dropped", es: entries(10),
			o: func(o *Options) { o.Canary = 3; o.Steps = []int{1, 10, 30, 31, 100} }, batches: "canary:3 31%:4 100%:10"},
		{name: "named canaries go first, in the order named", es: six,
			o:       func(o *Options) { o.CanaryNodes = []string{"n0004", "n0001"} },
			nodes:   append([]string{"n0004", "n0001"}, slices.DeleteFunc(hashOrder("v1.1.0", sixIDs), func(n string) bool { return n == "n0004" || n == "n0001" })...),
			batches: "canary:2 50%:3 100%:6"},
		{name: "a named canary not in the fleet is refused with why", es: mixed,
			o: func(o *Options) { o.CanaryNodes = []string{"has-it"} }, err: "--canary-nodes: has-it is not in the fleet of this rollout: its known-good v1.1.0 is already v1.1.0 or newer"},
		{name: "a named canary never heard is refused", es: six,
			o: func(o *Options) { o.CanaryNodes = []string{"nobody"} }, err: "nobody is not in the fleet of this rollout: it has never heartbeated"},
		{name: "the fleet leaves out known-good at or past the version, the unheard and the unreadable", es: mixed,
			nodes: hashOrder("v1.1.0", []string{"old", "old2"}), batches: "canary:2"},
		{name: "one node is one canary batch", es: entries(1), batches: "canary:1"},
		{name: "no node: no batch", es: mixed[1:3], nodes: []string{}, batches: ""},
		{name: "a thousand nodes", es: entries(1000), o: func(o *Options) { o.Steps = []int{1, 10, 50, 100} },
			batches: "canary:2 1%:10 10%:100 50%:500 100%:1000"},
		{name: "immediate: every node, no batch", es: six, o: func(o *Options) { o.Policy = PolicyImmediate },
			nodes: hashOrder("v1.1.0", sixIDs), batches: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Version: "v1.1.0", Steps: []int{50, 100}}
			if tc.o != nil {
				tc.o(&o)
			}
			o = o.WithDefaults()
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			nodes, ran, batches, err := plan(o, tc.es, planNow)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.nodes != nil && !reflect.DeepEqual(nodes, tc.nodes) && !(len(nodes) == 0 && len(tc.nodes) == 0) {
				t.Errorf("nodes = %v, want %v", nodes, tc.nodes)
			}
			if got := ends(batches); got != tc.batches {
				t.Errorf("batches = %s, want %s", got, tc.batches)
			}
			if len(ran) != len(nodes) {
				t.Errorf("%d versions ran for %d nodes", len(ran), len(nodes))
			}
			// The same release plans the same way every time: resume relies on it.
			again, _, _, _ := plan(o, tc.es, planNow)
			if !reflect.DeepEqual(again, nodes) {
				t.Error("planning is not deterministic")
			}
		})
	}
}

func TestCanariesDifferFromOneReleaseToTheNext(t *testing.T) {
	es := entries(50)
	pick := func(v string) []string {
		nodes, _, _, err := plan(Options{Version: v}.WithDefaults(), es, planNow)
		if err != nil {
			t.Fatal(err)
		}
		return nodes[:2]
	}
	if a, b := pick("v1.1.0"), pick("v1.2.0"); reflect.DeepEqual(a, b) {
		t.Errorf("v1.1.0 and v1.2.0 picked the same canaries %v", a)
	}
}

func TestPlanRecordsTheVersionEachNodeRan(t *testing.T) {
	es := []fleet.Entry{heardAgo("a", "v1.0.0", 0), {Node: "b", Heard: planNow,
		Heartbeat: wire.Heartbeat{Node: "b", State: wire.StateStandingAside, KnownGood: "v0.9.0"}}}
	nodes, ran, _, err := plan(Options{Version: "v1.1.0"}.WithDefaults(), es, planNow)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for i, n := range nodes {
		got[n] = ran[i]
	}
	if got["a"] != "v1.0.0" || got["b"] != "v0.9.0" {
		t.Errorf("ran = %v, want a on v1.0.0 and b (running nothing) on its known-good v0.9.0", got)
	}
}

func TestOptionsNameTheFlagAtFault(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		err  string
	}{
		{"defaults are valid", Options{Version: "v1.2.0"}, ""},
		{"a version that is not canonical", Options{Version: "1.2"}, `version "1.2" is not a canonical semantic version`},
		{"an unknown policy", Options{Version: "v1.2.0", Policy: "yolo"}, "--policy"},
		{"negative canaries", Options{Version: "v1.2.0", Canary: -1}, "--canary -1"},
		{"a canary node id with a dot", Options{Version: "v1.2.0", CanaryNodes: []string{"web.01"}}, "--canary-nodes"},
		{"a canary named twice", Options{Version: "v1.2.0", CanaryNodes: []string{"a", "a"}}, "--canary-nodes: a is named twice"},
		{"steps that shrink", Options{Version: "v1.2.0", Steps: []int{50, 10, 100}}, "--steps 50%,10%,100%: the shares are cumulative"},
		{"steps not ending at 100%", Options{Version: "v1.2.0", Steps: []int{10, 50}}, "the last step must be 100%"},
		{"a step over 100%", Options{Version: "v1.2.0", Steps: []int{150}}, "150% is not between"},
		{"a negative window", Options{Version: "v1.2.0", Window: -time.Second}, "--window"},
		{"a soak under a second", Options{Version: "v1.2.0", Soak: time.Millisecond}, "--soak 1ms"},
		{"a negative alive", Options{Version: "v1.2.0", Alive: -time.Second}, "--alive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Validate() = %v, want %q", err, tc.err)
			}
		})
	}
	d := Options{}.WithDefaults()
	if d.Policy != PolicyCanary || d.Canary != 2 || !reflect.DeepEqual(d.Steps, DefaultSteps) || d.Window != DefaultWindow ||
		d.Soak != DefaultSoak || d.Alive != DefaultAlive || d.SilentAfter != DefaultSilentAfter {
		t.Errorf("defaults = %+v", d)
	}
	d.Steps[0] = 99
	if DefaultSteps[0] == 99 {
		t.Error("WithDefaults shares DefaultSteps with its result")
	}
}

func TestRolloutIDIsTheTimeAndAKeySafeVersion(t *testing.T) {
	at := time.Date(2026, 11, 29, 13, 35, 0, 0, time.FixedZone("CET", 3600))
	for v, want := range map[string]string{
		"v1.2.0":      "20261129T123500Z-v1.2.0",
		"v1.5.0-rc.1": "20261129T123500Z-v1.5.0-rc.1",
		"v1.2.0+b 7*": "20261129T123500Z-v1.2.0_b_7_",
	} {
		if got := rolloutID(at, v); got != want {
			t.Errorf("rolloutID(%q) = %q, want %q", v, got, want)
		}
	}
	if got := versionOfID("20261129T123500Z-v1.5.0-rc.1"); got != "v1.5.0-rc.1" {
		t.Errorf("versionOfID = %q", got)
	}
}

// Found by the 10,000-node benchmark: a node listed twice (a heartbeat stored while the fleet
// was read) was a member twice, and its batch, counting it twice, never ended. The newest entry
// of a node is the one planned with.
func TestPlanHasEachNodeOnceAndUsesItsNewestHeartbeat(t *testing.T) {
	es := []fleet.Entry{heardAgo("a", "v1.0.0", 2*time.Second), heardAgo("b", "v1.0.0", time.Second), heardAgo("a", "v1.0.5", time.Second)}
	nodes, ran, batches, err := plan(Options{Version: "v1.1.0"}.WithDefaults(), es, planNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || batches[len(batches)-1].End != 2 {
		t.Fatalf("nodes %v, batches %s; want a and b once each", nodes, ends(batches))
	}
	for i, n := range nodes {
		if n == "a" && ran[i] != "v1.0.5" {
			t.Errorf("a ran %s, want v1.0.5 from its newest heartbeat", ran[i])
		}
	}
}

// Nodes on metered links (heartbeat link_class metered) wait for the last batch and are never
// hash-chosen canaries, unless --include-metered; a named canary stays one; a fleet that is all
// metered is planned as any.
func TestMeteredNodesAreDeferredToTheLastBatch(t *testing.T) {
	metered := func(e fleet.Entry) fleet.Entry { e.Heartbeat.LinkClass = wire.LinkMetered; return e }
	var es []fleet.Entry
	var plain, onMeter []string
	for i := 0; i < 10; i++ {
		e := heardAgo(fmt.Sprintf("n%02d", i), "v1.0.0", time.Second)
		if i%3 == 0 { // n00, n03, n06, n09
			e = metered(e)
			onMeter = append(onMeter, e.Node)
		} else {
			plain = append(plain, e.Node)
		}
		es = append(es, e)
	}
	allMetered := []fleet.Entry{metered(heardAgo("m1", "v1.0.0", time.Second)), metered(heardAgo("m2", "v1.0.0", time.Second))}
	for _, tc := range []struct {
		name    string
		o       func(*Options)
		es      []fleet.Entry
		nodes   []string
		batches string
		metered int
	}{
		{"metered last, in hash order, all in the last batch", nil, es,
			append(hashOrder("v1.1.0", plain), hashOrder("v1.1.0", onMeter)...), "canary:2 50%:3 100%:10", 4},
		{"--include-metered: as any node", func(o *Options) { o.IncludeMetered = true }, es,
			hashOrder("v1.1.0", append(slices.Clone(plain), onMeter...)), "canary:2 50%:5 100%:10", 0},
		{"a named metered canary stays a canary", func(o *Options) { o.CanaryNodes = []string{"n03"} }, es,
			append(append([]string{"n03"}, hashOrder("v1.1.0", plain)...), hashOrder("v1.1.0", []string{"n00", "n06", "n09"})...), "canary:1 50%:4 100%:10", 3},
		{"every node metered: planned as any", nil, allMetered, hashOrder("v1.1.0", []string{"m1", "m2"}), "canary:2", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Version: "v1.1.0", Steps: []int{50, 100}}
			if tc.o != nil {
				tc.o(&o)
			}
			o = o.WithDefaults()
			p, err := planFleet(o, anyRelease(o.Version), tc.es, planNow)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.nodes, tc.nodes) || ends(p.batches) != tc.batches || p.metered != tc.metered {
				t.Errorf("nodes %v batches %s metered %d\nwant  %v batches %s metered %d", p.nodes, ends(p.batches), p.metered, tc.nodes, tc.batches, tc.metered)
			}
		})
	}
}

// A rollout that deferred metered nodes says so when it starts, when its last batch begins, and
// in `rollout status`; an urgent one says so in status.
func TestARolloutSaysItDeferredMeteredNodes(t *testing.T) {
	st := sampleRunning()
	st.Metered, st.Urgent = 3, true
	last := len(st.Batches) - 1
	var status strings.Builder
	if err := WriteStatus(&status, st, planNow); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ what, got, want string }{
		{"started", startedMessage(st), "; 3 nodes on metered links deferred to the last batch (--include-metered treats them as any)"},
		{"the last batch", batchMessage(st, last, st.BatchNodes(last), nil, 0), "; 3 nodes on metered links among them, deferred to this batch"},
		{"status", status.String(), "3 on metered links deferred to the last batch"},
		{"status, urgent", status.String(), "targets signed urgent: nodes do not wait for their maintenance windows"},
	} {
		if !strings.Contains(tc.got, tc.want) {
			t.Errorf("%s: %q does not say %q", tc.what, tc.got, tc.want)
		}
	}
	if strings.Contains(batchMessage(st, 0, st.BatchNodes(0), nil, 0), "metered") {
		t.Error("the first batch speaks of metered nodes")
	}
}
