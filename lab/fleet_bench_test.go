package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/rollback"
)

// BenchmarkFleetOfHosts is the figure "one NATS server with 1,000 in-process hosts heartbeating
// every second: the server's and the fleet view's CPU and memory". The server
// (`mesh-release serve`) and the fleet view (`mesh-release fleet --watch --json`) are child
// processes built from this tree, so their CPU and memory are their own; the hosts are real
// host.Host run loops in this process, each with its own root (records.db, store.db), link and
// watches. One op is one second of wall time:
//
//	go test -run '^$' -bench FleetOfHosts -benchtime 20x ./lab
//
// MESH_BENCH_HOSTS (default 1000) changes the number of hosts.
func BenchmarkFleetOfHosts(b *testing.B) {
	hosts := 1000
	if v, err := strconv.Atoi(os.Getenv("MESH_BENCH_HOSTS")); err == nil && v > 0 {
		hosts = v
	}
	bin := build(b, PkgRelease, "v0.0.0-lab")
	tmp := b.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	serve, url := serveBus(ctx, b, filepath.Join(tmp, "bus"))
	defer func() { cancel(); serve.Wait() }()

	// Count what reaches the server, from outside the hosts.
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var received atomic.Int64
	heard := sync.Map{}
	if _, err := nc.Subscribe("mesh.node.*.heartbeat", func(m *nats.Msg) {
		received.Add(1)
		heard.Store(m.Subject, true)
	}); err != nil {
		b.Fatal(err)
	}

	quiet := slog.New(slog.DiscardHandler)
	hostCtx, stopHosts := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := 0; i < hosts; i++ {
		root := filepath.Join(tmp, fmt.Sprintf("n%04d", i))
		if err := fakeRoot(root, "v1.0.0"); err != nil {
			b.Fatal(err)
		}
		h, err := host.New(host.Options{Version: "v1.0.0", Detector: fleetDetector, Logger: quiet, Config: config.Config{
			Root: root, Node: fmt.Sprintf("n%04d", i), NATSURLs: []string{url}, Prefix: "mesh",
			ReconcileInterval: config.Duration(10 * time.Minute), HeartbeatInterval: config.Duration(time.Second),
		}})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); h.Run(hostCtx) }()
	}
	defer func() { stopHosts(); wg.Wait() }() // hosts stop before the server goes
	deadline := time.Now().Add(3 * time.Minute)
	for n := 0; n < hosts; {
		n = 0
		heard.Range(func(any, any) bool { n++; return true })
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d hosts heartbeat", n, hosts)
		}
		time.Sleep(100 * time.Millisecond)
	}

	view := exec.CommandContext(ctx, bin, "fleet", "--watch", "--json", "--nats", url)
	viewOut, err := view.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := view.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { view.Process.Kill(); view.Wait() }()
	// Wait for the view's first render of every node: one JSON line per render.
	renders := bufio.NewScanner(viewOut)
	renders.Buffer(nil, 64<<20)
	for shown := 0; shown < hosts; {
		if !renders.Scan() {
			b.Fatalf("the fleet view ended before it showed every node: %v", renders.Err())
		}
		var rows []json.RawMessage
		if json.Unmarshal(renders.Bytes(), &rows) == nil {
			shown = len(rows)
		}
	}
	go io.Copy(io.Discard, viewOut)

	s0, _ := CPUTicks(serve.Process.Pid)
	v0, _ := CPUTicks(view.Process.Pid)
	r0 := received.Load()
	start := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	wall := time.Since(start).Seconds()
	s1, _ := CPUTicks(serve.Process.Pid)
	v1, _ := CPUTicks(view.Process.Pid)
	sRSS, _ := MemoryKB(serve.Process.Pid, "VmRSS")
	vRSS, _ := MemoryKB(view.Process.Pid, "VmRSS")
	b.ReportMetric(float64(s1-s0)/100/wall*100, "server-cpu-%")
	b.ReportMetric(float64(sRSS)/1024, "server-rss-MB")
	b.ReportMetric(float64(v1-v0)/100/wall*100, "fleetview-cpu-%")
	b.ReportMetric(float64(vRSS)/1024, "fleetview-rss-MB")
	b.ReportMetric(float64(received.Load()-r0)/wall, "heartbeats/s")
	b.ReportMetric(0, "ns/op")
}

// fakeRoot makes a root as a launcher leaves it, with bytes standing in for the version's
// binary (Choose only hashes it; nothing executes it in process).
func fakeRoot(root, version string) error {
	r, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := os.MkdirAll(rollback.VersionDir(root, version), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(rollback.BinaryPath(root, version), []byte("in-process host "+version), 0o755); err != nil {
		return err
	}
	_, err = r.Choose(context.Background(), root) // as the launcher does before it runs a version
	return err
}
