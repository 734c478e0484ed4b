package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// BenchmarkRolloutThousandHosts is the figure "1,000 in-process hosts on one NATS server,
// canary 2 then 1%,10%,50%,100%: time to complete, the controller's CPU and peak RSS". The
// server (`mesh-release serve`) and the controller (`mesh-release rollout start`) are child
// processes built from this tree, so their CPU and memory are their own. Each host is a real
// host.Host run loop in this process with its own root, link and delivery, under an in-process
// launcher (launchInProcess): it fetches, verifies and preflights the release (a 160-byte
// binary, tinyRelease), stands aside for it, runs it and confirms it. One op is one rollout
// (soak 2s, heartbeats every second):
//
//	go test -run '^$' -bench RolloutThousandHosts -benchtime 1x ./lab
//
// MESH_BENCH_HOSTS (default 1000) changes the number of hosts, MESH_BENCH_HEARTBEAT_MS (default
// 1000) their heartbeat interval; MESH_BENCH_PPROF=DIR profiles the controller into DIR (see
// profiledOverlay). Past 1,000 hosts this relies on the bus taking more than nats-server's
// default of 1,000 consumers per stream (release/bus: serve and init see to it).
func BenchmarkRolloutThousandHosts(b *testing.B) {
	hosts := envInt("MESH_BENCH_HOSTS", 1000)
	heartbeat := time.Duration(envInt("MESH_BENCH_HEARTBEAT_MS", 1000)) * time.Millisecond
	// A thousand hosts share this process's scheduler, as no real host does. A host's
	// preflight collects its child's output on a goroutine, and behind hundreds of runnable
	// goroutines on two Ps that goroutine can wait past the 2s WaitDelay of host/deliver; the
	// host then retries the preflight (it once refused the release for good), which would
	// lengthen the figure. More Ps keep that wait short.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(16, runtime.NumCPU())))
	if _, ok := tinyRelease("v1.1.0"); !ok {
		b.Skip("the lab's tiny release binary is amd64 machine code")
	}
	ctl, profile := controllerBinary(b)
	tmp := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serve, url := serveBus(ctx, b, filepath.Join(tmp, "bus"))
	defer func() { cancel(); serve.Wait() }()
	rel := &Release{Bin: build(b, PkgRelease, "v0.0.0-lab"), KeyDir: filepath.Join(tmp, "keys"), Out: filepath.Join(tmp, "out"), NATS: url}
	pub, err := rel.Keygen(ctx)
	if err != nil {
		b.Fatal(err)
	}

	// What every node said last, and how many heartbeats reached the server, seen from outside.
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var received atomic.Int64
	var mu sync.Mutex
	last := map[string]wire.Heartbeat{}
	if _, err := nc.Subscribe(wire.NamesFor("mesh").HeartbeatWildcard(), func(m *nats.Msg) {
		received.Add(1)
		if hb, err := wire.ParseHeartbeat(m.Data); err == nil {
			mu.Lock()
			last[hb.Node] = hb
			mu.Unlock()
		}
	}); err != nil {
		b.Fatal(err)
	}
	confirmed := func(v string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, hb := range last {
			if hb.Running == v && hb.KnownGood == v && hb.State == wire.StateRunning {
				n++
			}
		}
		return n
	}

	quiet := slog.New(slog.DiscardHandler)
	hostCtx, stopHosts := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < hosts; i++ {
		root := filepath.Join(tmp, fmt.Sprintf("n%04d", i))
		if err := fakeRoot(root, "v1.0.0"); err != nil {
			b.Fatal(err)
		}
		cfg := config.Config{
			Root: root, Node: fmt.Sprintf("n%04d", i), NATSURLs: []string{url}, Prefix: "mesh", TrustedKeys: []string{pub},
			ReconcileInterval: config.Duration(10 * time.Minute), HeartbeatInterval: config.Duration(heartbeat),
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := launchInProcess(hostCtx, cfg, quiet); err != nil {
				failed.Add(1)
				b.Errorf("%s: %v", cfg.Node, err)
			}
		}()
	}
	defer func() { stopHosts(); wg.Wait() }() // hosts stop before the server goes
	waitUntil(b, 3*time.Minute, func() bool { return confirmed("v1.0.0") == hosts }, func() string {
		return fmt.Sprintf("%d of %d hosts heartbeat running v1.0.0", confirmed("v1.0.0"), hosts)
	})

	var total struct {
		wall, cpu, serverCPU, hostsCPU time.Duration
		peak                           int64
		heartbeats                     int64
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		v := fmt.Sprintf("v1.%d.0", i+1)
		exe, _ := tinyRelease(v)
		path := filepath.Join(tmp, "mesh-host-"+v)
		if err := os.WriteFile(path, exe, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := rel.Ship(ctx, v, path); err != nil {
			b.Fatal(err)
		}
		s0, _ := CPUTicks(serve.Process.Pid)
		r0, self0 := received.Load(), selfCPU()
		b.StartTimer()
		run := runController(ctx, b, 10*time.Minute, ctl, profile(v), nil, "rollout", "start", v, "--json", "--nats", url,
			"--canary", "2", "--steps", "1%,10%,50%,100%", "--window", "5m", "--soak", "2s", "--alive", "5m", "--silent-after", "20s", "--key", rel.KeyPath())
		b.StopTimer()
		s1, _ := CPUTicks(serve.Process.Pid)
		total.hostsCPU += selfCPU() - self0
		if run.Code != 0 {
			b.Fatalf("the rollout of %s exited %d, want 0 (completed):\n%s\n%s", v, run.Code, eventLines(run), run.Stderr)
		}
		if n := confirmed(v); n != hosts {
			b.Errorf("%s completed with %d of %d hosts heartbeating it running and confirmed", v, n, hosts)
		}
		checkBatchOrder(b, run)
		b.Logf("%s: %s\n%s", v, run.summary(), batchTimeline(run))
		total.wall += run.Wall
		total.cpu += run.CPU
		total.peak = max(total.peak, run.PeakRSS)
		total.serverCPU += time.Duration(s1-s0) * 10 * time.Millisecond
		total.heartbeats += received.Load() - r0
	}
	sRSS, _ := MemoryKB(serve.Process.Pid, "VmRSS")
	sPeak, _ := MemoryKB(serve.Process.Pid, "VmHWM")
	n := float64(b.N)
	b.ReportMetric(total.wall.Seconds()/n, "rollout-s")
	b.ReportMetric(total.cpu.Seconds()/n, "controller-cpu-s")
	b.ReportMetric(float64(total.peak)/1024, "controller-peak-rss-MB")
	b.ReportMetric(total.serverCPU.Seconds()/n, "server-cpu-s")
	b.ReportMetric(total.serverCPU.Seconds()/total.wall.Seconds()*100, "server-cpu-%")
	b.ReportMetric(float64(sRSS)/1024, "server-rss-MB")
	b.ReportMetric(float64(sPeak)/1024, "server-peak-rss-MB")
	b.ReportMetric(float64(total.heartbeats)/total.wall.Seconds(), "heartbeats/s")
	b.ReportMetric(total.hostsCPU.Seconds()/total.wall.Seconds()*100, "hosts-cpu-%")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRolloutTenThousandSimulatedNodes is the scale-out figure: 10,000 light simulated
// nodes (lab/sim: the wire protocol only) on 30 connections (334 nodes each) over a 3-server
// NATS cluster, each server a stock nats-server child process (startStockCluster), with R3
// buckets and heartbeat stream.
// Nodes follow their four keys as hosts do (a subscription and direct gets, no consumer),
// heartbeat every 3s, start a newer target 0.5–3s after it is set and confirm it 0.5s later.
// Two rollouts with the real controller as a child process, canary 2 then 1%,10%,50%,100%,
// soak 2s: v1.1.0 completes; v1.2.0, which 3 nodes of the 10% batch roll back, halts in that
// batch with no node of a later batch targeted (runScale asserts both). One op is the pair:
//
//	go test -run '^$' -bench RolloutTenThousandSimulatedNodes -benchtime 1x ./lab
//
// MESH_BENCH_NODES (default 10000) and MESH_BENCH_SHARDS (default 30) change the sizes;
// MESH_BENCH_WATCH=1 makes each node follow its keys with four KV watches (an ordered consumer
// each, as hosts did before decision 0022) instead; MESH_BENCH_PPROF=DIR profiles the
// controller into DIR.
func BenchmarkRolloutTenThousandSimulatedNodes(b *testing.B) {
	benchScale(b, scaleParams{
		Nodes: envInt("MESH_BENCH_NODES", 10000), Shards: envInt("MESH_BENCH_SHARDS", 30), Servers: 3,
		Heartbeat: 3 * time.Second, StartMin: 500 * time.Millisecond, StartMax: 3 * time.Second, ConfirmAfter: 500 * time.Millisecond,
		Canary: 2, Steps: []int{1, 10, 50, 100}, Soak: 2 * time.Second, Window: 2 * time.Minute, Silent: 20 * time.Second,
		FailBatch: 2, FailCount: 3, Watch: os.Getenv("MESH_BENCH_WATCH") != "",
	})
}

// BenchmarkRolloutHundredThousandSimulatedNodes is issue 20's figure at 100,000 nodes: as
// BenchmarkRolloutTenThousandSimulatedNodes, with 100,000 simulated nodes on 100 connections
// (1,000 nodes each) over the 3-server cluster, heartbeating every 30s as hosts do by default,
// silent after 90s. v1.1.0 completes batch by batch (canary 2, then 1%, 10%, 50%, 100%) and
// v1.2.0, which 3 nodes of the 10% batch roll back, halts there with nothing targeted after.
// It reports the controller's CPU and peak RSS, each server's CPU and RSS, the consumers on
// the servers, heartbeats/s and the rollout's time minus its configured waits:
//
//	go test -run '^$' -bench RolloutHundredThousandSimulatedNodes -benchtime 1x -timeout 60m ./lab
//
// MESH_BENCH_BIG_NODES (default 100000) and MESH_BENCH_BIG_SHARDS (default 100) change the
// sizes (`make bench` runs it at its default); MESH_BENCH_WATCH and MESH_BENCH_PPROF as above.
func BenchmarkRolloutHundredThousandSimulatedNodes(b *testing.B) {
	benchScale(b, scaleParams{
		Nodes: envInt("MESH_BENCH_BIG_NODES", 100000), Shards: envInt("MESH_BENCH_BIG_SHARDS", 100), Servers: 3,
		Heartbeat: 30 * time.Second, StartMin: 500 * time.Millisecond, StartMax: 3 * time.Second, ConfirmAfter: 500 * time.Millisecond,
		Canary: 2, Steps: []int{1, 10, 50, 100}, Soak: 2 * time.Second, Window: 5 * time.Minute, Silent: 90 * time.Second,
		FailBatch: 2, FailCount: 3, Watch: os.Getenv("MESH_BENCH_WATCH") != "",
	})
}

// benchScale runs runScale b.N times, prints each pair's figures in full (b.Log would cut
// them to a few lines) and reports the last pair's.
func benchScale(b *testing.B, p scaleParams) {
	for i := 0; i < b.N; i++ {
		good, bad := runScale(b, p)
		waits := configuredWaits(p, good.Run)
		fmt.Print(scaleSummary(p, good, bad, waits))
		if i < b.N-1 {
			continue
		}
		for _, f := range []struct {
			name string
			scaleFigures
		}{{"complete", good}, {"halt", bad}} {
			b.ReportMetric(f.Run.Wall.Seconds(), f.name+"-s")
			b.ReportMetric(f.Run.CPU.Seconds(), f.name+"-controller-cpu-s")
			b.ReportMetric(float64(f.Run.PeakRSS)/1024, f.name+"-controller-peak-rss-MB")
		}
		b.ReportMetric((good.Run.Wall - waits).Seconds(), "complete-minus-waits-s")
		b.ReportMetric(controllerSteps(good.Run).Seconds(), "complete-targeting-s")
		b.ReportMetric(float64(good.Writes.Plan), "complete-plan-writes")
		b.ReportMetric(float64(good.Writes.Node), "complete-node-target-writes")
		b.ReportMetric(float64(good.Writes.Fleet), "complete-fleet-writes")
		b.ReportMetric(float64(bad.Writes.Plan), "halt-plan-writes")
		b.ReportMetric(good.Run.CPU.Seconds()/good.Run.Wall.Seconds()*100, "complete-controller-cpu-%")
		for j, s := range good.Servers {
			b.ReportMetric(s.CPU.Seconds()/good.Run.Wall.Seconds()*100, fmt.Sprintf("s%d-cpu-%%", j+1))
			b.ReportMetric(float64(good.Fleet.Servers[j].RSS)/1024, fmt.Sprintf("s%d-rss-MB", j+1))
			b.ReportMetric(float64(bad.Servers[j].PeakRSS)/1024, fmt.Sprintf("s%d-peak-rss-MB", j+1))
		}
		b.ReportMetric(good.Fleet.Setup.Seconds(), "nodes-setup-s")
		b.ReportMetric(float64(good.Fleet.Consumers), "node-consumers")
		b.ReportMetric(float64(good.Fleet.Consumers)/float64(p.Nodes), "consumers/node")
		b.ReportMetric(float64(good.Heartbeats)/good.Run.Wall.Seconds(), "heartbeats/s")
		b.ReportMetric(good.Self.Seconds()/good.Run.Wall.Seconds()*100, "sim-cpu-%")
	}
	b.ReportMetric(0, "ns/op")
}

// scaleSummary is the figures of a pair of rollouts as text.
func scaleSummary(p scaleParams, good, bad scaleFigures, waits time.Duration) string {
	var w strings.Builder
	how := "a subscription on each key and direct gets"
	if p.Watch {
		how = "a KV watch on each key"
	}
	ff := good.Fleet
	fmt.Fprintf(&w, "%d simulated nodes on %d connections (%d nodes each) over %d stock nats-server processes, R3, follow their four keys (%s), heartbeat every %s; ready in %.1fs, %d consumers on the servers (%.2f per node)\n",
		p.Nodes, p.Shards, (p.Nodes+p.Shards-1)/p.Shards, p.Servers, how, p.Heartbeat, ff.Setup.Seconds(), ff.Consumers, float64(ff.Consumers)/float64(p.Nodes))
	for _, s := range ff.Servers {
		fmt.Fprintf(&w, "  %s: %.1f CPU-s to take them, RSS %.0f MB then\n", s.Name, s.CPU.Seconds(), float64(s.RSS)/1024)
	}
	for _, f := range []scaleFigures{good, bad} {
		fmt.Fprintf(&w, "%s: %s\n%s  servers: %s\n  simulated nodes (the test process): %.1f CPU-s; heartbeats stored %.0f/s; consumers on the servers once targeting began: %d\n  writes of what nodes follow: plan %d, nodes' own targets %d, fleet key %d\n",
			f.Version, f.Run.summary(), batchTimeline(f.Run), serverSummary(f), f.Self.Seconds(), float64(f.Heartbeats)/f.Run.Wall.Seconds(), f.Consumers,
			f.Writes.Plan, f.Writes.Node, f.Writes.Fleet)
	}
	fmt.Fprintf(&w, "v1.1.0 took %.1fs; its configured waits at most %.1fs (per batch: a node starts within %s, confirms %s later, and its next heartbeat at least %s after, within %s, shows the soak): at least %.1fs of its own; the controller setting targets and completing alone %.1fs\n",
		good.Run.Wall.Seconds(), waits.Seconds(), p.StartMax, p.ConfirmAfter, p.Soak, p.Heartbeat, (good.Run.Wall - waits).Seconds(), controllerSteps(good.Run).Seconds())
	return w.String()
}

// configuredWaits is the most a completed rollout's configuration makes it wait: per batch,
// the longest a node waits before starting the target, the wait before it confirms, and the
// soak, which a node's regular heartbeat shows (decision 0006): the first at least the soak
// after it confirmed, so up to a heartbeat interval later.
func configuredWaits(p scaleParams, run controllerRun) time.Duration {
	batches := 0
	for _, ev := range run.Events {
		if ev.Kind == rollout.EventBatchDone {
			batches++
		}
	}
	return time.Duration(batches) * (p.StartMax + p.ConfirmAfter + p.Soak + p.Heartbeat)
}

// controllerSteps is the time between a batch being done and the next batch's targets being
// set (and, at the end, the rollout being completed): the controller's own writing, what no
// configuration waits for.
func controllerSteps(run controllerRun) time.Duration {
	var total time.Duration
	var prev time.Time
	if ev, ok := run.Last(rollout.EventStarted); ok {
		prev = ev.Time
	}
	for _, ev := range run.Events {
		switch ev.Kind {
		case rollout.EventBatch, rollout.EventCompleted:
			total += ev.Time.Sub(prev)
		case rollout.EventBatchDone, rollout.EventHalted:
			prev = ev.Time
		}
	}
	return total
}

// serveBus runs `mesh-release serve` as a child process on a free port until ctx ends.
func serveBus(ctx context.Context, tb testing.TB, dir string) (*exec.Cmd, string) {
	tb.Helper()
	serve := exec.CommandContext(ctx, build(tb, PkgRelease, "v0.0.0-lab"), "serve", "--data", dir, "--listen", "127.0.0.1:0", "--insecure-no-auth")
	out, err := serve.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		tb.Fatal(err)
	}
	url := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving the mesh bus on "); ok {
			url, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if url == "" {
		serve.Process.Kill()
		tb.Fatal("serve did not say where it listens")
	}
	go io.Copy(io.Discard, out)
	return serve, url
}

// summary is one line of what the controller cost.
func (r controllerRun) summary() string {
	return fmt.Sprintf("exit %d in %.1fs; controller %.2f CPU-s (%.1f%% of a core), peak RSS %.1f MB",
		r.Code, r.Wall.Seconds(), r.CPU.Seconds(), r.CPU.Seconds()/r.Wall.Seconds()*100, float64(r.PeakRSS)/1024)
}

// batchTimeline says, per batch, how long the controller took to set its targets after the
// previous batch was done (its own overhead) and how long the batch then ran until done
// (the nodes' start, confirm and soak, and the controller noticing).
func batchTimeline(r controllerRun) string {
	var b strings.Builder
	prev := time.Time{}
	if ev, ok := r.Last(rollout.EventStarted); ok {
		prev = ev.Time
	}
	began := map[int]time.Time{}
	for _, ev := range r.Events {
		switch ev.Kind {
		case rollout.EventBatch:
			began[ev.Batch] = ev.Time
			fmt.Fprintf(&b, "  batch %d/%d %-6s %5d nodes: targets set %6.0f ms after the previous step", ev.Batch, ev.Batches, ev.BatchName, ev.Nodes, ev.Time.Sub(prev).Seconds()*1000)
		case rollout.EventBatchDone:
			fmt.Fprintf(&b, ", done %5.1f s later\n", ev.Time.Sub(began[ev.Batch]).Seconds())
			prev = ev.Time
		case rollout.EventHalted:
			fmt.Fprintf(&b, ", halted %5.1f s later (%d nodes named)\n", ev.Time.Sub(began[ev.Batch]).Seconds(), len(ev.Reasons))
			prev = ev.Time
		case rollout.EventCompleted:
			fmt.Fprintf(&b, "  completed (fleet key set, own keys cleared) %.0f ms after the last batch\n", ev.Time.Sub(prev).Seconds()*1000)
		}
	}
	return b.String()
}

func serverSummary(f scaleFigures) string {
	var parts []string
	for _, s := range f.Servers {
		parts = append(parts, fmt.Sprintf("%s %.1f%% (%.1f CPU-s) RSS %.0f MB peak %.0f MB", s.Name,
			s.CPU.Seconds()/f.Run.Wall.Seconds()*100, s.CPU.Seconds(), float64(s.RSS)/1024, float64(s.PeakRSS)/1024))
	}
	return strings.Join(parts, "; ")
}

// waitUntil polls ok every 100ms until it holds or d passes, then fails saying what.
func waitUntil(tb testing.TB, d time.Duration, ok func() bool, what func() string) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %s", d, what())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// envInt reads a positive integer from the environment, or gives def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
