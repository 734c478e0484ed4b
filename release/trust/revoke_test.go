package trust_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// systemConn is a connection as the system user, which Revoke pushes account updates on.
func (m *mesh) systemConn() *nats.Conn {
	m.t.Helper()
	nc, err := nats.Connect(m.srv.ClientURL(), nats.UserCredentials(m.store.SystemCreds()), nats.RootCAs(m.ca))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(nc.Close)
	return nc
}

// refused reports whether u is turned away by the server as revoked (or unauthorised).
func (m *mesh) refused(u user, node string) error {
	c, err := m.connect(u, nats.CustomInboxPrefix(wire.NodeInboxPrefix(node)), nats.NoReconnect())
	if err == nil {
		c.nc.Close()
		return errors.New("it connected")
	}
	if !errors.Is(err, nats.ErrAuthRevoked) && !errors.Is(err, nats.ErrAuthorization) {
		return err
	}
	return nil
}

// The decision: revoking a node's key makes the server disconnect it and refuse it from then on,
// restarts included; other nodes are untouched.
func TestRevokedNodeIsDisconnectedAndRefusedEvenAfterARestart(t *testing.T) {
	m := startMesh(t)
	a, b := m.nodeUser("node-a"), m.nodeUser("node-b")
	// node-a keeps trying to come back (no limit, and it does not give up on the same refusal
	// twice as nats.go would): each refusal reaches its error callback.
	var reconnected atomic.Bool
	ca, err := m.connect(a, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.IgnoreAuthErrorAbort(),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected.Store(true) }))
	if err != nil {
		t.Fatal(err)
	}
	cb, err := m.connect(b, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-b")))
	if err != nil {
		t.Fatal(err)
	}

	if err := m.store.Revoke(meshtest.Context(t, 30*time.Second), m.systemConn(), a.pub, time.Now()); err != nil {
		t.Fatal(err)
	}
	meshtest.Eventually(t, "node-a disconnected as revoked", func() bool { return ca.lostWith(nats.ErrAuthRevoked) })
	// Three attempts to reconnect, each refused by the server: one let in would have ended them.
	meshtest.Eventually(t, "three reconnects of the revoked node-a refused", func() bool {
		return ca.refusals() >= 4 || reconnected.Load() // the revocation's own, then one per attempt
	})
	if reconnected.Load() || ca.nc.IsConnected() {
		t.Fatal("the revoked node-a reconnected")
	}
	if err := m.refused(a, "node-a"); err != nil {
		t.Errorf("a new connection as the revoked node-a: %v; want it refused", err)
	}
	if !cb.nc.IsConnected() {
		t.Errorf("node-b was disconnected too: %v", cb.nc.LastError())
	}
	if revoked, err := m.store.Revoked(a.pub); err != nil || !revoked {
		t.Errorf("Revoked(node-a) = %v, %v; want true", revoked, err)
	}

	m.stop()
	m.start()
	if err := m.refused(a, "node-a"); err != nil {
		t.Errorf("after a restart, the revoked node-a: %v; want it refused", err)
	}
	if _, err := m.connect(b, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-b"))); err != nil {
		t.Errorf("after a restart, node-b: %v", err)
	}
}

// A revocation the server did not take (no connection) is still stored, says so, and takes
// effect when serve next starts: DATA/trust/account.jwt is the record.
func TestRevocationNotPushedTakesEffectAtTheNextStart(t *testing.T) {
	m := startMesh(t)
	a := m.nodeUser("node-a")
	err := m.store.Revoke(meshtest.Context(t, 30*time.Second), nil, a.pub, time.Now())
	if !errors.Is(err, trust.ErrNotPushed) {
		t.Fatalf("Revoke without a connection: %v; want %v", err, trust.ErrNotPushed)
	}
	m.stop()
	m.start()
	if err := m.refused(a, "node-a"); err != nil {
		t.Errorf("after the restart, node-a: %v; want it refused", err)
	}
}

// Revocations accumulate: a second one keeps the first (read, changed and written under a lock).
func TestRevocationsAccumulate(t *testing.T) {
	m := startMesh(t)
	sys := m.systemConn()
	users := []user{m.nodeUser("n1"), m.nodeUser("n2"), m.nodeUser("n3")}
	errs := make(chan error, len(users))
	for _, u := range users {
		go func() { errs <- m.store.Revoke(meshtest.Context(t, 30*time.Second), sys, u.pub, time.Now()) }()
	}
	for range users {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i, u := range users {
		if revoked, err := m.store.Revoked(u.pub); err != nil || !revoked {
			t.Errorf("user %d: Revoked = %v, %v; want true", i, revoked, err)
		}
		if err := m.refused(u, []string{"n1", "n2", "n3"}[i]); err != nil {
			t.Errorf("user %d: %v; want it refused", i, err)
		}
	}
}

// A refused revocation names the key.
func TestRevokeRefusesWhatIsNotAUserKey(t *testing.T) {
	m := startMesh(t)
	err := m.store.Revoke(meshtest.Context(t, 10*time.Second), m.systemConn(), m.store.AccountPublicKey(), time.Now())
	if err == nil {
		t.Fatal("revoked an account key as a user")
	}
}

// Issue 20: the enrolment service runs as several processes, each with a copy of DATA/trust.
// Before, each added its revocation to its own nodes.jwt and pushed it, so the later push
// dropped the earlier revocation and the node revoked first was admitted again. Now a revocation
// starts from the nodes account as the servers hold it: both nodes stay refused.
func TestRevocationsFromTwoCopiesOfTheTrustStoreAreBothKept(t *testing.T) {
	m := startMesh(t)
	other := t.TempDir()
	if err := os.CopyFS(filepath.Join(other, trust.Dir), os.DirFS(m.store.Dir())); err != nil {
		t.Fatal(err)
	}
	copyStore, err := trust.Ensure(other)
	if err != nil {
		t.Fatal(err)
	}
	a, b := m.nodeUser("node-a"), m.nodeUser("node-b")
	ctx := meshtest.Context(t, 30*time.Second)
	if err := m.store.Revoke(ctx, m.systemConn(), a.pub, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := copyStore.Revoke(ctx, m.systemConn(), b.pub, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, u := range []struct {
		node string
		u    user
	}{{"node-a", a}, {"node-b", b}} {
		if err := m.refused(u.u, u.node); err != nil {
			t.Errorf("%s, revoked through one copy of the trust store, after a revocation through the other: %v", u.node, err)
		}
	}
	// The copy's nodes.jwt holds both too: a push from it later drops neither.
	for _, pub := range []string{a.pub, b.pub} {
		if revoked, err := copyStore.Revoked(pub); err != nil || !revoked {
			t.Errorf("the copy's nodes.jwt: %s revoked %v, %v", pub, revoked, err)
		}
	}
}
