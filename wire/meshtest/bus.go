package meshtest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/buslayout"
)

// Bus is a real NATS server with JetStream, embedded in the test process on loopback, and a
// client connection to it. It stops when the test ends.
type Bus struct {
	// Conn is the test's own connection to the bus; Start replaces it.
	Conn *Conn
	// Names are the mesh's bus names under the default prefix.
	Names wire.Names

	tb   testing.TB
	o    busOptions
	dir  string // the JetStream store, kept across Stop and Start
	port int
	ns   *server.Server
}

// Conn is a connection to the bus and its JetStream context.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// Close closes the connection.
func (c *Conn) Close() { c.NC.Close() }

// connect connects to url as a client of the mesh's tests, giving up after 30 s.
func connect(url string, opts ...nats.Option) (*Conn, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("meshtest"), nats.Timeout(30 * time.Second)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to the test bus: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on the test bus: %w", err)
	}
	return &Conn{NC: nc, JS: js}, nil
}

type busOptions struct {
	maxPayload     int32
	user, password string
	noBuckets      bool
	tls            *ServerTLS
}

// A BusOption changes the bus StartBus runs.
type BusOption func(*busOptions)

// MaxPayload makes the server accept messages of at most n bytes (the default is 1 MiB).
func MaxPayload(n int32) BusOption { return func(o *busOptions) { o.maxPayload = n } }

// User makes the server accept only clients with this user and password; URL carries them.
func User(name, password string) BusOption {
	return func(o *busOptions) { o.user, o.password = name, password }
}

// NoBuckets leaves the bus as a server is before `mesh-release init`; Init creates them later.
func NoBuckets() BusOption { return func(o *busOptions) { o.noBuckets = true } }

// StartBus runs the bus on a free loopback port with its JetStream store in a temp dir, connects
// to it and, unless NoBuckets, creates the mesh's buckets and heartbeat stream as `mesh-release
// init` does (wire/buslayout).
func StartBus(tb testing.TB, opts ...BusOption) *Bus {
	tb.Helper()
	b := &Bus{Names: wire.NamesFor(""), tb: tb, dir: tb.TempDir(), port: server.RANDOM_PORT}
	for _, o := range opts {
		o(&b.o)
	}
	b.Start()
	tb.Cleanup(b.Stop)
	if !b.o.noBuckets {
		b.Init()
	}
	return b
}

// Start (re)starts the server on the port and the store it had, and connects Conn to it.
func (b *Bus) Start() {
	b.tb.Helper()
	so := &server.Options{
		Port: b.port, JetStream: true, StoreDir: filepath.Join(b.dir, "jetstream"),
		MaxPayload: b.o.maxPayload, Username: b.o.user, Password: b.o.password,
	}
	var copts []nats.Option
	if b.o.tls != nil {
		so.TLS, so.TLSConfig, so.TLSTimeout = true, b.o.tls.config(), 5
		copts = append(copts, nats.Secure(b.o.tls.clientConfig()))
	}
	b.ns = serve(b.tb, so)
	b.port = b.ns.Addr().(*net.TCPAddr).Port
	c, err := connect(b.URL(), copts...)
	if err != nil {
		b.Stop()
		b.tb.Fatal(err)
	}
	b.Conn = c
}

// Stop closes Conn and stops the server; the store stays for Start. Stopping a stopped bus
// does nothing.
func (b *Bus) Stop() {
	if b.Conn != nil {
		b.Conn.Close()
		b.Conn = nil
	}
	if b.ns != nil {
		b.ns.Shutdown()
		b.ns.WaitForShutdown()
		b.ns = nil
	}
}

// Init creates the mesh's buckets and heartbeat stream, as `mesh-release init` does.
func (b *Bus) Init() {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := buslayout.Create(ctx, b.Conn.JS, b.Names); err != nil {
		b.tb.Fatal(err)
	}
}

// URL is the nats:// URL clients are given, with the user and password if the bus wants them.
func (b *Bus) URL() string {
	u := url.URL{Scheme: "nats", Host: b.Addr()}
	if b.o.user != "" {
		u.User = url.UserPassword(b.o.user, b.o.password)
	}
	return u.String()
}

// Addr is host:port of the server, the same across Stop and Start.
func (b *Bus) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)) }

// KV is the key-value bucket named bucket.
func (b *Bus) KV(bucket string) jetstream.KeyValue {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := b.Conn.JS.KeyValue(ctx, bucket)
	if err != nil {
		b.tb.Fatal(err)
	}
	return kv
}

// Put puts value under key in bucket and returns its revision.
func (b *Bus) Put(bucket, key string, value []byte) uint64 {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rev, err := b.KV(bucket).Put(ctx, key, value)
	if err != nil {
		b.tb.Fatal(err)
	}
	return rev
}

// Delete deletes key from bucket.
func (b *Bus) Delete(bucket, key string) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.KV(bucket).Delete(ctx, key); err != nil {
		b.tb.Fatal(err)
	}
}

// Declare puts value (any bytes) as node's declaration and returns its revision.
func (b *Bus) Declare(node string, value []byte) uint64 {
	b.tb.Helper()
	return b.Put(b.Names.Declarations(), node, value)
}

// Heartbeats delivers every heartbeat node publishes from now on (core NATS; the stream keeps
// only the last) until the test ends or the bus stops. A heartbeat that does not parse fails
// the test.
func (b *Bus) Heartbeats(node string) <-chan wire.Heartbeat {
	b.tb.Helper()
	ch := make(chan wire.Heartbeat, 1024)
	var mu sync.Mutex
	var bad error
	sub, err := b.Conn.NC.Subscribe(b.Names.Heartbeat(node), func(m *nats.Msg) {
		hb, err := wire.ParseHeartbeat(m.Data)
		if err != nil {
			mu.Lock()
			if bad == nil {
				bad = fmt.Errorf("a heartbeat of %s that does not parse: %w: %.300s", node, err, m.Data)
			}
			mu.Unlock()
			return
		}
		select {
		case ch <- hb:
		default:
		}
	})
	if err != nil {
		b.tb.Fatal(err)
	}
	if err := b.Conn.NC.Flush(); err != nil {
		b.tb.Fatal(err)
	}
	b.tb.Cleanup(func() {
		sub.Unsubscribe()
		mu.Lock()
		defer mu.Unlock()
		if bad != nil {
			b.tb.Error(bad)
		}
	})
	return ch
}

// LastHeartbeat is the raw heartbeat the stream keeps as node's last word.
func (b *Bus) LastHeartbeat(node string) []byte {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := b.Conn.JS.Stream(ctx, b.Names.HeartbeatStream())
	if err != nil {
		b.tb.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, b.Names.Heartbeat(node))
	if err != nil {
		b.tb.Fatal(err)
	}
	return m.Data
}

// HeartbeatWait is how long WaitHeartbeat waits.
const HeartbeatWait = 30 * time.Second

// WaitHeartbeat reads heartbeats from ch until one satisfies ok and returns it; after
// HeartbeatWait it fails the test, naming what it waited for and the last heartbeat seen.
func WaitHeartbeat(tb testing.TB, ch <-chan wire.Heartbeat, what string, ok func(wire.Heartbeat) bool) wire.Heartbeat {
	tb.Helper()
	timeout := time.After(HeartbeatWait)
	var last wire.Heartbeat
	for {
		select {
		case hb := <-ch:
			last = hb
			if ok(hb) {
				return hb
			}
		case <-timeout:
			tb.Fatalf("no heartbeat with %s within %s; the last: %+v", what, HeartbeatWait, last)
		}
	}
}

// StartServer runs a bare NATS server with o (its authentication, TLS, JetStream if asked) on a
// free loopback port until the test ends, for tests of a client the server refuses, and returns
// the port.
func StartServer(tb testing.TB, o server.Options) int {
	tb.Helper()
	o.Port = server.RANDOM_PORT
	ns := serve(tb, &o)
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns.Addr().(*net.TCPAddr).Port
}

// serve starts a server with o on loopback, quiet and without signal handlers, and waits until it
// accepts clients.
func serve(tb testing.TB, o *server.Options) *server.Server {
	tb.Helper()
	o.Host, o.NoSigs, o.NoLog = "127.0.0.1", true, true
	ns, err := server.NewServer(o)
	if err != nil {
		tb.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		tb.Fatalf("the embedded NATS server on port %d did not start", o.Port)
	}
	return ns
}

// StartServerWithNodeUser starts a server in one account with JetStream, an admin user
// ("admin"/"admin-pw") allowed everything, and a node user ("n1"/"n1-pw") allowed only publish
// and subscribe, and returns its port. Host tests use it to show the link and delivery need no
// more than a node's permissions; release/trust proves the real two-account layout.
func StartServerWithNodeUser(tb testing.TB, publish, subscribe []string) int {
	tb.Helper()
	dir := tb.TempDir()
	quote := func(s []string) string { return `"` + strings.Join(s, `", "`) + `"` }
	conf := fmt.Sprintf(`
jetstream { store_dir: %q }
accounts {
  MESH {
    jetstream: enabled
    users: [
      { user: admin, password: admin-pw }
      { user: n1, password: n1-pw, permissions: { publish: { allow: [%s] }, subscribe: { allow: [%s] } } }
    ]
  }
}
`, filepath.Join(dir, "js"), quote(publish), quote(subscribe))
	file := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	return StartServer(tb, *o)
}

// NodeUserBus is a server from StartServerWithNodeUser whose mesh buckets its admin made.
type NodeUserBus struct {
	Port  int
	Admin jetstream.JetStream // the admin user's, allowed everything
}

// StartNodeUserBus starts a server as StartServerWithNodeUser does and makes the mesh's buckets
// under names as its admin, until the test ends.
func StartNodeUserBus(tb testing.TB, names wire.Names, publish, subscribe []string) *NodeUserBus {
	tb.Helper()
	port := StartServerWithNodeUser(tb, publish, subscribe)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := connect(fmt.Sprintf("nats://admin:admin-pw@127.0.0.1:%d", port))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(admin.Close)
	if err := buslayout.Create(ctx, admin.JS, names); err != nil {
		tb.Fatal(err)
	}
	return &NodeUserBus{Port: port, Admin: admin.JS}
}

// NodeURL is the URL node n1's user connects with.
func (b *NodeUserBus) NodeURL() string { return fmt.Sprintf("nats://n1:n1-pw@127.0.0.1:%d", b.Port) }

// ConnectNode connects as node n1, below its inbox prefix as a node's link does, until the test
// ends, and returns its JetStream and what the server has refused it so far (its asynchronous
// permission violations).
func (b *NodeUserBus) ConnectNode(tb testing.TB) (jetstream.JetStream, func() []string) {
	tb.Helper()
	var mu sync.Mutex
	var refused []string
	nc, err := nats.Connect(b.NodeURL(), nats.CustomInboxPrefix(wire.NodeInboxPrefix("n1")),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			refused = append(refused, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(refused)
	}
}

// Kick closes the server's side of every client connection named name (nats.Name): the
// client sees its connection lost and reconnects, as after a network failure.
func (b *Bus) Kick(name string) int {
	b.tb.Helper()
	cz, err := b.ns.Connz(&server.ConnzOptions{Limit: 1 << 16})
	if err != nil {
		b.tb.Fatal(err)
	}
	n := 0
	for _, c := range cz.Conns {
		if c.Name == name {
			if err := b.ns.DisconnectClientByID(c.Cid); err == nil {
				n++
			}
		}
	}
	return n
}
