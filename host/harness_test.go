package host

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// testBus is a real NATS server with JetStream, embedded in the test process on loopback.
type testBus struct {
	t     testing.TB
	dir   string
	addr  string
	srv   *bus.Server
	conn  *bus.Conn
	names wire.Names
}

func startBus(t testing.TB) *testBus {
	t.Helper()
	b := &testBus{t: t, dir: t.TempDir(), addr: "127.0.0.1:" + freePort(t), names: wire.NamesFor("")}
	b.start()
	t.Cleanup(b.stop)
	return b
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// start (re)starts the server on the same address and store directory.
func (b *testBus) start() {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: b.dir, Listen: b.addr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.t.Fatal(err)
	}
	conn, err := bus.Connect(ctx, srv.ClientURL(), "")
	if err != nil {
		b.t.Fatal(err)
	}
	if err := bus.Init(ctx, conn.JS, b.names); err != nil {
		b.t.Fatal(err)
	}
	b.srv, b.conn = srv, conn
}

func (b *testBus) stop() {
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv = nil
	}
}

func (b *testBus) url() string { return "nats://" + b.addr }

func (b *testBus) kv(name string) jetstream.KeyValue {
	b.t.Helper()
	kv, err := b.conn.JS.KeyValue(context.Background(), name)
	if err != nil {
		b.t.Fatal(err)
	}
	return kv
}

// declare puts a declaration (any bytes) for node and returns its revision.
func (b *testBus) declare(node string, value []byte) uint64 {
	b.t.Helper()
	rev, err := b.kv(b.names.Declarations()).Put(context.Background(), node, value)
	if err != nil {
		b.t.Fatal(err)
	}
	return rev
}

// heartbeats subscribes to a node's heartbeats (core NATS; the stream keeps them too).
func (b *testBus) heartbeats(node string) <-chan wire.Heartbeat {
	b.t.Helper()
	ch := make(chan wire.Heartbeat, 1024)
	sub, err := b.conn.NC.Subscribe(b.names.Heartbeat(node), func(m *nats.Msg) {
		hb, err := wire.ParseHeartbeat(m.Data)
		if err != nil {
			b.t.Errorf("a heartbeat that does not parse: %v: %s", err, m.Data)
			return
		}
		select {
		case ch <- hb:
		default:
		}
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.conn.NC.Flush()
	b.t.Cleanup(func() { sub.Unsubscribe() })
	return ch
}

// waitHeartbeat waits for a heartbeat satisfying ok.
func waitHeartbeat(t testing.TB, ch <-chan wire.Heartbeat, what string, ok func(wire.Heartbeat) bool) wire.Heartbeat {
	t.Helper()
	timeout := time.After(30 * time.Second)
	var last wire.Heartbeat
	for {
		select {
		case hb := <-ch:
			last = hb
			if ok(hb) {
				return hb
			}
		case <-timeout:
			t.Fatalf("no heartbeat with %s; last: %+v", what, last)
		}
	}
}

// testHost is one host run loop in this process, with its own root, as the lab's fleets run them.
type testHost struct {
	t      testing.TB
	root   string
	node   string
	cancel context.CancelFunc
	done   chan struct{}
	res    Result
	err    error
	logs   *syncBuffer
}

// newRoot makes a root as the launcher leaves it: records.db with its schema, and the version's
// directory (any bytes stand in for the binary; Choose only hashes it).
func newRoot(t testing.TB, version string) string {
	t.Helper()
	root := t.TempDir()
	r, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	placeFake(t, root, version)
	// The launcher chose it, recording its digest, before it ran.
	if ch, err := r.Choose(context.Background(), root); err != nil || ch.Version != version {
		t.Fatalf("choose %q, %v", ch.Version, err)
	}
	return root
}

func placeFake(t testing.TB, root, version string) {
	t.Helper()
	dir := rollback.VersionDir(root, version)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), rollback.StagingPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, rollback.BinaryName), []byte("fake mesh-host "+version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
}

type hostOpt func(*config.Config)

func startHost(t testing.TB, root, node, url string, opts ...hostOpt) *testHost {
	t.Helper()
	cfg := config.Config{
		Root: root, Node: node, Prefix: "mesh",
		ReconcileInterval: config.Duration(time.Hour), HeartbeatInterval: config.Duration(time.Hour),
	}
	if url != "" {
		cfg.NATSURLs = []string{url}
	}
	for _, o := range opts {
		o(&cfg)
	}
	logs := &syncBuffer{}
	h, err := New(Options{Config: cfg, Version: "v1.0.0", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &testHost{t: t, root: root, node: node, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() {
		defer close(th.done)
		th.res, th.err = h.Run(ctx)
	}()
	t.Cleanup(func() {
		th.stop()
		if t.Failed() {
			t.Logf("host %s log:\n%s", node, logs.String())
		}
	})
	return th
}

func (th *testHost) stop() {
	th.cancel()
	select {
	case <-th.done:
	case <-time.After(30 * time.Second):
		th.t.Errorf("host %s did not stop", th.node)
	}
}

// reconciles reads the host's store.db directly (read-only) to see every reconcile it ran.
func (th *testHost) reconciles() []reconcileRow {
	th.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(th.root, "store.db")+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		th.t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT trigger, started_at, COALESCE(ended_at, 0), COALESCE(ok, 0) FROM reconciles ORDER BY id`)
	if err != nil {
		th.t.Fatal(err)
	}
	defer rows.Close()
	var out []reconcileRow
	for rows.Next() {
		var r reconcileRow
		if err := rows.Scan(&r.trigger, &r.start, &r.end, &r.ok); err != nil {
			th.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

type reconcileRow struct {
	trigger    string
	start, end int64
	ok         bool
}

func countTrigger(rows []reconcileRow, trigger string) int {
	n := 0
	for _, r := range rows {
		if r.trigger == trigger {
			n++
		}
	}
	return n
}

func eventually(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func decl(node string, resources string) []byte {
	return []byte(fmt.Sprintf(`{"version": 1, "node": %q, "resources": [%s]}`, node, resources))
}
