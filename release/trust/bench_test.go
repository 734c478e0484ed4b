package trust_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// What the benchmark's server runs as: the bus before this issue, operator mode in plaintext,
// and operator mode with TLS (what `mesh-release serve` does by default).
const (
	modeNoAuth      = "no-auth"
	modeOperator    = "operator"
	modeOperatorTLS = "operator+tls"
)

const (
	benchNodes     = 1000
	benchSteady    = 10 * time.Second // every node heartbeats once a second meanwhile
	benchServeEnv  = "MESH_TRUST_BENCH_SERVE"
	benchDataEnv   = "MESH_TRUST_BENCH_DATA"
	benchConnector = 32 // connections made at once
)

// BenchmarkThousandNodeUsers connects 1,000 nodes, each as its own user (its own nkey and user
// JWT from NodeUser; no credentials without auth), each watching its declaration as the host
// does and heartbeating, to a server in a child process on loopback, and measures that server
// from /proc (user+system CPU time, VmRSS and VmHWM): the CPU it spent admitting them all, the
// share of a core it uses while they heartbeat once a second, and its memory. Run it with
//
//	go test -run '^$' -bench ThousandNodeUsers -benchtime 1x ./release/trust/
func BenchmarkThousandNodeUsers(b *testing.B) {
	for _, mode := range []string{modeNoAuth, modeOperator, modeOperatorTLS} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				r := runFleet(b, mode)
				b.ReportMetric(r.connect.Seconds(), "connect-s")
				b.ReportMetric(r.connectCPU.Seconds(), "connect-server-cpu-s")
				b.ReportMetric(r.steadyCPU.Seconds()/benchSteady.Seconds()*100, "steady-server-cpu-%")
				b.ReportMetric(float64(r.rssKB)/1024, "server-rss-MB")
				b.ReportMetric(float64(r.peakKB)/1024, "server-peak-rss-MB")
				b.ReportMetric(float64(r.heartbeats)/benchSteady.Seconds(), "heartbeats/s")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

type fleetRun struct {
	connect, connectCPU, steadyCPU time.Duration
	rssKB, peakKB                  int64
	heartbeats                     int64
}

// TestBenchServerProcess is BenchmarkThousandNodeUsers's server, run by it in a child process
// so that what is measured is the server alone.
func TestBenchServerProcess(t *testing.T) {
	mode := os.Getenv(benchServeEnv)
	if mode == "" {
		t.Skip("the server of BenchmarkThousandNodeUsers, run by it")
	}
	ctx := meshtest.Context(t, time.Minute)
	data := os.Getenv(benchDataEnv)
	opts := bus.ServeOptions{DataDir: data, Listen: "127.0.0.1:0"}
	if mode != modeNoAuth {
		st, err := trust.Ensure(data)
		if err != nil {
			t.Fatal(err)
		}
		opts.Auth, opts.OwnTLS = st, mode == modeOperatorTLS
	}
	srv, err := bus.Serve(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	fmt.Printf("URL %s CA %s\n", srv.ClientURL(), srv.CAFile())
	io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
}

func runFleet(b *testing.B, mode string) fleetRun {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	data := b.TempDir()
	names := wire.NamesFor("")
	var store *trust.Store
	if mode != modeNoAuth {
		var err error
		if store, err = trust.Ensure(data); err != nil {
			b.Fatal(err)
		}
	}

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestBenchServerProcess$")
	cmd.Env = append(os.Environ(), benchServeEnv+"="+mode, benchDataEnv+"="+data)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	var url, ca string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "URL" {
			url = f[1]
			if len(f) == 4 {
				ca = f[3]
			}
			break
		}
	}
	if url == "" {
		b.Fatal("the server process did not say where it listens")
	}
	go io.Copy(io.Discard, stdout)
	pid := cmd.Process.Pid

	creds := ""
	if store != nil {
		creds = store.AdminCreds()
	}
	admin, err := bus.Connect(ctx, url, creds, bus.WithCA(ca))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	if err := bus.Init(ctx, admin.JS, names); err != nil {
		b.Fatal(err)
	}
	decl, err := admin.JS.KeyValue(ctx, names.Declarations())
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, benchNodes)
	opts := make([][]nats.Option, benchNodes)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%04d", i)
		if _, err := decl.Put(ctx, ids[i], []byte(`{}`)); err != nil {
			b.Fatal(err)
		}
		opts[i] = []nats.Option{nats.Name("bench " + ids[i]), nats.Timeout(30 * time.Second)}
		if ca != "" {
			opts[i] = append(opts[i], nats.RootCAs(ca))
		}
		if store != nil {
			kp, _ := nkeys.CreateUser()
			pub, _ := kp.PublicKey()
			seed, _ := kp.Seed()
			text, err := store.NodeUser(names, ids[i], pub)
			if err != nil {
				b.Fatal(err)
			}
			opts[i] = append(opts[i], nats.UserJWTAndSeed(text, string(seed)), nats.CustomInboxPrefix(wire.NodeInboxPrefix(ids[i])))
		}
	}

	var r fleetRun
	before := cpu(b, pid)
	began := time.Now()
	conns := make([]*nats.Conn, benchNodes)
	jss := make([]jetstream.JetStream, benchNodes)
	work := make(chan int)
	errs := make(chan error, benchNodes)
	var wg sync.WaitGroup
	for range benchConnector {
		wg.Go(func() {
			for i := range work {
				nc, js, err := nodeJoins(ctx, url, names, ids[i], store != nil, opts[i])
				if err != nil {
					errs <- fmt.Errorf("%s: %w", ids[i], err)
					continue
				}
				conns[i], jss[i] = nc, js
			}
		})
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	defer func() {
		for _, nc := range conns {
			if nc != nil {
				nc.Close()
			}
		}
	}()
	select {
	case err := <-errs:
		b.Fatalf("%d of %d nodes could not join; the first: %v", len(errs)+1, benchNodes, err)
	default:
	}
	r.connect = time.Since(began)
	r.connectCPU = cpu(b, pid) - before

	// Steady: every node heartbeats once a second, spread over the second.
	before = cpu(b, pid)
	steady, stop := context.WithTimeout(ctx, benchSteady)
	defer stop()
	var mu sync.Mutex
	var failed error
	for i := range jss {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * time.Second / benchNodes)
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-steady.Done():
					return
				case <-t.C:
				}
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := jss[i].Publish(pctx, names.Heartbeat(ids[i]), []byte(`{"node": "`+ids[i]+`"}`))
				cancel()
				mu.Lock()
				if err != nil && failed == nil {
					failed = fmt.Errorf("%s: %w", ids[i], err)
				} else if err == nil {
					r.heartbeats++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	r.steadyCPU = cpu(b, pid) - before
	if failed != nil {
		b.Fatalf("a heartbeat failed: %v", failed)
	}
	r.rssKB, r.peakKB = memory(b, pid, "VmRSS"), memory(b, pid, "VmHWM")
	return r
}

// nodeJoins does what a host does on joining: connect, watch its declaration until its value
// arrives, heartbeat once. A node user (auth) makes its JetStream calls through the nodes
// account's import, wire.NodeJSAPIPrefix.
func nodeJoins(ctx context.Context, url string, names wire.Names, node string, auth bool, opts []nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, err
	}
	var js jetstream.JetStream
	if auth {
		js, err = jetstream.NewWithAPIPrefix(nc, wire.NodeJSAPIPrefix)
	} else {
		js, err = jetstream.New(nc)
	}
	if err == nil {
		err = func() error {
			kv, err := js.KeyValue(ctx, names.Declarations())
			if err != nil {
				return err
			}
			w, err := kv.WatchFiltered(ctx, []string{node})
			if err != nil {
				return err
			}
			if e := <-w.Updates(); e == nil {
				return fmt.Errorf("no declaration")
			}
			_, err = js.Publish(ctx, names.Heartbeat(node), []byte(`{"node": "`+node+`"}`))
			return err
		}()
	}
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// cpu is the process's user+system CPU time, from /proc/<pid>/stat (USER_HZ is 100 on Linux).
func cpu(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

// memory reads a field of /proc/<pid>/status in kB.
func memory(b *testing.B, pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
