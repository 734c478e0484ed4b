package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Issue 20 §3.1 and §3.2, with real processes: a rollout over three stock nats-server processes
// (every bucket, object store and stream on all three) and six real mesh-launcher nodes
// enrolled through the enrolment service, their bus URLs each starting at another server. As
// the second batch's targets are set, the server holding the JetStream meta leader is
// SIGKILLed; it is then started with its data directory wiped, and must catch up — its meta
// state and every replica current, what it serves alone the same as before; then, as a later
// batch's targets are set, the server holding the streams' leaders (the rollouts bucket's, the
// targets bucket's and the heartbeat stream's, moved there first) is SIGKILLed. Every node
// reconnects to another server and heartbeats again, no node loses its target or its
// declaration, and the rollout pauses and completes: every batch set once, in order, none
// skipped, no node left out.
func TestRolloutPausesAndCompletesWhenTheMetaLeaderAndThenTheStreamLeadersServerIsKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stock nats-server and runs three, six nodes and a rollout")
	}
	ctx := meshtest.Context(t, 6*time.Minute)
	began := time.Now()
	p := rolloutThroughServerLoss(t, ctx)
	// A figure, not a verdict: BenchmarkRolloutPauseOnServerLoss reports it.
	t.Logf("the batch during which the meta leader's server was killed took %s longer than the others (%s), the one the streams' leaders' was %s; the scenario took %s",
		p.Meta.Round(10*time.Millisecond), p.Normal.Round(10*time.Millisecond), p.Streams.Round(10*time.Millisecond), time.Since(began).Round(100*time.Millisecond))
}

// BenchmarkRolloutPauseOnServerLoss is the pause a server's loss causes a rollout, in the
// scenario of TestRolloutPausesAndCompletesWhenTheMetaLeaderAndThenTheStreamLeadersServerIsKilled:
// how much longer than the others a batch takes, from its targets set to the next batch's, with
// the controller's default flags, when the server holding the JetStream meta leader is SIGKILLed as it begins, and when the one
// holding the streams' leaders is.
func BenchmarkRolloutPauseOnServerLoss(b *testing.B) {
	var meta, streams, normal time.Duration
	for i := 0; i < b.N; i++ {
		ctx := meshtest.Context(b, 8*time.Minute)
		p := rolloutThroughServerLoss(b, ctx)
		meta, streams, normal = meta+p.Meta, streams+p.Streams, normal+p.Normal
	}
	b.ReportMetric(meta.Seconds()/float64(b.N), "s-pause-meta-leader-killed")
	b.ReportMetric(streams.Seconds()/float64(b.N), "s-pause-stream-leaders-killed")
	b.ReportMetric(normal.Seconds()/float64(b.N), "s-batch-without-loss")
}

// lossNodes is how many nodes the scenario runs; lossSteps cut them into five batches (1, 1,
// 1, 2, 1 nodes), so that a batch without a loss is left after both.
const (
	lossNodes = 6
	lossSteps = "25%,50%,75%,100%"
	lossSoak  = 3 * time.Second
)

// rolloutThroughServerLoss runs the scenario and returns the pauses the two losses caused.
func rolloutThroughServerLoss(tb testing.TB, ctx context.Context) lossPauses {
	tb.Helper()
	dir := tb.TempDir()
	c := startStockCluster(tb, ctx, dir)
	admin := c.Connect(ctx)
	sys := c.SysConn()
	beats, err := RecordHeartbeats(admin.NC, c.Names)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(beats.Stop)

	nodes := enrolNodes(tb, ctx, c, dir, lossNodes)
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	if err := beats.WaitAll(ctx, names, "v1.0.0 running and confirmed", RunningConfirmed("v1.0.0")); err != nil {
		tb.Fatal(err)
	}
	// A declaration each (a directory), applied before the rollout: the nodes must keep it.
	declared := map[string]uint64{}
	if err := os.Mkdir(filepath.Join(dir, "srv"), 0o755); err != nil {
		tb.Fatal(err)
	}
	for _, n := range nodes {
		doc := wire.Declaration{Version: wire.DeclarationVersion, Node: n.Name, Resources: []wire.Resource{
			{Type: wire.KindDirectory, ID: filepath.Join(dir, "srv", n.Name), Spec: json.RawMessage(`{"mode": "0755"}`)},
		}}
		kv, err := admin.JS.KeyValue(ctx, c.Names.Declarations())
		if err != nil {
			tb.Fatal(err)
		}
		if declared[n.Name], err = kv.Put(ctx, n.Name, doc.Marshal()); err != nil {
			tb.Fatal(err)
		}
	}
	if err := beats.WaitAll(ctx, names, "its declaration applied", func(b Beat) bool {
		return b.DeclarationRevision == declared[b.Node] && b.LastReconcile != nil && b.LastReconcile.OK
	}); err != nil {
		tb.Fatal(err)
	}
	relDir, err := c.Release.Build(ctx, "v1.1.0", build(tb, PkgHost, "v1.1.0"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Release.Publish(ctx, relDir); err != nil {
		tb.Fatal(err)
	}

	// The meta leader is on a server that has nodes, so that its loss moves some; the leaders of
	// what the rollout writes and reads (the rollouts and targets buckets, the heartbeat stream)
	// are elsewhere, so that this loss is the meta leader's alone.
	clients := nodeClients(tb, ctx, c, sys)
	meta := waitMetaLeader(tb, ctx, c, sys)
	if len(clients[meta]) == 0 {
		busiest := slices.MaxFunc(c.Servers(), func(a, b string) int { return len(clients[a]) - len(clients[b]) })
		body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": busiest}})
		waitFor(tb, ctx, "the meta leader to move to "+busiest, func() bool {
			sys.Request("$JS.API.META.LEADER.STEPDOWN", body, 2*time.Second)
			l, _ := c.MetaLeader(ctx, sys)
			return l == busiest
		})
		meta = busiest
	}
	others := slices.DeleteFunc(slices.Clone(c.Servers()), func(s string) bool { return s == meta })
	rolloutStreams := []string{"KV_" + c.Names.Rollouts(), "KV_" + c.Names.Targets(), c.Names.HeartbeatStream()}
	for _, s := range rolloutStreams {
		if l, err := c.StreamLeader(ctx, admin, s); err != nil || l == meta {
			if err := c.StepDown(ctx, admin, s, others[0]); err != nil {
				tb.Fatal(err)
			}
		}
	}
	before, err := snapshotStable(ctx, c, admin)
	if err != nil {
		tb.Fatal(err)
	}

	// The controller's flags are the defaults (--window 10m, --silent-after 90s, --alive 10m) but
	// for the shape of the scenario: one canary, five batches, a soak of seconds. Its URLs list
	// the meta leader's server first, so that the first loss most often takes its connection and
	// its heartbeat watch with it, the worst case for it (nats.go shuffles the list, so not
	// always: the log says how often it re-established its watch).
	ctl := NewController(c.Release.Bin, "rollout", "start", "v1.1.0", "--json", "--canary", "1", "--steps", lossSteps,
		"--soak", lossSoak.String(), "--key", c.Release.KeyPath(), "--nats", strings.Join(c.URLs(slices.Index(c.Servers(), meta)), ","))
	ctl.Env = c.Release.Env
	if err := ctl.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() {
		if tb.Failed() {
			tb.Logf("the controller printed:\n%s", ctl.Output())
			for _, s := range c.Servers() {
				tb.Logf("nats-server %s wrote (last 3000 bytes):\n%s", s, tail(c.Log(s), 3000))
			}
		}
		ctl.Kill(context.Background())
	}()
	event := func(what string, ok func(rollout.Event) bool) rollout.Event {
		tb.Helper()
		e, err := ctl.WaitEvent(ctx, what, ok)
		if err != nil {
			tb.Fatal(err)
		}
		return e
	}
	batchDone := func(i int) func(rollout.Event) bool {
		return func(e rollout.Event) bool { return e.Kind == rollout.EventBatchDone && e.Batch == i }
	}
	batchSet := func(i int) func(rollout.Event) bool {
		return func(e rollout.Event) bool { return e.Kind == rollout.EventBatch && e.Batch == i }
	}

	// 1. The meta leader's server, as the second batch's targets are set: that batch's nodes
	// fetch, restart and confirm, and the controller writes the batch done, through the loss.
	event("the second batch set", batchSet(2))
	on := clients[meta]
	tb.Logf("killing %s, the meta leader's server, with %v connected to it", meta, on)
	from := beats.Len()
	c.Kill(meta)
	killedIn := []int{2}
	resumed(tb, ctx, c, sys, beats, from, names, on, meta)

	// 2. It returns with nothing on disk, and catches up.
	c.Wipe(meta)
	c.Start(meta)
	wiped := time.Now()
	caughtUp(tb, ctx, c, sys, meta, before)
	tb.Logf("%s, started with its data wiped, was healthy and caught up %s later", meta, time.Since(wiped).Round(100*time.Millisecond))

	// 3. The streams' leaders, gathered on a server that neither came back wiped nor holds the
	// meta leader now, lost at the end of the next batch.
	nowMeta := waitMetaLeader(tb, ctx, c, sys)
	leaders := slices.DeleteFunc(slices.Clone(others), func(s string) bool { return s == nowMeta })[0]
	for _, s := range rolloutStreams {
		if err := c.StepDown(ctx, admin, s, leaders); err != nil {
			tb.Fatal(err)
		}
	}
	clients = nodeClients(tb, ctx, c, sys)
	st, _, err := rollout.Current(ctx, admin.JS, c.Names)
	if err != nil {
		tb.Fatal(err)
	}
	next := st.Current + 2 // 1-based: the batch after the one in progress
	if next > len(st.Batches) {
		tb.Fatalf("the rollout is in its last batch (%d of %d) before the second kill: give it more batches or a longer soak", next-1, len(st.Batches))
	}
	event(fmt.Sprintf("batch %d set", next), batchSet(next))
	for _, s := range rolloutStreams {
		if l, err := c.StreamLeader(ctx, admin, s); err != nil || l != leaders {
			tb.Logf("%s's leader moved to %s (%v) before the kill", s, l, err)
		}
	}
	on = clients[leaders]
	tb.Logf("killing %s, holding the leaders of the rollouts and targets buckets and the heartbeat stream, with %v connected to it", leaders, on)
	from = beats.Len()
	c.Kill(leaders)
	killedIn = append(killedIn, next)
	event(fmt.Sprintf("batch %d done", next), batchDone(next))
	resumed(tb, ctx, c, sys, beats, from, names, on, leaders)
	c.Start(leaders)

	// The rollout completes: every batch set once, in order; none skipped; nobody left out.
	code, err := ctl.Wait(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if code != 0 {
		tb.Fatalf("rollout start exited %d, want 0 (completed)", code)
	}
	st, _, err = rollout.Current(ctx, admin.JS, c.Names)
	if err != nil {
		tb.Fatal(err)
	}
	if st.Status != rollout.StatusCompleted || st.Halt != nil || len(st.LeftOut) != 0 || st.Current != len(st.Batches) || len(st.Batches) != 5 {
		tb.Fatalf("the rollout ended %s in batch %d of %d (halt %+v, left out %+v); want completed, all 5 batches, nobody left out",
			st.Status, st.Current, len(st.Batches), st.Halt, st.LeftOut)
	}
	for i, b := range st.Batches {
		if b.Started.IsZero() || b.Done.IsZero() || b.Done.Before(b.Started) || i > 0 && b.Started.Before(st.Batches[i-1].Done) {
			tb.Errorf("batch %d (%s) started %s, done %s; the one before done %s", i+1, b.Name, b.Started, b.Done, st.Batches[max(i-1, 0)].Done)
		}
	}
	var set []int
	for _, e := range ctl.Events() {
		switch e.Kind {
		case rollout.EventBatch:
			set = append(set, e.Batch)
		case rollout.EventHalted, rollout.EventLeftOut:
			tb.Errorf("the controller said %s: %+v", e.Kind, e)
		}
	}
	if !slices.Equal(set, []int{1, 2, 3, 4, 5}) {
		tb.Errorf("the controller set batches %v; want each of 1–5 once, in order", set)
	}
	if err := beats.WaitAll(ctx, names, "v1.1.0 running and confirmed", RunningConfirmed("v1.1.0")); err != nil {
		tb.Fatal(err)
	}
	batchOrder(tb, beats, st, "v1.1.0")
	var lastDone time.Time
	for _, e := range ctl.Events() {
		if e.Kind == rollout.EventBatchDone && e.Batch == len(st.Batches) {
			lastDone = e.Time
		}
	}
	kept(tb, beats, names, declared, "v1.1.0", lastDone)
	// Every node's host reads plans (decision 0047): none is given a target of its own, and the
	// plan was raised once per batch, in order — the bucket keeps its last five writes: the
	// last four batches' raises, then completed.
	for _, n := range names {
		if h := keyHistory(tb, ctx, admin, c.Names.Targets(), wire.NodeTargetKey(n)); len(h) != 0 {
			tb.Errorf("%s, whose host reads plans, was given a target of its own: %+v", n, h)
		}
	}
	var ins []int
	var states []string
	for _, p := range planWrites(tb, ctx, admin, c.Names) {
		if p.Rollout == st.ID {
			ins, states = append(ins, p.In), append(states, p.State)
		}
	}
	wantIns := []int{st.Batches[1].In, st.Batches[2].In, st.Batches[3].In, st.Batches[4].In, st.Batches[4].In}
	if !slices.Equal(ins, wantIns) || len(states) != 5 || states[4] != wire.PlanCompleted || slices.Contains(states[:4], wire.PlanCompleted) {
		tb.Errorf("the plan's last writes held %v batches (%v); want %v, each batch raised once, then completed", ins, states, wantIns)
	}
	waitFor(tb, ctx, "every server healthy again", func() bool { ok, _ := c.Healthy(ctx, sys, c.Servers()...); return ok })
	// The pause each loss caused: how much longer than the others its batch took, from its
	// targets set to the next batch's (the last batch's: to the rollout's completion), so that a
	// wait before the next batch begins counts too.
	took := map[int]time.Duration{}
	began := map[int]time.Time{}
	for _, e := range ctl.Events() {
		switch e.Kind {
		case rollout.EventBatch:
			began[e.Batch] = e.Time
			if prev, ok := began[e.Batch-1]; ok {
				took[e.Batch-1] = e.Time.Sub(prev)
			}
		case rollout.EventCompleted:
			took[len(st.Batches)] = e.Time.Sub(began[len(st.Batches)])
		}
	}
	var normal []time.Duration
	for i, d := range took {
		if !slices.Contains(killedIn, i) {
			normal = append(normal, d)
		}
	}
	slices.Sort(normal)
	p := lossPauses{Normal: normal[len(normal)/2]}
	p.Meta, p.Streams = took[killedIn[0]]-p.Normal, took[killedIn[1]]-p.Normal
	rewatched := 0
	for _, l := range ctl.Lines() {
		if strings.Contains(l, "the heartbeat watch stopped") {
			rewatched++
		}
	}
	tb.Logf("batches took %v; %v with a server killed as they began; the controller re-established its heartbeat watch %d times", took, killedIn, rewatched)
	return p
}

// lossPauses is how much longer than the others (Normal, their median) the batch took during
// which the meta leader's server was killed, and the one during which the streams' leaders'
// server was: from its targets set to the next batch's.
type lossPauses struct {
	Meta, Streams, Normal time.Duration
}

// enrolNodes runs two enrolment services and enrols n real nodes through them (`mesh-release
// enrol-token`, `mesh-host enrol`), node i given every server's URL starting with server i mod
// 3, and starts each node's launcher with v1.0.0 installed; heartbeats and reconciles every
// second, the launcher's clocks scaled (ScaledLauncherArgs).
func enrolNodes(tb testing.TB, ctx context.Context, c *stockCluster, dir string, n int) []*Node {
	tb.Helper()
	svc := NewController(c.Release.Bin, "enrol-service", "--data", c.Data, "--key-pub", filepath.Join(c.Release.KeyDir, "release.pub"))
	svc.Env = c.Release.Env
	if err := svc.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { svc.Kill(context.Background()) })
	if _, err := svc.WaitLine(ctx, "answering"); err != nil {
		tb.Fatal(err)
	}
	host := build(tb, PkgHost, "v1.0.0")
	launcher := build(tb, PkgLauncher, ToolVersion)
	var nodes []*Node
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("node-%d", i+1)
		cmd := exec.CommandContext(ctx, c.Release.Bin, "enrol-token", "--data", c.Data, "--node", name, "--url", strings.Join(c.URLs(i), ","))
		cmd.Env = append(os.Environ(), c.Release.Env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		token, err := cmd.Output()
		if err != nil {
			tb.Fatalf("mesh-release enrol-token --node %s: %v\n%s", name, err, stderr.String())
		}
		root := filepath.Join(dir, "nodes", name)
		if err := os.MkdirAll(root, 0o700); err != nil {
			tb.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, host, "enrol", "--root", root, strings.TrimSpace(string(token))).CombinedOutput(); err != nil {
			tb.Fatalf("mesh-host enrol %s: %v\n%s", name, err, out)
		}
		node := &Node{Name: name, Root: root, Launcher: launcher, Args: ScaledLauncherArgs,
			Env: []string{"MESH_HOST_RECONCILE_INTERVAL=1s", "MESH_HOST_HEARTBEAT_INTERVAL=1s"}}
		if err := node.PlaceVersion("v1.0.0", host); err != nil {
			tb.Fatal(err)
		}
		if err := node.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if tb.Failed() {
				tb.Logf("%s wrote (last 4000 bytes):\n%s", node.Name, tail(node.Log(), 4000))
			}
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if _, err := node.Stop(sctx); err != nil {
				node.Signal(syscall.SIGKILL)
				node.Wait(context.Background())
			}
		})
		nodes = append(nodes, node)
	}
	return nodes
}

// nodeClients is, for each running server, the nodes connected to it, from the servers' own
// connection lists (CONNZ).
func nodeClients(tb testing.TB, ctx context.Context, c *stockCluster, sys *nats.Conn) map[string][]string {
	tb.Helper()
	all, err := c.Clients(ctx, sys, "")
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string][]string{}
	for s, names := range all {
		for _, n := range names {
			if node, ok := strings.CutPrefix(n, "mesh-host "); ok {
				out[s] = append(out[s], node)
			}
		}
	}
	return out
}

// waitMetaLeader waits until the running servers agree on a JetStream meta leader.
func waitMetaLeader(tb testing.TB, ctx context.Context, c *stockCluster, sys *nats.Conn) string {
	tb.Helper()
	var leader string
	waitFor(tb, ctx, "the servers to agree on a JetStream meta leader", func() bool {
		leader, _ = c.MetaLeader(ctx, sys)
		return leader != ""
	})
	return leader
}

// resumed checks what must hold once server gone is lost: every node heartbeats again after
// heartbeat from, and the nodes that were connected to it (on) are connected to another.
func resumed(tb testing.TB, ctx context.Context, c *stockCluster, sys *nats.Conn, beats *HeartbeatLog, from int, names, on []string, gone string) {
	tb.Helper()
	if len(on) == 0 {
		// Which server a node is on is nats.go's shuffle and the first loss's reconnections:
		// none on this one leaves its loss to the controller and the streams' leaders alone.
		tb.Logf("no node was connected to %s when it was killed: its loss tested the controller and the streams' leaders only", gone)
	}
	for _, n := range names {
		if _, err := beats.WaitAfter(ctx, from, n+" heartbeating after "+gone+" was killed", func(b Beat) bool { return b.Node == n }); err != nil {
			tb.Fatal(err)
		}
	}
	waitFor(tb, ctx, fmt.Sprintf("%v, on %s, to be connected to another server", on, gone), func() bool {
		clients := nodeClients(tb, ctx, c, sys)
		var connected []string
		for s, nodes := range clients {
			if s != gone {
				connected = append(connected, nodes...)
			}
		}
		slices.Sort(connected)
		return slices.Equal(connected, slices.Sorted(slices.Values(names)))
	})
}

// stable is what the rollout does not change, as one server serves it: each stable bucket's
// keys and last values, the archives' objects, and each stable stream's messages and last
// sequence.
type stable struct {
	KV      map[string]map[string]string // bucket → key → value
	Objects []string                     // name digest size
	Streams map[string]string            // stream → "N messages, last sequence S"
}

// stableStreams are the streams of the buckets and store stable holds.
func stableStreams(n wire.Names) []string {
	return []string{"KV_" + n.Declarations(), "KV_" + n.Releases(), "KV_" + n.Nodes(), "OBJ_" + n.Archives()}
}

func streamCounts(st jetstream.StreamState) string {
	return fmt.Sprintf("%d messages, last sequence %d", st.Msgs, st.LastSeq)
}

// snapshotStable reads what the rollout leaves alone through conn: the declarations, releases
// and enrolled nodes buckets, the archives store's objects, and their streams' counts.
func snapshotStable(ctx context.Context, c *stockCluster, conn *bus.Conn) (s stable, err error) {
	s.KV, s.Streams = map[string]map[string]string{}, map[string]string{}
	for _, name := range stableStreams(c.Names) {
		st, err := conn.JS.Stream(ctx, name)
		if err != nil {
			return s, fmt.Errorf("stream %s: %w", name, err)
		}
		s.Streams[name] = streamCounts(st.CachedInfo().State)
	}
	for _, bucket := range []string{c.Names.Declarations(), c.Names.Releases(), c.Names.Nodes()} {
		kv, err := conn.JS.KeyValue(ctx, bucket)
		if err != nil {
			return s, fmt.Errorf("bucket %s: %w", bucket, err)
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return s, fmt.Errorf("bucket %s's keys: %w", bucket, err)
		}
		s.KV[bucket] = map[string]string{}
		for k := range keys.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				return s, fmt.Errorf("bucket %s key %s: %w", bucket, k, err)
			}
			s.KV[bucket][k] = string(e.Value())
		}
	}
	// Each release's archive, read whole: its object's digest and size, and the bytes' own.
	obj, err := conn.JS.ObjectStore(ctx, c.Names.Archives())
	if err != nil {
		return s, err
	}
	for _, manifest := range s.KV[c.Names.Releases()] {
		m, err := wire.ParseManifest([]byte(manifest))
		if err != nil {
			return s, fmt.Errorf("a release's manifest does not read (%v): %s", err, tail(manifest, 200))
		}
		for _, p := range m.PlatformList() {
			pb, err := m.For(p)
			if err != nil {
				return s, err
			}
			info, err := obj.GetInfo(ctx, pb.Object)
			if err != nil {
				return s, fmt.Errorf("archive %s: %w", pb.Object, err)
			}
			b, err := obj.GetBytes(ctx, pb.Object)
			if err != nil {
				return s, fmt.Errorf("read archive %s: %w", pb.Object, err)
			}
			s.Objects = append(s.Objects, fmt.Sprintf("%s %s %d, read %s", pb.Object, info.Digest, info.Size, digest.FromBytes(b)))
		}
	}
	slices.Sort(s.Objects)
	return s, nil
}

// caughtUp waits until server name, started again with its data wiped, says it is healthy (its
// meta state and every replica it holds current) and knows the meta leader, then checks that
// nothing was lost: its own replicas of the stable streams hold what they held before the loss
// (its JSZ), and what it serves, read through it alone, is what was read before.
func caughtUp(tb testing.TB, ctx context.Context, c *stockCluster, sys *nats.Conn, name string, before stable) {
	tb.Helper()
	var why string
	defer func() {
		if tb.Failed() {
			tb.Logf("the servers' health when it ended: %s", why)
		}
	}()
	waitFor(tb, ctx, name+", wiped, to be healthy again", func() bool {
		var ok bool
		ok, why = c.Healthy(ctx, sys, c.Servers()...)
		return ok
	})
	jsz, err := ping[server.JSInfo](ctx, len(c.Servers()), sys, "JSZ", server.JSzOptions{Accounts: true, Streams: true})
	if err != nil {
		tb.Fatal(err)
	}
	own, ok := jsz[name]
	if !ok || own.Meta == nil || own.Meta.Leader == "" {
		tb.Fatalf("%s, wiped and back, does not know the meta leader: %+v", name, own.Meta)
	}
	for s, info := range jsz {
		if info.Streams != own.Streams {
			tb.Errorf("%s holds %d streams, %s %d", name, own.Streams, s, info.Streams)
		}
	}
	local := map[string]string{}
	for _, a := range own.AccountDetails {
		for _, sd := range a.Streams {
			local[sd.Name] = fmt.Sprintf("%d messages, last sequence %d", sd.State.Msgs, sd.State.LastSeq)
		}
	}
	for _, st := range stableStreams(c.Names) {
		if local[st] != before.Streams[st] {
			tb.Errorf("%s's own replica of %s holds %q; before it was lost the stream held %q", name, st, local[st], before.Streams[st])
		}
	}
	conn, err := c.ConnectOnly(ctx, name)
	if err != nil {
		tb.Fatalf("connect to %s alone: %v", name, err)
	}
	defer conn.Close()
	after, err := snapshotStable(ctx, c, conn)
	if err != nil {
		tb.Fatalf("read through %s alone: %v", name, err)
	}
	for bucket, keys := range before.KV {
		for k, v := range keys {
			if got, ok := after.KV[bucket][k]; !ok || got != v {
				tb.Errorf("read through %s alone, bucket %s key %s is %q (present %v); before it was lost: %q", name, bucket, k, tail(got, 200), ok, tail(v, 200))
			}
		}
		if len(after.KV[bucket]) != len(keys) {
			tb.Errorf("read through %s alone, bucket %s holds %d keys; before it was lost %d", name, bucket, len(after.KV[bucket]), len(keys))
		}
	}
	if !slices.Equal(after.Objects, before.Objects) {
		tb.Errorf("read through %s alone, the archives are %q; before it was lost %q", name, after.Objects, before.Objects)
	}
	for st, counts := range before.Streams {
		if after.Streams[st] != counts {
			tb.Errorf("read through %s alone, stream %s holds %s; before it was lost %s", name, st, after.Streams[st], counts)
		}
	}
	if len(before.KV[c.Names.Declarations()]) != lossNodes || len(before.Objects) == 0 {
		tb.Errorf("the stable snapshot holds %d declarations and %d archives: it checks nothing", len(before.KV[c.Names.Declarations()]), len(before.Objects))
	}
}

// batchOrder checks, from the heartbeats, that no node of a batch heard of version (targeted,
// fetching, staged or running it) before every node of the batch before had heartbeat it
// running and confirmed.
func batchOrder(tb testing.TB, beats *HeartbeatLog, st rollout.State, version string) {
	tb.Helper()
	touched := func(b Beat) bool {
		return b.Target == version || b.Running == version || b.Fetch != nil && b.Fetch.Version == version || slices.Contains(b.Staged, version)
	}
	for i := 1; i < len(st.Batches); i++ {
		var confirmed time.Time
		for _, n := range BatchNodes(st, i-1) {
			b, ok := beats.First(func(b Beat) bool { return b.Node == n && RunningConfirmed(version)(b) })
			if !ok {
				tb.Errorf("%s (batch %d) never heartbeat %s running and confirmed", n, i, version)
				continue
			}
			confirmed = later(confirmed, b.At)
		}
		for _, n := range BatchNodes(st, i) {
			if b, ok := beats.First(func(b Beat) bool { return b.Node == n && touched(b) }); ok && b.At.Before(confirmed) {
				tb.Errorf("%s (batch %d) heartbeat %q before batch %d had confirmed %s", n, i+1, Describe(b.Heartbeat), i, version)
			}
		}
	}
}

// kept checks that no node lost its target or its declaration: within one host process (a new
// one starts knowing neither, until its link has read them), once a heartbeat names version as
// its target, or the revision declared, every later heartbeat of that process does — the target
// until the rollout's last batch was done (then its per-node keys are cleared for the fleet
// key, another story).
func kept(tb testing.TB, beats *HeartbeatLog, names []string, declared map[string]uint64, version string, until time.Time) {
	tb.Helper()
	for _, n := range names {
		of := beats.Of(n)
		var targeted, applied bool
		for i, b := range of {
			if i > 0 && (b.Running != of[i-1].Running || b.UptimeS < of[i-1].UptimeS) {
				targeted, applied = false, false // another host process
			}
			lost := ""
			switch {
			case b.Target == version:
				targeted = true
			case targeted && b.At.Before(until):
				lost = fmt.Sprintf("target %q after %s", b.Target, version)
			}
			switch {
			case b.DeclarationRevision == declared[n]:
				applied = true
			case applied:
				lost = fmt.Sprintf("declaration revision %d after %d", b.DeclarationRevision, declared[n])
			}
			if lost != "" {
				var around []string
				for _, a := range of[max(0, i-3):min(len(of), i+3)] {
					around = append(around, a.At.Format("15:04:05.000")+" "+Describe(a.Heartbeat))
				}
				tb.Errorf("%s's host lost what it had: %s at %s:\n%s", n, lost, b.At.Format("15:04:05.000"), strings.Join(around, "\n"))
				break
			}
		}
	}
}

// keyHistory is the history of key in bucket (what the bucket keeps), oldest first.
// planWrites are the values the plan key held (the rollouts bucket keeps the last five), oldest
// first.
func planWrites(tb testing.TB, ctx context.Context, conn *bus.Conn, names wire.Names) []wire.Plan {
	tb.Helper()
	kv, err := conn.JS.KeyValue(ctx, names.Rollouts())
	if err != nil {
		tb.Fatal(err)
	}
	entries, err := kv.History(ctx, wire.PlanKey)
	if err != nil {
		tb.Fatalf("history of the plan key: %v", err)
	}
	var out []wire.Plan
	for _, e := range entries {
		p, err := wire.ParsePlan(e.Value())
		if err != nil {
			tb.Fatalf("plan revision %d: %v", e.Revision(), err)
		}
		out = append(out, p)
	}
	return out
}

func keyHistory(tb testing.TB, ctx context.Context, conn *bus.Conn, bucket, key string) []targetPut {
	tb.Helper()
	kv, err := conn.JS.KeyValue(ctx, bucket)
	if err != nil {
		tb.Fatal(err)
	}
	entries, err := kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		tb.Fatalf("history of %s %s: %v", bucket, key, err)
	}
	var out []targetPut
	for _, e := range entries {
		p := targetPut{Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
		if !p.Deleted {
			if t, err := wire.ParseTarget(e.Value()); err == nil {
				p.Version = t.Version
			}
		}
		out = append(out, p)
	}
	return out
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
