package enrol

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// The trust store is what the service runs with.
var _ Store = (*trust.Store)(nil)

// trusted is `mesh-release serve` in operator mode with TLS and the enrolment service, in the
// test process.
type trusted struct {
	t      *testing.T
	store  *trust.Store
	srv    *bus.Server
	admin  *bus.Conn
	system *nats.Conn
	svc    *Service
	ca     string
	url    string // tls://127.0.0.1:port
	names  wire.Names
}

func startTrusted(t *testing.T) *trusted {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	data := t.TempDir()
	m := &trusted{t: t, names: wire.NamesFor("")}
	var err error
	if m.store, err = trust.Ensure(data); err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := trust.EnsureTLS(data, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.ca = ca
	if m.srv, err = bus.Serve(ctx, bus.ServeOptions{DataDir: data, Listen: "127.0.0.1:0", Auth: m.store, TLSCert: cert, TLSKey: key}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.srv.Shutdown)
	m.url = "tls://" + m.srv.Addr().String()
	if m.admin, err = bus.Connect(ctx, m.url, m.store.AdminCreds(), bus.WithCA(ca)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.admin.Close)
	if err := bus.Init(ctx, m.admin.JS, m.names); err != nil {
		t.Fatal(err)
	}
	if m.system, err = nats.Connect(m.url, nats.UserCredentials(m.store.SystemCreds()), nats.RootCAs(ca)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.system.Close)
	if m.svc, err = Start(ctx, Config{Admin: m.admin.NC, System: m.system, Store: m.store, Names: m.names, CAFile: ca}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.svc.Stop() })
	return m
}

func (m *trusted) issue(node string) string {
	m.t.Helper()
	tok, err := IssueToken(context.Background(), m.admin.JS, m.store, m.names, TokenOptions{Node: node, URLs: []string{m.url}, CAFile: m.ca})
	if err != nil {
		m.t.Fatal(err)
	}
	return tok.Token
}

// node is an enrolled node's key and JWT, and its connection once it has one.
type node struct {
	id, pub, seed, jwt string
	nc                 *nats.Conn
	closed             chan error
	revoked            chan struct{} // closed when the server says the key is revoked
}

// enrol does what `mesh-host enrol` does on the wire (host/enrol is the node's code; here the
// release side is under test): a fresh nkey, the token user over TLS with its inbox prefix, one
// request.
func (m *trusted) enrol(token, id string, replace bool) (*node, error) {
	m.t.Helper()
	tok, err := wire.ParseToken(token)
	if err != nil {
		return nil, err
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	tj, _ := jwt.ParseDecoratedJWT([]byte(tok.Creds))
	tk, _ := jwt.ParseDecoratedUserNKey([]byte(tok.Creds))
	tpub, _ := tk.PublicKey()
	tseed, _ := tk.Seed()
	nc, err := nats.Connect(tok.URLs[0], nats.RootCAs(m.ca), nats.UserJWTAndSeed(tj, string(tseed)), nats.CustomInboxPrefix(wire.TokenInboxPrefix(tpub)), quiet)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	b, err := request(nc, m.names.EnrolSubject(), wire.EnrolRequest{Token: token, Node: id, PublicKey: pub, Replace: replace})
	if err != nil {
		return nil, err
	}
	r, err := wire.ParseEnrolReply(b)
	if err != nil {
		return nil, err
	}
	return &node{id: id, pub: pub, seed: string(seed), jwt: r.JWT}, nil
}

// quiet keeps the client's asynchronous errors (permission violations the tests provoke) off
// stderr; LastError still has them.
var quiet = nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})

// connect connects n as itself, as the host's link does.
func (m *trusted) connect(n *node) error {
	n.closed, n.revoked = make(chan error, 1), make(chan struct{})
	var once sync.Once
	nc, err := nats.Connect(m.url, nats.RootCAs(m.ca), nats.UserJWTAndSeed(n.jwt, n.seed), nats.CustomInboxPrefix(wire.NodeInboxPrefix(n.id)),
		nats.NoReconnect(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if strings.Contains(err.Error(), "authentication revoked") {
				once.Do(func() { close(n.revoked) })
			}
		}), nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			select {
			case n.closed <- err:
			default:
			}
		}))
	if err != nil {
		return err
	}
	m.t.Cleanup(nc.Close)
	n.nc = nc
	return nil
}

// heartbeats checks that n's heartbeat reaches the release side.
func (m *trusted) heartbeats(n *node) {
	m.t.Helper()
	sub, err := m.admin.NC.SubscribeSync(m.names.Heartbeat(n.id))
	if err != nil {
		m.t.Fatal(err)
	}
	defer sub.Unsubscribe()
	m.admin.NC.Flush()
	if err := n.nc.Publish(m.names.Heartbeat(n.id), []byte(`{"node":"`+n.id+`"}`)); err != nil {
		m.t.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		m.t.Fatal(err)
	}
	if _, err := sub.NextMsg(10 * time.Second); err != nil {
		m.t.Fatalf("%s's heartbeat did not arrive: %v", n.id, err)
	}
}

// kicked waits until the server closes n's connection for its revoked key.
func kicked(t *testing.T, n *node) {
	t.Helper()
	select {
	case <-n.closed:
		select {
		case <-n.revoked:
		case <-time.After(time.Second):
			t.Fatalf("%s disconnected, but the server did not say its key is revoked", n.id)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s's connection was not closed after its key was revoked", n.id)
	}
}

func TestWithTheTrustStoreAnEnrolledNodeConnectsAndHeartbeats(t *testing.T) {
	m := startTrusted(t)
	n, err := m.enrol(m.issue("web-01"), "web-01", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.connect(n); err != nil {
		t.Fatal(err)
	}
	m.heartbeats(n)
	// A heartbeat as another node is not allowed: the node's user is its own only.
	n.nc.Publish(m.names.Heartbeat("web-02"), []byte(`{}`))
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n.nc.LastError() == nil || !strings.Contains(n.nc.LastError().Error(), "Permissions Violation") {
		t.Fatalf("publishing another node's heartbeat: last error %v", n.nc.LastError())
	}
}

func TestWithTheTrustStoreReplaceAndRevokeCloseTheOldKeysConnection(t *testing.T) {
	m := startTrusted(t)
	old, err := m.enrol(m.issue("web-01"), "web-01", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.connect(old); err != nil {
		t.Fatal(err)
	}
	_, err = m.enrol(m.issue("web-01"), "web-01", false)
	wantRefused(t, err, CodeConflict, "already enrolled")

	repl, err := m.enrol(m.issue("web-01"), "web-01", true)
	if err != nil {
		t.Fatal(err)
	}
	kicked(t, old)
	if err := m.connect(old); err == nil {
		t.Fatal("the replaced key connected again")
	}
	if err := m.connect(repl); err != nil {
		t.Fatal(err)
	}
	m.heartbeats(repl)

	b, err := request(m.admin.NC, m.names.RevokeSubject(), wire.RevokeRequest{Node: "web-01"})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := wire.ParseRevokeReply(b); r.PublicKey != repl.pub {
		t.Fatalf("revoked %s, want %s", r.PublicKey, repl.pub)
	}
	kicked(t, repl)
	if err := m.connect(repl); err == nil {
		t.Fatal("the revoked key connected again")
	}
	if revoked, err := m.store.Revoked(repl.pub); err != nil || !revoked {
		t.Fatalf("the store does not hold the revocation: %v %v", revoked, err)
	}
}

// The token user may ask for enrolment and nothing else: not revoke, not read a bucket.
func TestWithTheTrustStoreATokenMayOnlyEnrol(t *testing.T) {
	m := startTrusted(t)
	tok, _ := wire.ParseToken(m.issue(""))
	tj, _ := jwt.ParseDecoratedJWT([]byte(tok.Creds))
	tk, _ := jwt.ParseDecoratedUserNKey([]byte(tok.Creds))
	tpub, _ := tk.PublicKey()
	tseed, _ := tk.Seed()
	nc, err := nats.Connect(m.url, nats.RootCAs(m.ca), nats.UserJWTAndSeed(tj, string(tseed)), nats.CustomInboxPrefix(wire.TokenInboxPrefix(tpub)), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, err = nc.Request(m.names.RevokeSubject(), []byte(`{"node":"web-01"}`), 2*time.Second)
	if err == nil {
		t.Fatal("a token user asked for a revocation and was answered")
	}
	if nc.LastError() == nil || !strings.Contains(nc.LastError().Error(), "Permissions Violation") {
		t.Fatalf("a revocation request from a token user: %v, last error %v", err, nc.LastError())
	}
}
