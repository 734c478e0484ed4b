package bus

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// A CA switch under a running serve (decision 0046): the server certificate issued by the new
// CA is presented from the next handshake on, while a client connected before stays connected,
// and reconnects, once cut, to the new certificate with a bundle of both CAs.
func TestServePresentsTheSwitchedCertificateWithoutDroppingConnections(t *testing.T) {
	dir := t.TempDir()
	srv, err := Serve(t.Context(), ServeOptions{DataDir: dir, Listen: "127.0.0.1:-1", OwnTLS: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	next, _, err := trust.AddCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	old, err := trust.ReadCAs(dir)
	if err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(t.TempDir(), "both.pem")
	if err := os.WriteFile(both, pemOf(old.Current, next), 0o644); err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Int32
	reconnected := make(chan struct{}, 1)
	before, err := nats.Connect(srv.ClientURL(), nats.RootCAs(both), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { dropped.Add(1) }),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if got := issuer(t, before); !got.Equal(old.Current) {
		t.Fatalf("before the switch the server's CA is %s", got.Subject)
	}

	if _, err := trust.SwitchCA(dir); err != nil {
		t.Fatal(err)
	}
	after, err := nats.Connect(srv.ClientURL(), nats.RootCAs(filepath.Join(dir, trust.TLSDir, trust.CAFile)))
	if err != nil {
		t.Fatalf("a client of the new CA alone: %v", err)
	}
	defer after.Close()
	if got := issuer(t, after); !got.Equal(next) {
		t.Fatalf("after the switch the server's CA is %s, want the new one", got.Subject)
	}
	if err := before.Flush(); err != nil || dropped.Load() != 0 {
		t.Fatalf("the client connected before the switch: %v, %d disconnects", err, dropped.Load())
	}
	if err := before.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconnected:
	case <-time.After(time.Minute):
		t.Fatal("the client of both CAs did not reconnect")
	}
	if got := issuer(t, before); !got.Equal(next) {
		t.Fatalf("the client of both CAs reconnected to a server of %s, want the new CA", got.Subject)
	}
}

// issuer is the CA certificate the server's chain carries after its leaf.
func issuer(t *testing.T, nc *nats.Conn) *x509.Certificate {
	t.Helper()
	cs, err := nc.TLSConnectionState()
	if err != nil || len(cs.PeerCertificates) < 2 {
		t.Fatalf("TLS state %v, %d certificates", err, len(cs.PeerCertificates))
	}
	return cs.PeerCertificates[1]
}

func pemOf(certs ...*x509.Certificate) []byte { return wire.EncodeCAs(certs) }
