package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
)

// The files of DATA/tls/: the bus's own CA (made once, never overwritten) and the server
// certificate it signs (re-issued when needed).
const (
	CAFile         = "ca.pem"
	CAKeyFile      = "ca.key"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server.key"
)

// Lifetimes and the renewal margin of EnsureTLS's certificates.
const (
	CALifetime     = 10 * 365 * 24 * time.Hour
	ServerLifetime = 365 * 24 * time.Hour
	RenewBefore    = 30 * 24 * time.Hour
)

// DefaultTLSNames are in every server certificate EnsureTLS issues: a client on the server's own
// machine can always verify it.
var DefaultTLSNames = []string{"localhost", "127.0.0.1", "::1"}

// EnsureTLS keeps the bus's TLS files under dataDir/tls: a CA (ECDSA P-256, 10 years), made on
// first use and never overwritten, and a server certificate it signs for DefaultTLSNames and
// names (host names or IP addresses; empty and unspecified ones such as 0.0.0.0 are skipped),
// valid for a year, stored with the CA after it (the chain the server presents). The server certificate is issued again when it is missing, does not match its
// key, is not signed by the CA, expires within RenewBefore, or does not cover every name. It
// returns the server certificate's, its key's and the CA's paths.
func EnsureTLS(dataDir string, names []string) (certFile, keyFile, caFile string, err error) {
	if dataDir == "" {
		return "", "", "", errors.New("tls: no data directory; pass --data DIR")
	}
	dir := filepath.Join(dataDir, TLSDir)
	ca, caKey, err := ensureCA(dataDir, dir)
	if err != nil {
		return "", "", "", err
	}
	certFile, keyFile, caFile = filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile), filepath.Join(dir, CAFile)
	want := tlsNames(names)
	if serverCertGood(certFile, keyFile, ca, want, time.Now()) {
		return certFile, keyFile, caFile, nil
	}
	certPEM, keyPEM, err := issueServer(ca, caKey, want, time.Now())
	if err != nil {
		return "", "", "", err
	}
	// The key first: a crash between the two writes leaves a certificate that does not match
	// its key, which the next start finds and issues again.
	if err := atomicfile.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return "", "", "", fmt.Errorf("tls: write the server key: %w", err)
	}
	if err := atomicfile.WriteFile(certFile, certPEM, 0o644); err != nil {
		return "", "", "", fmt.Errorf("tls: write the server certificate: %w", err)
	}
	return certFile, keyFile, caFile, nil
}

// tlsNames is DefaultTLSNames and names, without duplicates, empty or unspecified addresses.
func tlsNames(names []string) []string {
	var out []string
	for _, n := range append(slices.Clone(DefaultTLSNames), names...) {
		n = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(n), "["), "]")
		if n == "" {
			continue
		}
		if ip := net.ParseIP(n); ip != nil {
			if ip.IsUnspecified() {
				continue
			}
			n = ip.String()
		} else {
			n = strings.ToLower(n)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// ensureCA loads DATA/tls's CA, or makes it: in a temporary directory renamed into place, so
// that a crash never leaves a key without its certificate.
func ensureCA(dataDir, dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if !complete(dir) {
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, nil, fmt.Errorf("tls: data directory %s: %w", dataDir, err)
		}
		tmp, err := os.MkdirTemp(dataDir, ".tls-new-*")
		if err != nil {
			return nil, nil, fmt.Errorf("tls: make the CA in %s: %w", dataDir, err)
		}
		defer os.RemoveAll(tmp)
		if err := os.Chmod(tmp, 0o700); err != nil {
			return nil, nil, fmt.Errorf("tls: %w", err)
		}
		certPEM, keyPEM, err := newCA(time.Now())
		if err != nil {
			return nil, nil, err
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, CAKeyFile), keyPEM, 0o600); err != nil {
			return nil, nil, fmt.Errorf("tls: write the CA key: %w", err)
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, CAFile), certPEM, 0o644); err != nil {
			return nil, nil, fmt.Errorf("tls: write the CA certificate: %w", err)
		}
		if err := atomicfile.Rename(tmp, dir); err != nil && !complete(dir) {
			return nil, nil, fmt.Errorf("tls: put the new CA in place at %s: %w", dir, err)
		}
	}
	ca, key, err := loadCA(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w; %s is incomplete: restore %s and %s from a backup, or move the directory aside to make a new CA (every client must then be given the new %s)", err, dir, CAFile, CAKeyFile, CAFile)
	}
	return ca, key, err
}

func newCA(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("mesh-release bus CA %.8s", serial.Text(16)), Organization: []string{"mesh"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CALifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: sign the CA: %w", err)
	}
	keyPEM, err = marshalKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

func issueServer(ca *x509.Certificate, caKey *ecdsa.PrivateKey, names []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: server key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0], Organization: []string{"mesh"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Client auth too: the servers of a cluster present this certificate to each other on
		// their routes, each checking the other's against the CA (bus.WriteServerConfigs).
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if tmpl.NotAfter.After(ca.NotAfter) {
		tmpl.NotAfter = ca.NotAfter
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: sign the server certificate: %w", err)
	}
	keyPEM, err = marshalKey(key)
	if err != nil {
		return nil, nil, err
	}
	// The chain: the leaf, then the CA, so that a client pinning the CA by fingerprint (an
	// enrolling node) finds it in what the server presents.
	chain := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
	return chain, keyPEM, nil
}

// serverCertGood reports whether the certificate and key at certFile and keyFile match, are
// signed by ca and followed by it in the file, stay valid for more than RenewBefore after now,
// cover every name, and serve for routes as well as clients (one issued before clusters were
// configured is issued again).
func serverCertGood(certFile, keyFile string, ca *x509.Certificate, names []string, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return false
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || cert.CheckSignatureFrom(ca) != nil || !bytes.Equal(cert.RawIssuer, ca.RawSubject) {
		return false
	}
	if len(pair.Certificate) != 2 || !bytes.Equal(pair.Certificate[1], ca.Raw) {
		return false // not the leaf and the CA: issued before the chain carried the CA
	}
	if now.Add(RenewBefore).After(cert.NotAfter) || now.Before(cert.NotBefore) {
		return false
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return false
	}
	for _, n := range names {
		if cert.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

func marshalKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tls: encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("tls: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}
