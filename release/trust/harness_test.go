package trust_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// mesh is `mesh-release serve` as the command runs it, in the test process: an embedded server on
// a free loopback port in operator mode with the identities of a temp data directory, TLS with
// the bus's own CA, the mesh's buckets, and the release side's admin connection.
type mesh struct {
	t      testing.TB
	data   string
	store  *trust.Store
	srv    *bus.Server
	listen string
	ca     string
	names  wire.Names
	admin  *bus.Conn
}

// Archive is the object every test reads: big enough that the server asks for flow control.
const (
	archiveName  = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	archiveBytes = 8 << 20
)

// The blob every test reads, named by its digest as `mesh-release blob put` names it; larger than
// a chunk, so that reading it takes a consumer's flow of several messages.
var (
	blobBody = bytes.Repeat([]byte("blob "), 100_000)
	blobName = digest.FromBytes(blobBody).String()
)

func startMesh(t testing.TB) *mesh {
	t.Helper()
	return startMeshIn(t, t.TempDir())
}

// startMeshIn is startMesh on the data directory data, which may hold a trust store already.
func startMeshIn(t testing.TB, data string) *mesh {
	t.Helper()
	m := &mesh{t: t, data: data, names: wire.NamesFor(""), listen: "127.0.0.1:0"}
	m.start()
	t.Cleanup(m.stop)
	ctx := meshtest.Context(t, 60*time.Second)
	if err := bus.Init(ctx, m.admin.JS, m.names); err != nil {
		t.Fatal(err)
	}
	// The withdrawals bucket is made by init once the release side has it; until then, here.
	if _, err := m.admin.JS.KeyValue(ctx, m.names.Withdrawals()); errors.Is(err, jetstream.ErrBucketNotFound) {
		if _, err := m.admin.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: m.names.Withdrawals(), Storage: jetstream.FileStorage}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []struct{ bucket, key, value string }{
		{m.names.Declarations(), "node-a", `{"for": "a"}`},
		{m.names.Declarations(), "node-b", `{"for": "b"}`},
		{m.names.Targets(), wire.NodeTargetKey("node-a"), `{"version": "v1.0.0"}`},
		{m.names.Targets(), wire.NodeTargetKey("node-b"), `{"version": "v1.0.0"}`},
		{m.names.Targets(), wire.FleetTargetKey, `{"version": "v1.0.0"}`},
		{m.names.Targets(), wire.NodeWindowKey("node-a"), `{"days": ["mon"]}`},
		{m.names.Targets(), wire.NodeWindowKey("node-b"), `{"days": ["tue"]}`},
		{m.names.Targets(), wire.FleetWindowKey, `{"days": ["wed"]}`},
		{m.names.Releases(), "v1.0.0", `{"version": "v1.0.0"}`},
		{m.names.Releases(), wire.RootKey(1), `{"version": 1}`},
		{m.names.Releases(), wire.BusKey, `{"seq": 1}`},
		{m.names.Withdrawals(), wire.WithdrawalsKey, `{"seq": 1}`},
		{m.names.Rollouts(), "r1", `{}`},
	} {
		kv, err := m.admin.JS.KeyValue(ctx, p.bucket)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, p.key, []byte(p.value)); err != nil {
			t.Fatal(err)
		}
	}
	obs, err := m.admin.JS.ObjectStore(ctx, m.names.Archives())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, archiveName, bytes.Repeat([]byte("a"), archiveBytes)); err != nil {
		t.Fatal(err)
	}
	// A blob, as `mesh-release blob put` stores it: named by its digest.
	blobs, err := m.admin.JS.ObjectStore(ctx, m.names.Blobs())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.PutBytes(ctx, blobName, blobBody); err != nil {
		t.Fatal(err)
	}
	return m
}

// start runs the server on m's data directory as serve does, and connects admin.
func (m *mesh) start() {
	m.t.Helper()
	ctx := meshtest.Context(m.t, 30*time.Second)
	var err error
	if m.store, err = trust.Ensure(m.data); err != nil {
		m.t.Fatal(err)
	}
	m.srv, err = bus.Serve(ctx, bus.ServeOptions{DataDir: m.data, Listen: m.listen, Auth: m.store, OwnTLS: true})
	if err != nil {
		m.t.Fatal(err)
	}
	m.ca = m.srv.CAFile()
	m.listen = m.srv.Addr().String() // the same port on a restart
	if m.admin, err = bus.Connect(ctx, m.srv.ClientURL(), m.store.AdminCreds(), bus.WithCA(m.ca)); err != nil {
		m.t.Fatal(err)
	}
}

func (m *mesh) stop() {
	if m.admin != nil {
		m.admin.Close()
		m.admin = nil
	}
	if m.srv != nil {
		m.srv.Shutdown()
		m.srv = nil
	}
}

// user is a user's key pair and JWT, and the JetStream API prefix its connection uses (empty:
// the account's own, $JS.API).
type user struct {
	pub, seed, jwt string
	api            string
}

// nodeUser makes node's key pair as `mesh-host enrol` does and has the store sign it.
func (m *mesh) nodeUser(node string) user {
	m.t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		m.t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	text, err := m.store.NodeUser(m.names, node, pub)
	if err != nil {
		m.t.Fatal(err)
	}
	return user{pub: pub, seed: string(seed), jwt: text, api: wire.NodeJSAPIPrefix}
}

// client is one connection and what the server said about it.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu     sync.Mutex
	errs   []error       // asynchronous errors, permission violations among them
	closed chan struct{} // closed by the ClosedHandler
	last   error         // the error the connection was lost with
}

// connect dials m as u (zero: no credentials) with opts; the connection is closed when the test
// ends.
func (m *mesh) connect(u user, opts ...nats.Option) (*client, error) {
	c := &client{closed: make(chan struct{})}
	base := []nats.Option{
		nats.Name("trust test"),
		nats.RootCAs(m.ca),
		nats.Timeout(10 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			c.mu.Lock()
			if err != nil {
				c.last = err
			}
			c.mu.Unlock()
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(c.closed) }),
	}
	if u.jwt != "" {
		base = append(base, nats.UserJWTAndSeed(u.jwt, u.seed))
	}
	nc, err := nats.Connect(m.srv.ClientURL(), append(base, opts...)...)
	if err != nil {
		return nil, err
	}
	c.nc = nc
	if u.api != "" {
		c.js, err = jetstream.NewWithAPIPrefix(nc, u.api)
	} else {
		c.js, err = jetstream.New(nc)
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	m.t.Cleanup(nc.Close)
	return c, nil
}

// lostWith reports whether the connection was lost, or told asynchronously, with err.
func (c *client) lostWith(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.last, err) || errors.Is(c.nc.LastError(), err) {
		return true
	}
	for _, e := range c.errs {
		if errors.Is(e, err) {
			return true
		}
	}
	return false
}

// closeAndCollect returns every violation the server named for what this connection did
// before the call. The server answers a connection's commands in order, so its -ERRs for them
// come before the PONG that ends a flush; the client then hands each to the error callback and,
// when closed, calls the closed callback last, one at a time in that order: once the closed
// callback has run, every violation is in, however slow the machine.
func (c *client) closeAndCollect(t *testing.T) []string {
	t.Helper()
	if err := c.nc.FlushTimeout(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.nc.Close()
	select {
	case <-c.closed:
	case <-time.After(meshtest.Wait):
		t.Fatalf("the connection's closed callback did not run within %s", meshtest.Wait)
	}
	return c.violations()
}

// refusals counts the server's refusals of this connection's credentials told so far: the one
// that ended it, and one per attempt to reconnect.
func (c *client) refusals() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.errs {
		if errors.Is(e, nats.ErrAuthRevoked) || errors.Is(e, nats.ErrAuthorization) {
			n++
		}
	}
	return n
}

// violationRe picks the subject out of the server's -ERR for a refused publish or subscribe.
var violationRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// violations are the subjects the server refused this connection since the last call.
func (c *client) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, err := range c.errs {
		if m := violationRe.FindStringSubmatch(err.Error()); m != nil {
			out = append(out, m[1]+" "+m[2])
		} else {
			out = append(out, "other: "+err.Error())
		}
	}
	c.errs = nil
	return out
}

// bounded cuts s for a failure message.
func bounded(s string) string {
	const max = 600
	if len(s) > max {
		return s[:max] + fmt.Sprintf("… (%d bytes more)", len(s)-max)
	}
	return s
}

// jwtOf and seedOf read a .creds text's JWT and seed.
func jwtOf(creds string) (string, error) { return jwt.ParseDecoratedJWT([]byte(creds)) }
func seedOf(creds string) (string, error) {
	kp, err := jwt.ParseDecoratedNKey([]byte(creds))
	if err != nil {
		return "", err
	}
	seed, err := kp.Seed()
	return string(seed), err
}

func readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}

// quoted lists subjects for a failure message, bounded.
func quoted(l []string) string { return bounded(strings.Join(l, "; ")) }
