package lab

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/lab/sim"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// scaleParams size a rollout of simulated nodes over a NATS cluster (see runScale).
type scaleParams struct {
	Nodes, Shards, Servers int
	Heartbeat              time.Duration
	StartMin, StartMax     time.Duration // a node starts a newer target after a delay in this range
	ConfirmAfter           time.Duration // and confirms it (or rolls back) this long after
	Canary                 int
	Steps                  []int // percent, cumulative
	Soak, Window, Silent   time.Duration
	// FailBatch is the batch (0 the canaries) in which FailCount nodes roll back the bad release.
	FailBatch, FailCount int
	// Watch makes each simulated node follow its four keys with a KV watch each, as hosts did
	// before decision 0022, instead of subscriptions and direct gets (sim.Config.Watch).
	Watch bool
}

// scaleFigures are what one rollout cost.
type scaleFigures struct {
	Version    string
	Run        controllerRun
	Servers    []procFigures
	Self       time.Duration // CPU of this process (the simulated nodes) during the rollout
	Heartbeats int64         // heartbeats the stream acknowledged during the rollout
	Fleet      fleetFigures
	// Consumers is how many consumers the servers held once the rollout's first batch was
	// targeted: the controller's own, and the nodes' (none unless Watch).
	Consumers int
	// Writes are the rollout's writes of the keys nodes follow (writeCounter).
	Writes writes
}

// writes counts a rollout's writes of what nodes follow: the plan key, the nodes' own target
// keys (puts and deletes), the fleet key.
type writes struct{ Plan, Node, Fleet int }

// countWrites watches the plan key and the targets bucket from now until stop, which returns
// what was written, every write the streams hold by then counted.
func countWrites(ctx context.Context, tb testing.TB, js jetstream.JetStream, names wire.Names) (stop func() writes) {
	tb.Helper()
	wctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var w writes
	seen := map[string]uint64{}
	follow := func(bucket string, watch func(jetstream.KeyValue) (jetstream.KeyWatcher, error), count func(key string)) {
		kv := mustKV(ctx, tb, js, bucket)
		kw, err := watch(kv)
		if err != nil {
			tb.Fatal(err)
		}
		go func() {
			defer kw.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case e, ok := <-kw.Updates():
					if !ok {
						return
					}
					if e == nil {
						continue
					}
					mu.Lock()
					count(e.Key())
					seen[bucket] = max(seen[bucket], e.Revision())
					mu.Unlock()
				}
			}
		}()
	}
	follow(names.Rollouts(), func(kv jetstream.KeyValue) (jetstream.KeyWatcher, error) {
		return kv.Watch(wctx, wire.PlanKey, jetstream.UpdatesOnly())
	}, func(string) { w.Plan++ })
	follow(names.Targets(), func(kv jetstream.KeyValue) (jetstream.KeyWatcher, error) {
		return kv.WatchFiltered(wctx, []string{wire.NodeTargetKey(">"), wire.FleetTargetKey}, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	}, func(key string) {
		if key == wire.FleetTargetKey {
			w.Fleet++
		} else {
			w.Node++
		}
	})
	base, basePlan := targetsSeq(ctx, tb, js, names), planRevision(ctx, tb, js, names)
	return func() writes {
		defer cancel()
		// Every write the streams hold now is counted before the counts are read: the plan key's
		// last revision, and the targets stream's last message (nothing but node and fleet keys
		// is written there during a bench rollout).
		planRev, last := planRevision(ctx, tb, js, names), targetsSeq(ctx, tb, js, names)
		waitUntil(tb, time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return (last == base || seen[names.Targets()] >= last) && (planRev == basePlan || seen[names.Rollouts()] >= planRev)
		}, func() string { return "the rollout's writes counted" })
		mu.Lock()
		defer mu.Unlock()
		return w
	}
}

// planRevision is the plan key's revision (0: none).
func planRevision(ctx context.Context, tb testing.TB, js jetstream.JetStream, names wire.Names) uint64 {
	tb.Helper()
	if e, err := mustKV(ctx, tb, js, names.Rollouts()).Get(ctx, wire.PlanKey); err == nil {
		return e.Revision()
	}
	return 0
}

// targetsSeq is the last sequence of the targets bucket's stream.
func targetsSeq(ctx context.Context, tb testing.TB, js jetstream.JetStream, names wire.Names) uint64 {
	tb.Helper()
	st, err := js.Stream(ctx, "KV_"+names.Targets())
	if err != nil {
		tb.Fatal(err)
	}
	return st.CachedInfo().State.LastSeq
}

// fleetFigures are what the simulated nodes cost the servers before any rollout: the time to
// follow their keys and heartbeat once each, the consumers they hold, and each server's CPU
// over that time and RSS after it.
type fleetFigures struct {
	Setup     time.Duration
	Consumers int
	Servers   []procFigures
}

// procFigures are one server's CPU during a rollout and its memory after it.
type procFigures struct {
	Name          string
	CPU           time.Duration
	RSS, PeakRSS  int64 // kB
	before, after int64 // clock ticks
}

// runScale starts p.Servers stock nats-server processes as one cluster with R3 buckets and stream,
// publishes two releases, starts p.Nodes simulated nodes on p.Shards connections and runs two
// rollouts with the real controller (`mesh-release rollout start`, a child process): v1.1.0,
// which every node confirms and which must complete with every batch in order; then v1.2.0,
// which p.FailCount nodes of batch p.FailBatch roll back, and which must halt in that batch
// with no later batch's node ever targeted. It returns the figures of both.
func runScale(tb testing.TB, p scaleParams) (good, bad scaleFigures) {
	tb.Helper()
	if _, ok := tinyRelease("v1.1.0"); !ok {
		tb.Skip("the lab's tiny release binary is amd64 machine code")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctl, profile := controllerBinary(tb)
	cl := startBareStockCluster(tb, p.Servers)
	c, err := bus.Connect(ctx, cl.URL(), "")
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	names := wire.NamesFor("")
	// With p.Watch every node holds four consumers; bus.Init lets each bucket hold a million.
	if err := initReplicated(ctx, c.JS, names, min(3, p.Servers), 0); err != nil {
		tb.Fatal(err)
	}
	tmp := tb.TempDir()
	rel := &Release{Bin: build(tb, PkgRelease, "v0.0.0-lab"), KeyDir: filepath.Join(tmp, "keys"), Out: filepath.Join(tmp, "out"), NATS: cl.URL()}
	pubText, err := rel.Keygen(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	pub, err := wire.ParseTrustedKey(pubText)
	if err != nil {
		tb.Fatal(err)
	}
	for _, v := range []string{"v1.1.0", "v1.2.0"} {
		exe, _ := tinyRelease(v)
		path := filepath.Join(tmp, "mesh-host-"+v)
		if err := os.WriteFile(path, exe, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := rel.Ship(ctx, v, path); err != nil {
			tb.Fatal(err)
		}
	}

	nodes := simNodes(p.Nodes)
	failing := map[string]bool{}
	planned := planBatches("v1.2.0", nodes, p.Canary, p.Steps)
	if p.FailBatch >= len(planned) {
		tb.Fatalf("FailBatch %d: the rollout has %d batches", p.FailBatch, len(planned))
	}
	for _, n := range planned[p.FailBatch][:min(p.FailCount, len(planned[p.FailBatch]))] {
		failing[n] = true
	}
	var urls []string
	for _, s := range cl.Servers {
		urls = append(urls, s.URL)
	}
	var ff fleetFigures
	for _, s := range cl.Servers {
		t, _ := CPUTicks(s.Cmd.Process.Pid)
		ff.Servers = append(ff.Servers, procFigures{Name: s.Name, before: t})
	}
	began := time.Now()
	fleet, err := sim.Start(ctx, sim.Config{
		URLs: urls, Names: names, Nodes: nodes, Shards: p.Shards, Running: "v1.0.0", Heartbeat: p.Heartbeat,
		StartMin: p.StartMin, StartMax: p.StartMax, ConfirmAfter: p.ConfirmAfter, Watch: p.Watch,
		Fails:       func(node, version string) bool { return version == "v1.2.0" && failing[node] },
		TrustedKeys: []ed25519.PublicKey{pub}, // the release key signs targets too
	})
	if err != nil {
		tb.Fatal(err)
	}
	defer fleet.Close()
	how := "a subscription and direct gets each, no consumer"
	if p.Watch {
		how = "a KV watch each, 4 consumers per node"
	}
	ff.Setup = time.Since(began)
	for i, s := range cl.Servers {
		sf := &ff.Servers[i]
		sf.after, _ = CPUTicks(s.Cmd.Process.Pid)
		sf.CPU = time.Duration(sf.after-sf.before) * 10 * time.Millisecond
		sf.RSS, _ = MemoryKB(s.Cmd.Process.Pid, "VmRSS")
		sf.PeakRSS, _ = MemoryKB(s.Cmd.Process.Pid, "VmHWM")
	}
	if ff.Consumers, err = consumersOn(ctx, c.JS); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d simulated nodes on %d connections (%d nodes each) over %d servers follow their four keys (%s) and heartbeat once each in %s; %d consumers on the servers",
		p.Nodes, p.Shards, (p.Nodes+p.Shards-1)/p.Shards, p.Servers, how, ff.Setup.Round(time.Millisecond), ff.Consumers)
	for _, s := range ff.Servers {
		tb.Logf("  %s: %.1f CPU-s to take them; RSS %.0f MB before the rollouts", s.Name, s.CPU.Seconds(), float64(s.RSS)/1024)
	}

	args := func(v string) []string {
		return []string{"rollout", "start", v, "--json", "--nats", cl.URL(), "--canary", itoa(p.Canary), "--steps", formatSteps(p.Steps),
			"--window", p.Window.String(), "--soak", p.Soak.String(), "--alive", "10m", "--silent-after", p.Silent.String(), "--key", rel.KeyPath()}
	}
	measure := func(v string) scaleFigures {
		f := scaleFigures{Version: v, Fleet: ff}
		for _, s := range cl.Servers {
			t, _ := CPUTicks(s.Cmd.Process.Pid)
			f.Servers = append(f.Servers, procFigures{Name: s.Name, before: t})
		}
		self0, hb0 := selfCPU(), fleet.Stats().Heartbeats
		stopCounting := countWrites(ctx, tb, c.JS, names)
		f.Consumers = -1
		counted := false
		onEvent := func(ev rollout.Event) {
			if ev.Kind == rollout.EventBatch && !counted {
				counted = true
				if n, err := consumersOn(ctx, c.JS); err == nil {
					f.Consumers = n
				}
			}
		}
		f.Run = runController(ctx, tb, time.Duration(len(p.Steps)+2)*(p.Window+time.Minute), ctl, profile(v), onEvent, args(v)...)
		f.Self, f.Heartbeats = selfCPU()-self0, fleet.Stats().Heartbeats-hb0
		f.Writes = stopCounting()
		for i, s := range cl.Servers {
			sf := &f.Servers[i]
			sf.after, _ = CPUTicks(s.Cmd.Process.Pid)
			sf.CPU = time.Duration(sf.after-sf.before) * 10 * time.Millisecond
			sf.RSS, _ = MemoryKB(s.Cmd.Process.Pid, "VmRSS")
			sf.PeakRSS, _ = MemoryKB(s.Cmd.Process.Pid, "VmHWM")
		}
		return f
	}

	good = measure("v1.1.0")
	if good.Run.Code != 0 {
		tb.Fatalf("the rollout of v1.1.0 exited %d, want 0 (completed):\n%s\n%s", good.Run.Code, eventLines(good.Run), good.Run.Stderr)
	}
	st := currentRollout(ctx, tb, c.JS, names)
	checkPlan(tb, st, planBatches("v1.1.0", nodes, p.Canary, p.Steps))
	if st.Status != rollout.StatusCompleted {
		tb.Fatalf("v1.1.0: status %s, want completed", st.Status)
	}
	if n := fleet.Running("v1.1.0"); n != p.Nodes {
		tb.Errorf("v1.1.0 completed with %d of %d nodes running it confirmed", n, p.Nodes)
	}
	checkBatchOrder(tb, good.Run)
	// Every node reads plans: a write of the plan per batch and one to complete it, the fleet key
	// once, no node's own key (decision 0047).
	if w := good.Writes; w.Plan != len(st.Batches)+1 || w.Node != 0 || w.Fleet != 1 {
		tb.Errorf("v1.1.0 wrote the plan %d times, nodes' own targets %d times, the fleet key %d times; want %d, 0, 1", w.Plan, w.Node, w.Fleet, len(st.Batches)+1)
	}
	if v, err := signedTarget(ctx, tb, c.JS, names, wire.FleetTargetKey, pub); err != nil || v != "v1.1.0" {
		tb.Errorf("after v1.1.0 completed the fleet key is %q, %v; want v1.1.0, signed", v, err)
	}

	bad = measure("v1.2.0")
	if bad.Run.Code != 3 {
		tb.Fatalf("the rollout of v1.2.0 exited %d, want 3 (halted):\n%s\n%s", bad.Run.Code, eventLines(bad.Run), bad.Run.Stderr)
	}
	st = currentRollout(ctx, tb, c.JS, names)
	checkPlan(tb, st, planned)
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != p.FailBatch {
		tb.Fatalf("v1.2.0: status %s, halt %+v; want halted in batch %d", st.Status, st.Halt, p.FailBatch)
	}
	// A write of the plan per batch begun and one to halt it, no target.
	if w := bad.Writes; w.Plan != st.Halt.Batch+2 || w.Node != 0 || w.Fleet != 0 {
		tb.Errorf("v1.2.0 wrote the plan %d times, nodes' own targets %d times, the fleet key %d times; want %d, 0, 0", w.Plan, w.Node, w.Fleet, st.Halt.Batch+2)
	}
	for _, r := range st.Halt.Nodes {
		if !failing[r.Node] || r.Why != rollout.WhyRolledBack {
			tb.Errorf("halt names %s (%s: %s); want only the failing nodes, rolled back", r.Node, r.Why, r.Detail)
		}
	}
	later := map[string]bool{}
	for _, b := range planned[p.FailBatch+1:] {
		for _, n := range b {
			later[n] = true
		}
	}
	for _, n := range fleet.Targeted("v1.2.0") {
		if later[n] {
			tb.Errorf("%s, of a batch after the halted one, was targeted with v1.2.0", n)
		}
	}
	// One listing of the keys that hold a value, not a get per later node (90,000 at 100,000).
	keys, err := mustKV(ctx, tb, c.JS, names.Targets()).ListKeys(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	for k := range keys.Keys() {
		if n, ok := strings.CutPrefix(k, "node."); ok && later[n] {
			tb.Errorf("%s, of a batch after the halted one, has its own target; want none", n)
			break
		}
	}
	if v, err := signedTarget(ctx, tb, c.JS, names, wire.FleetTargetKey, pub); err != nil || v != "v1.1.0" {
		tb.Errorf("after v1.2.0 halted the fleet key is %q, %v; want v1.1.0 untouched", v, err)
	}
	if s := fleet.Stats(); s.Refused != 0 {
		tb.Errorf("the simulated nodes refused %d targets; every target the controller writes must verify", s.Refused)
	}
	return good, bad
}

// consumersOn counts the consumers of every stream on the bus, as the servers report them.
func consumersOn(ctx context.Context, js jetstream.JetStream) (int, error) {
	n := 0
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		n += info.State.Consumers
	}
	if err := streams.Err(); err != nil {
		return 0, fmt.Errorf("count the consumers on the bus: %w", err)
	}
	return n, nil
}

// signedTarget is the version key names, checked as a host checks it: signed by pub for key.
func signedTarget(ctx context.Context, tb testing.TB, js jetstream.JetStream, names wire.Names, key string, pub ed25519.PublicKey) (string, error) {
	e, err := mustKV(ctx, tb, js, names.Targets()).Get(ctx, key)
	if err != nil {
		return "", err
	}
	t, err := wire.ParseTarget(e.Value())
	if err != nil {
		return "", err
	}
	return t.Version, t.Verify(key, wire.LegacyTrust(nil, []ed25519.PublicKey{pub}), time.Now())
}

// planBatches is the order of a rollout plan (decision 0047, docs/wire.md "Rollout plan"),
// computed here as any tool can from the documented hash: the nodes in the order of
// wire.PlanBucket(wire.PlanSalt(version), node), then id; the first canary of them are the
// canaries; each step p is a wave holding the others whose bucket is below p% (the last step
// every node), a wave that adds no node dropped.
func planBatches(version string, nodes []string, canary int, steps []int) [][]string {
	salt := wire.PlanSalt(version)
	order := slices.Clone(nodes)
	slices.SortFunc(order, func(a, b string) int {
		return cmp.Or(cmp.Compare(wire.PlanBucket(salt, a), wire.PlanBucket(salt, b)), strings.Compare(a, b))
	})
	var batches [][]string
	end := min(canary, len(order))
	if end > 0 {
		batches = append(batches, order[:end])
	}
	for k, p := range steps {
		next := end
		for next < len(order) && (k == len(steps)-1 || wire.PlanBucket(salt, order[next]) < wire.PercentToPlanScale(p)) {
			next++
		}
		if next > end {
			batches = append(batches, order[end:next])
			end = next
		}
	}
	return batches
}

// perNodeBatches is the order decision 0006 documents, what a fleet where no node reads plans
// is planned by: canaries are the nodes with the smallest sha256(version + "/" + node), the
// others follow in the same order, and batch k ends at ceil(p_k × N / 100) nodes, a step that
// adds no node dropped.
func perNodeBatches(version string, nodes []string, canary int, steps []int) [][]string {
	order := slices.Clone(nodes)
	key := func(n string) string { h := sha256.Sum256([]byte(version + "/" + n)); return string(h[:]) }
	slices.SortFunc(order, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	var batches [][]string
	end := min(canary, len(order))
	if end > 0 {
		batches = append(batches, order[:end])
	}
	for _, p := range steps {
		next := (p*len(order) + 99) / 100
		if next > end {
			batches = append(batches, order[end:next])
			end = next
		}
	}
	return batches
}

// checkPlan compares the controller's stored plan with planBatches'.
func checkPlan(tb testing.TB, st rollout.State, want [][]string) {
	tb.Helper()
	if len(st.Batches) != len(want) {
		tb.Errorf("%s has %d batches, want %d", st.Version, len(st.Batches), len(want))
		return
	}
	start := 0
	for i, b := range st.Batches {
		got := st.Nodes[start:b.End]
		if !slices.Equal(got, want[i]) {
			tb.Errorf("%s batch %d (%s): %d nodes from %.3v; want %d from %.3v (decision 0047's order)", st.Version, i, b.Name, len(got), got, len(want[i]), want[i])
		}
		start = b.End
	}
}

// checkBatchOrder checks that each batch was begun only after the one before it was done.
func checkBatchOrder(tb testing.TB, run controllerRun) {
	tb.Helper()
	done := 0
	for _, ev := range run.Events {
		switch ev.Kind {
		case rollout.EventBatch:
			if ev.Batch != done+1 {
				tb.Errorf("batch %d began after %d batches were done", ev.Batch, done)
			}
		case rollout.EventBatchDone:
			done = ev.Batch
		}
	}
}

func currentRollout(ctx context.Context, tb testing.TB, js jetstream.JetStream, names wire.Names) rollout.State {
	tb.Helper()
	st, ok, err := rollout.Current(ctx, js, names)
	if err != nil || !ok {
		tb.Fatalf("the current rollout: %v (found: %t)", err, ok)
	}
	return st
}

func mustKV(ctx context.Context, tb testing.TB, js jetstream.JetStream, bucket string) jetstream.KeyValue {
	tb.Helper()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		tb.Fatal(err)
	}
	return kv
}

// formatSteps writes steps as --steps takes them: 1%,10%,100%.
func formatSteps(steps []int) string {
	var s []string
	for _, p := range steps {
		s = append(s, fmt.Sprintf("%d%%", p))
	}
	return strings.Join(s, ",")
}

// eventLines is the run's events, one message per line, for a failure message.
func eventLines(run controllerRun) string {
	var b strings.Builder
	for _, ev := range run.Events {
		fmt.Fprintf(&b, "%s %s %s\n", ev.Time.Format("15:04:05.000"), ev.Kind, ev.Message)
		for _, r := range ev.Reasons {
			fmt.Fprintf(&b, "    %s %s: %s\n", r.Node, r.Why, r.Detail)
		}
	}
	return b.String()
}

// selfCPU is this process's CPU time so far (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
