package rollout

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"github.com/opencontainers/go-digest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The simulated fleet: nodes that speak the wire protocol only — they watch their target keys,
// heartbeat every simBeat, and "upgrade" after simDelay in the way each was told to for a
// version: well, or by failing as a host would report it.

const (
	simBeat  = 100 * time.Millisecond
	simDelay = 200 * time.Millisecond
)

// How a simulated node takes a version.
const (
	good      = ""
	rollsBack = "rollback"  // the launcher rolls back from it before it confirms
	hangs     = "hang"      // never confirms it (and stays on the old version)
	crashLoop = "crashloop" // confirms it, then restarts every 1.5s
	refuses   = "refuse"    // refuses the target (marked bad here)
	fetchFail = "fetchfail" // fails the fetch for good
	goSilent  = "silent"    // stops heartbeating once targeted
	thenQuiet = "quiet"     // confirms it, then stops heartbeating
	// launcherRollsBack: the host confirms it, and the launcher it carried rolls back to the floor
	launcherRollsBack = "launcher-rollback"
)

type simNode struct {
	id        string
	running   string
	knownGood string
	takes     map[string]string // version → how it takes it (good when absent)

	boot      time.Time
	rollbacks []wire.Rollback
	launcher  *wire.Launcher
	refused   *wire.Refusal
	fetch     *wire.Fetch
	bad       map[string]bool
	silent    bool
	stopped   bool // down (stopped by the test): neither heartbeating nor taking targets
	pending   string
	pendingAt time.Time
	loop      bool
	targeted  []string // versions it started to take, in order
	linkClass string   // its heartbeat's link_class
	platform  string   // its profile's platform ("": no profile)
	reads     int      // its heartbeat's manifest_schema
	plans     bool     // it reads rollout plans (heartbeat plans), taking the plan over the fleet key
	// windowOpens: the node keeps a maintenance window that opens then (decision 0029): a
	// version staged before waits for it, saying so in its heartbeat.
	windowOpens time.Time
	window      *wire.WindowState
}

// profile is what the node's heartbeat says of its machine: nothing without a platform.
func (n *simNode) profile() *wire.Profile {
	if n.platform == "" {
		return nil
	}
	p, _ := wire.ParsePlatform(n.platform)
	return &wire.Profile{OS: p.OS, Arch: p.Arch, Platform: n.platform, OSID: "debian", OSVersion: "12", Kernel: "6.1.0"}
}

type simTarget struct {
	version string
	rev     uint64
	plan    bool // the plan (or what one held the node at) put it in force
}

type sim struct {
	js      jetstream.JetStream
	names   wire.Names
	mu      sync.Mutex
	nodes   []*simNode
	targets map[string]simTarget
	puts    map[string]int // writes seen per key
	back    chan struct{}  // the connection came back: watch the targets again
	every   time.Duration  // how often its nodes heartbeat, as their heartbeats say
	// unverified are the targets that did not verify as a host verifies them (with the test
	// release key, for the key they are under): a host would refuse each.
	unverified []string
	// plan is the rollout plan on the bus as the plan-reading nodes evaluate it (planRev its
	// revision, planPuts how many were written), and carry what a replaced plan held each at
	// (as host/plan.go keeps it).
	plan     *wire.Plan
	planRev  uint64
	planPuts int
	carry    map[string]string
}

// connect is a connection of its own that rides out a server restart.
func connect(t testing.TB, b *meshtest.Bus, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(b.URL(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func node(id, running string, takes ...string) *simNode {
	n := &simNode{id: id, running: running, knownGood: running, takes: map[string]string{}, bad: map[string]bool{}, boot: time.Now().Add(-time.Hour),
		reads: wire.ManifestSchemaPlatforms}
	for i := 0; i+1 < len(takes); i += 2 {
		n.takes[takes[i]] = takes[i+1]
	}
	return n
}

func startSim(t *testing.T, b *meshtest.Bus, nodes ...*simNode) *sim {
	t.Helper()
	return startSimEvery(t, b, simBeat, nodes...)
}

// startSimEvery runs nodes heartbeating every beat.
func startSimEvery(t testing.TB, b *meshtest.Bus, beat time.Duration, nodes ...*simNode) *sim {
	t.Helper()
	return startSimEchoing(t, b, beat, 0, nodes...)
}

// startSimEchoing runs nodes heartbeating every beat, and again echo after each (0: not), as a
// host heartbeats on an event between its timed heartbeats.
func startSimEchoing(t testing.TB, b *meshtest.Bus, beat, echo time.Duration, nodes ...*simNode) *sim {
	t.Helper()
	back := make(chan struct{}, 1)
	s := &sim{names: b.Names, nodes: nodes, targets: map[string]simTarget{}, puts: map[string]int{}, back: back, every: beat, carry: map[string]string{}}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, u := range s.unverified {
			t.Errorf("a target a host would refuse: %s", u)
		}
	})
	s.js = connect(t, b, nats.ReconnectHandler(func(*nats.Conn) {
		select {
		case back <- struct{}{}:
		default:
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	ready := make(chan struct{})
	wg.Add(3)
	planReady := make(chan struct{})
	go func() { defer wg.Done(); s.watchTargets(ctx, ready) }()
	go func() { defer wg.Done(); s.watchPlan(ctx, planReady) }()
	<-ready
	<-planReady
	s.beat(ctx, time.Now()) // every node heard before the test goes on
	go func() {
		defer wg.Done()
		tk := time.NewTicker(beat)
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tk.C:
				s.beat(ctx, now)
			}
			if echo > 0 {
				select {
				case <-ctx.Done():
					return
				case now := <-time.After(echo):
					s.beat(ctx, now)
				}
			}
		}
	}()
	return s
}

func (s *sim) watchTargets(ctx context.Context, ready chan struct{}) {
	once := sync.OnceFunc(func() { close(ready) })
	defer once()
	for ctx.Err() == nil {
		kv, err := s.js.KeyValue(ctx, s.names.Targets())
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		w, err := kv.WatchAll(ctx)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
	read:
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case e, ok = <-w.Updates():
			case <-s.back:
			case <-ctx.Done():
			}
			if !ok {
				break read
			}
			if e == nil {
				once()
				continue
			}
			s.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				tg, err := wire.ParseTarget(e.Value())
				if err == nil {
					err = tg.Verify(e.Key(), wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now())
				}
				if err != nil {
					s.unverified = append(s.unverified, fmt.Sprintf("%s revision %d: %v", e.Key(), e.Revision(), err))
				} else if old, ok := s.targets[e.Key()]; !ok || old.rev < e.Revision() {
					s.targets[e.Key()] = simTarget{version: tg.Version, rev: e.Revision()}
					s.puts[e.Key()]++
				}
			} else {
				delete(s.targets, e.Key())
			}
			s.mu.Unlock()
		}
		_ = w.Stop()
	}
}

// watchPlan follows the plan key as a host does: verified with the test release key, and
// what the plan it replaces held each node at carried (host/plan.go).
func (s *sim) watchPlan(ctx context.Context, ready chan struct{}) {
	once := sync.OnceFunc(func() { close(ready) })
	defer once()
	for ctx.Err() == nil {
		kv, err := s.js.KeyValue(ctx, s.names.Rollouts())
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		w, err := kv.Watch(ctx, wire.PlanKey)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
	read:
		for {
			var e jetstream.KeyValueEntry
			var ok bool
			select {
			case e, ok = <-w.Updates():
			case <-ctx.Done():
			}
			if !ok {
				break read
			}
			if e == nil {
				once()
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			p, err := wire.ParsePlan(e.Value())
			if err == nil {
				err = p.Verify(wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now())
			}
			s.mu.Lock()
			switch {
			case err != nil:
				s.unverified = append(s.unverified, fmt.Sprintf("plan revision %d: %v", e.Revision(), err))
			case e.Revision() > s.planRev:
				for _, n := range s.nodes {
					if old := s.plan; old != nil && old.Rollout != p.Rollout && old.Holds(n.planNode()) {
						s.carry[n.id] = old.Version
					}
				}
				if p.State == wire.PlanCompleted {
					clear(s.carry)
				}
				s.plan, s.planRev = &p, e.Revision()
				s.planPuts++
			}
			s.mu.Unlock()
		}
		_ = w.Stop()
	}
}

// planNode is the node as a plan evaluates it.
func (n *simNode) planNode() wire.PlanNode {
	return wire.PlanNode{ID: n.id, Platform: n.platform, Metered: n.linkClass == wire.LinkMetered}
}

// target is what node n runs by the keys: its own, else (when it reads plans) the plan holding
// it or what an earlier plan held it at, else the fleet's.
func (s *sim) target(n string) simTarget {
	if t, ok := s.targets[wire.NodeTargetKey(n)]; ok {
		return t
	}
	var sn *simNode
	for _, x := range s.nodes {
		if x.id == n {
			sn = x
		}
	}
	if sn != nil && sn.plans {
		if s.plan != nil && s.plan.Holds(sn.planNode()) {
			return simTarget{s.plan.Version, s.planRev, true}
		}
		if v := s.carry[n]; v != "" {
			return simTarget{v, s.planRev, true}
		}
	}
	return s.targets[wire.FleetTargetKey]
}

func (s *sim) beat(ctx context.Context, now time.Time) {
	s.mu.Lock()
	var hbs []wire.Heartbeat
	for _, n := range s.nodes {
		if n.stopped {
			continue // a host that is down takes no target (the fleet key set at completion too)
		}
		tg := s.target(n.id)
		n.step(now, tg)
		if n.silent || n.stopped {
			continue
		}
		hbs = append(hbs, wire.Heartbeat{Node: n.id, State: wire.StateRunning, Running: n.running, KnownGood: n.knownGood,
			Target: tg.version, UptimeS: int64(now.Sub(n.boot).Seconds()), SentAt: now.UTC(), IntervalS: s.every.Seconds(),
			Rollbacks: slices.Clone(n.rollbacks), Refused: n.refused, Fetch: n.fetch, Launcher: clone(n.launcher),
			LastReconcile: &wire.LastReconcile{OK: true, Trigger: wire.TriggerTimer}, LinkClass: n.linkClass, Window: clone(n.window),
			ManifestSchema: n.reads, Profile: n.profile(), Plans: planSchema(n.plans)})
	}
	s.mu.Unlock()
	for _, hb := range hbs {
		_, _ = s.js.PublishAsync(s.names.Heartbeat(hb.Node), hb.Marshal())
	}
	select {
	case <-s.js.PublishAsyncComplete():
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
}

// step moves a node along: it takes a newer target after simDelay, as it was told to.
func (n *simNode) step(now time.Time, tg simTarget) {
	if n.loop && now.Sub(n.boot) > 1500*time.Millisecond {
		n.boot = now
	}
	if n.takes[n.running] == thenQuiet && now.Sub(n.boot) > 500*time.Millisecond {
		n.silent = true
	}
	v := tg.version
	if v != n.pending && v != "" && v != n.running && !n.bad[v] && semver.Compare(v, n.knownGood) > 0 {
		n.pending, n.pendingAt = v, now
		n.targeted = append(n.targeted, v)
		n.fetch = &wire.Fetch{State: "fetching", Version: v, Percent: 50}
	}
	if n.pending == "" || now.Sub(n.pendingAt) < simDelay {
		return
	}
	if !n.windowOpens.IsZero() && now.Before(n.windowOpens) {
		n.fetch = &wire.Fetch{State: "staged", Version: n.pending}
		n.window = &wire.WindowState{Key: wire.FleetWindowKey, WaitingFor: n.pending, Opens: n.windowOpens,
			Waiting: wire.WaitingLine(n.pending, n.windowOpens)}
		return
	}
	n.window = nil
	p := n.pending
	switch n.takes[p] {
	case good, crashLoop, thenQuiet:
		n.running, n.knownGood, n.boot, n.fetch, n.pending = p, p, now, nil, ""
		n.loop = n.takes[p] == crashLoop
	case rollsBack:
		n.rollbacks = append(n.rollbacks, wire.Rollback{From: p, To: n.running, At: now.UTC(), Reason: "exited with status 2 before confirming",
			Output: "starting " + p + "\npanic: boom\x1b[31m\ngoroutine 1 [running]"})
		n.bad[p], n.boot, n.fetch, n.pending = true, now, nil, ""
	case launcherRollsBack:
		n.running, n.knownGood, n.boot, n.fetch, n.pending = p, p, now, nil, ""
		n.launcher = &wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: wire.LauncherFloor,
			RolledBackFrom: "v1.1.0", RolledBackAt: now.UTC(), RollbackReason: "exited with status 2 before confirming (last: panic: boom)"}
	case hangs:
		n.fetch = &wire.Fetch{State: "staged", Version: p}
	case refuses:
		what := "target"
		if tg.plan {
			what = "plan"
		}
		n.refused = &wire.Refusal{What: what, Revision: tg.rev, Error: "target " + p + " is marked bad on this node and is not fetched again", At: now.UTC()}
		n.bad[p], n.fetch, n.pending = true, nil, ""
	case fetchFail:
		n.fetch = &wire.Fetch{State: "failed", Version: p, Error: "archive digest mismatch"}
		n.bad[p], n.pending = true, ""
	case goSilent:
		n.silent = true
	}
}

// planSchema is what a node's heartbeat says in plans.
func planSchema(reads bool) int {
	if reads {
		return wire.PlanSchema
	}
	return 0
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// the node named id, under the lock.
func (s *sim) with(id string, fn func(n *simNode)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if n.id == id {
			fn(n)
		}
	}
}

func (s *sim) targeted(id string) []string {
	var out []string
	s.with(id, func(n *simNode) { out = slices.Clone(n.targeted) })
	return out
}

// events collects a controller's events.
type events struct {
	mu  sync.Mutex
	all []Event
}

func (e *events) add(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) kinds(kind string) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, ev := range e.all {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func (e *events) dump(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.all {
		t.Logf("%s %s", ev.Time.Format("15:04:05.000"), ev.Message)
	}
}

// publishRelease announces version (the controller only checks that it is announced).
func publishRelease(t testing.TB, b *meshtest.Bus, version string) {
	t.Helper()
	publishPlatforms(t, b, version, "linux/amd64", "linux/arm64")
}

// publishPlatforms announces version with a schema 4 manifest (unsigned: the simulated nodes
// do not fetch) holding a build for each platform, sorted.
func publishPlatforms(t testing.TB, b *meshtest.Bus, version string, platforms ...string) {
	t.Helper()
	b.Put(b.Names.Releases(), version, manifestOf(t, version, platforms...).Marshal())
}

func manifestOf(t testing.TB, version string, platforms ...string) wire.Manifest {
	t.Helper()
	m := wire.Manifest{Schema: wire.ManifestSchemaPlatforms, Version: version, Created: "2026-12-02T12:00:00Z"}
	for _, s := range slices.Sorted(slices.Values(platforms)) {
		p, err := wire.ParsePlatform(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Platforms = append(m.Platforms, wire.PlatformBuild{Platform: s, Object: wire.PlatformObjectName(version, p), Size: 1,
			Digest: digest.FromString(s), BinaryDigest: digest.FromString(s + " binary")})
	}
	if _, err := wire.ParseManifest(m.Marshal()); err != nil {
		t.Fatal(err)
	}
	return m
}

// testOptions are small durations for tests.
func testOptions(version string) Options {
	return Options{Version: version, Canary: 2, Steps: []int{50, 100}, Window: 3 * time.Second, Soak: time.Second,
		Alive: time.Hour, SilentAfter: time.Second}
}

// testSigner signs as the controllers of the tests do, with the test release key.
var testSigner = targets.Signer{Key: meshtest.ReleaseKey.Private, TTL: time.Hour}

// putTarget writes a target for version under key, signed with the test release key, as
// someone else with the key would, and returns its revision.
func putTarget(t testing.TB, b *meshtest.Bus, key, version string) uint64 {
	t.Helper()
	tg, err := testSigner.Sign(key, version, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b.Put(b.Names.Targets(), key, tg.Marshal())
}

func newController(t testing.TB, js jetstream.JetStream, ev *events, extra string) *Controller {
	t.Helper()
	cfg := Config{JS: js, Names: wire.NamesFor(""), Lease: 3 * time.Second, Tick: 50 * time.Millisecond, Holder: extra,
		Key: testSigner.Key, TargetTTL: testSigner.TTL}
	if ev != nil {
		cfg.Events = ev.add
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func targetKey(t *testing.T, b *meshtest.Bus, key string) (string, uint64, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := b.KV(b.Names.Targets()).Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	tg, err := wire.ParseTarget(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return tg.Version, e.Revision(), true
}

// runAsync runs c.Run(ctx, id) in the background; its result arrives on the channel.
func runAsync(ctx context.Context, c *Controller, id string) <-chan runResult {
	done := make(chan runResult, 1)
	go func() {
		st, err := c.Run(ctx, id)
		done <- runResult{id: id, st: st, err: err}
	}()
	return done
}
