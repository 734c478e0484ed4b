package trust_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A client that does not start TLS gets nothing: the server says TLS is required and drops it
// at its plaintext CONNECT, never answering its PING.
func TestPlaintextClientIsRefused(t *testing.T) {
	m := startMesh(t)
	conn, err := net.DialTimeout("tcp", m.srv.Addr().String(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, `"tls_required":true`) {
		t.Errorf("the server's INFO does not require TLS: %s", bounded(info))
	}
	if _, err := io.WriteString(conn, "CONNECT {\"verbose\":false,\"pedantic\":false}\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the server's answer: %v (so far %q)", err, rest)
	}
	if strings.Contains(string(rest), "PONG") {
		t.Errorf("a plaintext client was answered: %q", bounded(string(rest)))
	}
}

// A client that trusts another CA refuses the server: the x509 error says why.
func TestClientTrustingAnotherCAIsRefusedWithTheX509Error(t *testing.T) {
	m := startMesh(t)
	_, _, otherCA, err := trust.EnsureTLS(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nats.Connect(m.srv.ClientURL(), nats.UserCredentials(m.store.AdminCreds()), nats.RootCAs(otherCA), nats.Timeout(10*time.Second))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("connect trusting another CA: %v; want x509.UnknownAuthorityError", err)
	}
	if !strings.Contains(err.Error(), "x509: certificate signed by unknown authority") {
		t.Errorf("the error does not say x509's words: %v", err)
	}
}

// TLS is not authentication: a client with the right CA and no credentials is refused too.
func TestClientWithoutCredentialsIsRefused(t *testing.T) {
	m := startMesh(t)
	_, err := m.connect(user{}, nats.NoReconnect())
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("connect without credentials: %v; want %v", err, nats.ErrAuthorization)
	}
}

// serve restarted on the same data directory is the same bus: the same identities, so
// admin.creds and every node's user keep working, and the data is there.
func TestServeRestartedOnTheSameDataKeepsItsIdentities(t *testing.T) {
	m := startMesh(t)
	account := m.store.AccountPublicKey()
	admin, err := os.ReadFile(m.store.AdminCreds())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(m.ca)
	if err != nil {
		t.Fatal(err)
	}
	a := m.nodeUser("node-a")

	m.stop()
	m.start()
	if got := m.store.AccountPublicKey(); got != account {
		t.Errorf("the mesh account is %s after the restart, was %s", got, account)
	}
	for file, before := range map[string][]byte{m.store.AdminCreds(): admin, m.ca: ca} {
		if after, err := os.ReadFile(file); err != nil || string(after) != string(before) {
			t.Errorf("%s changed across the restart (err %v)", file, err)
		}
	}
	ctx := meshtest.Context(t, 30*time.Second)
	kv, err := m.admin.JS.KeyValue(ctx, m.names.Declarations())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "node-a"); err != nil || string(e.Value()) != `{"for": "a"}` {
		t.Errorf("after the restart the admin reads node-a's declaration as %v, %v", e, err)
	}
	c, err := m.connect(a, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")))
	if err != nil {
		t.Fatalf("a node user signed before the restart: %v", err)
	}
	if _, err := c.js.Publish(ctx, m.names.Heartbeat("node-a"), []byte(`{}`)); err != nil {
		t.Errorf("its heartbeat: %v", err)
	}
}

// The process that runs the server reaches it in-process, without TLS or a socket, as a user of
// the mesh account (serve's own connection: the certificate need not name 127.0.0.1).
func TestInProcessConnectionWorksWithoutTLS(t *testing.T) {
	m := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := m.srv.Connect(ctx, m.store.AdminCreds())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.JS.KeyValue(ctx, m.names.Declarations()); err != nil {
		t.Errorf("in-process admin: %v", err)
	}
}
