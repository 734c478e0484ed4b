package meshtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority for tests of the bus's TLS: its certificate (Cert, PEM) and key.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid from an hour ago for a year.
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Leaf issues a server certificate for 127.0.0.1 and localhost, signed by the CA.
func (ca *CA) Leaf(tb testing.TB) tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// LeafFiles writes a server certificate Leaf issues and its key to dir, returning their paths.
func (ca *CA) LeafFiles(tb testing.TB, dir string) (certFile, keyFile string) {
	tb.Helper()
	leaf := ca.Leaf(tb)
	kd, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]}), 0o644); err != nil {
		tb.Fatal(err)
	}
	return certFile, keyFile
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// ServerTLS is a test bus's TLS: the certificate it presents, switched by Present while it runs
// (new handshakes take the new one; connections made stay as they are), as `mesh-release
// serve` does when its certificate file changes.
type ServerTLS struct {
	cert atomic.Pointer[tls.Certificate]
	// trusted are the CAs the bus's own test connection trusts.
	trusted *x509.CertPool
}

// TLS makes the bus require TLS, presenting a certificate ca issues; its own connection
// trusts every CA of trusted (ca when none).
func TLS(tb testing.TB, ca *CA, trusted ...*CA) (BusOption, *ServerTLS) {
	st := &ServerTLS{trusted: x509.NewCertPool()}
	if len(trusted) == 0 {
		trusted = []*CA{ca}
	}
	for _, c := range trusted {
		st.trusted.AddCert(c.Cert)
	}
	st.Present(tb, ca)
	return func(o *busOptions) { o.tls = st }, st
}

// Present makes the bus present a certificate ca issues from its next handshake on.
func (st *ServerTLS) Present(tb testing.TB, ca *CA) {
	leaf := ca.Leaf(tb)
	leaf.Certificate = append(leaf.Certificate, ca.Cert.Raw)
	st.cert.Store(&leaf)
}

// Trust adds ca to the CAs the bus's own test connection trusts (for its reconnects).
func (st *ServerTLS) Trust(ca *CA) { st.trusted.AddCert(ca.Cert) }

func (st *ServerTLS) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return st.cert.Load(), nil
	}}
}

func (st *ServerTLS) clientConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: st.trusted}
}
