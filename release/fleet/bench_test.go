package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/wire"
	"github.com/novox/mesh-host/release/bus"
)

// BenchmarkFleetRead measures reading every node's last heartbeat (what `mesh-release fleet`
// does) with 1,000 nodes in the stream.
func BenchmarkFleetRead(b *testing.B) {
	dir := b.TempDir()
	ctx := context.Background()
	s, err := bus.Serve(ctx, bus.ServeOptions{DataDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	c, err := bus.Connect(ctx, s.ClientURL(), "")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := bus.Init(ctx, c.JS, names); err != nil {
		b.Fatal(err)
	}
	const nodes = 1000
	for i := 0; i < nodes; i++ {
		node := fmt.Sprintf("n%04d", i)
		hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", SentAt: time.Now().UTC()}
		if _, err := c.JS.Publish(ctx, names.Heartbeat(node), hb.Marshal()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		es, err := Read(ctx, c.JS, names)
		if err != nil || len(es) != nodes {
			b.Fatalf("read %d entries, %v", len(es), err)
		}
		_ = Rows(es, time.Now(), DefaultSilentAfter)
	}
}

// BenchmarkFleetHosts is the harness for the issue's figure "one NATS server with 1,000
// in-process hosts heartbeating every second: the server's and the fleet view's CPU and memory".
// The server (`mesh-release serve`) and the fleet view (`mesh-release fleet --watch --json`)
// run as child processes built from this tree, so their CPU and memory are their own; the hosts
// are link.Link values in this process, each with its own connection and watches, as in
// production. One op is one second of wall time; run it with a count of seconds:
//
//	go test -run '^$' -bench BenchmarkFleetHosts -benchtime 20x ./release/fleet
//
// MESH_BENCH_HOSTS (default 1000) and MESH_BENCH_INTERVAL (default 1s) change the load.
func BenchmarkFleetHosts(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("reads /proc")
	}
	hosts := envInt("MESH_BENCH_HOSTS", 1000)
	interval := time.Second
	if v := os.Getenv("MESH_BENCH_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		interval = d
	}
	tmp := b.TempDir()
	bin := filepath.Join(tmp, "mesh-release")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/novox/mesh-host/release/cmd/mesh-release").CombinedOutput(); err != nil {
		b.Fatalf("build mesh-release: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	serve := exec.CommandContext(ctx, bin, "serve", "--data", filepath.Join(tmp, "bus"), "--listen", "127.0.0.1:0")
	serveOut, err := serve.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cancel(); serve.Wait() }()
	url := ""
	sc := bufio.NewScanner(serveOut)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving the mesh bus on "); ok {
			url, _, _ = strings.Cut(rest, " ")
			break
		}
	}
	if url == "" {
		b.Fatal("serve did not say where it listens")
	}
	go io.Copy(io.Discard, serveOut)

	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	links := make([]*link.Link, hosts)
	for i := range links {
		node := fmt.Sprintf("bench%04d", i)
		l, err := link.Open(ctx, link.Options{URLs: []string{url}, Node: node, Names: names})
		if err != nil {
			b.Fatal(err)
		}
		links[i] = l
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			connected := false
			for ev := range l.Events() {
				if _, ok := ev.(link.Connected); ok && !connected {
					connected = true
					go heartbeatEvery(ctx, l, interval, time.Duration(i)*interval/time.Duration(hosts), &sent, &failed)
				}
			}
		}()
	}
	// Let every host connect and send its first heartbeat before the fleet view starts.
	deadline := time.Now().Add(2*time.Minute + time.Duration(hosts)*10*time.Millisecond)
	for sent.Load() < int64(hosts) {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d hosts heartbeat before the deadline", sent.Load(), hosts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	view := exec.CommandContext(ctx, bin, "fleet", "--watch", "--json", "--nats", url)
	viewOut, err := view.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := view.Start(); err != nil {
		b.Fatal(err)
	}
	defer view.Wait()
	var renders atomic.Int64
	go func() {
		r := bufio.NewReaderSize(viewOut, 1<<20)
		for {
			if _, err := r.ReadSlice('\n'); err != nil && err != bufio.ErrBufferFull {
				return
			}
			renders.Add(1)
		}
	}()
	time.Sleep(3 * time.Second) // the view's first read of every node

	sCPU0, vCPU0 := cpuTicks(b, serve.Process.Pid), cpuTicks(b, view.Process.Pid)
	sent0, renders0 := sent.Load(), renders.Load()
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	wall := time.Since(start).Seconds()
	const hz = 100 // USER_HZ on Linux
	b.ReportMetric(float64(cpuTicks(b, serve.Process.Pid)-sCPU0)/hz/wall*100, "server-cpu-%")
	b.ReportMetric(float64(rssKB(b, serve.Process.Pid))/1024, "server-rss-MB")
	b.ReportMetric(float64(cpuTicks(b, view.Process.Pid)-vCPU0)/hz/wall*100, "fleetview-cpu-%")
	b.ReportMetric(float64(rssKB(b, view.Process.Pid))/1024, "fleetview-rss-MB")
	b.ReportMetric(float64(sent.Load()-sent0)/wall, "heartbeats/s")
	b.ReportMetric(float64(renders.Load()-renders0)/wall, "renders/s")
	b.ReportMetric(float64(failed.Load()), "failed-heartbeats")
	cancel()
	for _, l := range links {
		l.Close()
	}
	wg.Wait()
}

func heartbeatEvery(ctx context.Context, l *link.Link, interval, offset time.Duration, sent, failed *atomic.Int64) {
	select {
	case <-time.After(offset):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	started := time.Now()
	for {
		hb := wire.Heartbeat{State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", Target: "v1.0.0",
			Staged: []string{}, UptimeS: int64(time.Since(started).Seconds()),
			LastReconcile: &wire.LastReconcile{At: time.Now().UTC(), Trigger: wire.TriggerTimer, OK: true, DurationMS: 12}}
		if err := l.PublishHeartbeat(ctx, hb); err != nil {
			if ctx.Err() != nil {
				return
			}
			failed.Add(1)
		} else {
			sent.Add(1)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// cpuTicks is a process's user+system CPU time in clock ticks, from /proc/<pid>/stat.
func cpuTicks(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

// rssKB is a process's resident set size from /proc/<pid>/status.
func rssKB(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			v, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return v
		}
	}
	return 0
}
