package trust

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
)

// A rollover of the bus's own CA (decision 0046) keeps its state in DATA/tls beside the CA the
// servers use (ca.pem, ca.key): the CA added and not yet used (next/), and, after a switch, the
// CA used before it (previous/, its certificate only) until it is dropped, then kept for the
// record under retired/. Nodes learn each bundle over the link (mesh-release bus ca): both CAs
// before the servers switch, the new one alone after.
const (
	NextCADir     = "next"
	PreviousCADir = "previous"
	RetiredCADir  = "retired"
)

// CAs are the CAs of DATA/tls: Current signs the server certificate; Next was added and is not
// used yet (nil: none); Previous was used before the last switch and is not dropped yet (nil:
// none).
type CAs struct {
	Current, Next, Previous *x509.Certificate
}

// Bundle is the CAs a node should trust now: Current, then Next or Previous when there is one.
func (c CAs) Bundle() []*x509.Certificate {
	out := []*x509.Certificate{c.Current}
	for _, x := range []*x509.Certificate{c.Next, c.Previous} {
		if x != nil {
			out = append(out, x)
		}
	}
	return out
}

// ReadCAs reads DATA/tls's CAs. The current one must exist: `serve` makes it on its first start.
func ReadCAs(dataDir string) (CAs, error) {
	dir := filepath.Join(dataDir, TLSDir)
	if !complete(dir) {
		return CAs{}, fmt.Errorf("tls: no CA in %s: a rollover is of the CA `mesh-release serve` keeps there (give its --data); run serve once to make it", dir)
	}
	var c CAs
	var err error
	if c.Current, _, err = loadCA(dir); err != nil {
		return CAs{}, err
	}
	if complete(filepath.Join(dir, NextCADir)) {
		if c.Next, _, err = loadCA(filepath.Join(dir, NextCADir)); err != nil {
			return CAs{}, err
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, PreviousCADir, CAFile)); err == nil {
		if c.Previous, err = parseCertPEM(b); err != nil {
			return CAs{}, fmt.Errorf("tls: %s: %w", filepath.Join(dir, PreviousCADir, CAFile), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return CAs{}, fmt.Errorf("tls: %w", err)
	}
	return c, nil
}

// AddCA makes a new CA in DATA/tls/next beside the one the servers use; made is false when one
// was added already (it is returned). Refused while the CA of the last switch is not dropped:
// a node holds at most the two CAs of one rollover.
func AddCA(dataDir string) (next *x509.Certificate, made bool, err error) {
	c, err := ReadCAs(dataDir)
	if err != nil {
		return nil, false, err
	}
	if c.Next != nil {
		return c.Next, false, nil
	}
	if c.Previous != nil {
		return nil, false, fmt.Errorf("tls: the CA the servers used before the last switch (%s) is not dropped yet: drop it first (mesh-release bus ca drop)", wire.CAFingerprint(c.Previous))
	}
	dir := filepath.Join(dataDir, TLSDir)
	tmp, err := os.MkdirTemp(dir, ".next-new-*")
	if err != nil {
		return nil, false, fmt.Errorf("tls: %w", err)
	}
	defer os.RemoveAll(tmp)
	certPEM, keyPEM, err := newCA(time.Now())
	if err != nil {
		return nil, false, err
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, CAKeyFile), keyPEM, 0o600); err != nil {
		return nil, false, fmt.Errorf("tls: write the new CA's key: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, CAFile), certPEM, 0o644); err != nil {
		return nil, false, fmt.Errorf("tls: write the new CA: %w", err)
	}
	if err := atomicfile.Rename(tmp, filepath.Join(dir, NextCADir)); err != nil {
		return nil, false, fmt.Errorf("tls: put the new CA in place: %w", err)
	}
	next, _, err = loadCA(filepath.Join(dir, NextCADir))
	return next, true, err
}

// SwitchCA makes the CA AddCA added the one the servers use: the current CA's certificate is
// kept in previous/ (until DropCA), the new CA and its key take its place, and a server
// certificate for the names the current one holds is issued by it. A running `serve` presents
// it from its next handshake (bus.Serve reads the certificate file again when it changes);
// connections made stay. A switch cut short is finished by running it again.
func SwitchCA(dataDir string) (CAs, error) {
	c, err := ReadCAs(dataDir)
	if err != nil {
		// A switch cut short between the CA's key and its certificate leaves a pair that does
		// not load; next/ and previous/ say it was under way, and it is finished.
		if c, err = switchUnderWay(dataDir, err); err != nil {
			return CAs{}, err
		}
	}
	if c.Next == nil {
		return CAs{}, errors.New("tls: no new CA to switch to: add one first (mesh-release bus ca add), and switch once every node holds it")
	}
	dir := filepath.Join(dataDir, TLSDir)
	next, nextKey, err := loadCA(filepath.Join(dir, NextCADir))
	if err != nil {
		return CAs{}, err
	}
	names := serverNames(filepath.Join(dir, ServerCertFile))
	if c.Previous == nil && !c.Current.Equal(next) {
		if err := keepPrevious(dir, c.Current); err != nil {
			return CAs{}, err
		}
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, NextCADir, CAKeyFile))
	if err != nil {
		return CAs{}, fmt.Errorf("tls: %w", err)
	}
	// The key first, as EnsureTLS writes a server's: a crash between the two leaves a pair that
	// does not match, which running the switch again repairs (next/ is removed last).
	if err := atomicfile.WriteFile(filepath.Join(dir, CAKeyFile), keyPEM, 0o600); err != nil {
		return CAs{}, fmt.Errorf("tls: write the CA key: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CAFile), pemOf(next), 0o644); err != nil {
		return CAs{}, fmt.Errorf("tls: write the CA: %w", err)
	}
	certPEM, serverKey, err := issueServer(next, nextKey, names, time.Now())
	if err != nil {
		return CAs{}, err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ServerKeyFile), serverKey, 0o600); err != nil {
		return CAs{}, fmt.Errorf("tls: write the server key: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, ServerCertFile), certPEM, 0o644); err != nil {
		return CAs{}, fmt.Errorf("tls: write the server certificate: %w", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, NextCADir)); err != nil {
		return CAs{}, fmt.Errorf("tls: %w", err)
	}
	return ReadCAs(dataDir)
}

// switchUnderWay is the CAs of a switch cut short (next/ and previous/ both there), else readErr.
func switchUnderWay(dataDir string, readErr error) (CAs, error) {
	dir := filepath.Join(dataDir, TLSDir)
	next, _, err := loadCA(filepath.Join(dir, NextCADir))
	if err != nil {
		return CAs{}, readErr
	}
	b, err := os.ReadFile(filepath.Join(dir, PreviousCADir, CAFile))
	if err != nil {
		return CAs{}, readErr
	}
	prev, err := parseCertPEM(b)
	if err != nil {
		return CAs{}, readErr
	}
	return CAs{Next: next, Previous: prev}, nil
}

// DropCA ends a rollover: the CA used before the switch leaves previous/ for
// retired/<hex of its SHA-256>.pem, kept for the record.
func DropCA(dataDir string) (dropped *x509.Certificate, err error) {
	c, err := ReadCAs(dataDir)
	if err != nil {
		return nil, err
	}
	if c.Previous == nil {
		return nil, errors.New("tls: no CA to drop: the servers' CA was not switched since the last drop")
	}
	dir := filepath.Join(dataDir, TLSDir)
	retired := filepath.Join(dir, RetiredCADir)
	if err := os.MkdirAll(retired, 0o700); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	fp := wire.CAFingerprint(c.Previous)
	if err := atomicfile.WriteFile(filepath.Join(retired, fp[len("sha256:"):]+".pem"), pemOf(c.Previous), 0o644); err != nil {
		return nil, fmt.Errorf("tls: keep the dropped CA: %w", err)
	}
	if err := os.RemoveAll(filepath.Join(dir, PreviousCADir)); err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return c.Previous, nil
}

// keepPrevious writes cert to previous/ca.pem, in a temporary directory renamed into place.
func keepPrevious(dir string, cert *x509.Certificate) error {
	tmp, err := os.MkdirTemp(dir, ".previous-new-*")
	if err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := atomicfile.WriteFile(filepath.Join(tmp, CAFile), pemOf(cert), 0o644); err != nil {
		return fmt.Errorf("tls: keep the CA switched from: %w", err)
	}
	if err := atomicfile.Rename(tmp, filepath.Join(dir, PreviousCADir)); err != nil {
		return fmt.Errorf("tls: keep the CA switched from: %w", err)
	}
	return nil
}

// serverNames are the names the server certificate at path holds, DefaultTLSNames when it
// cannot be read.
func serverNames(path string) []string {
	pair, err := tls.LoadX509KeyPair(path, path[:len(path)-len(ServerCertFile)]+ServerKeyFile)
	if err != nil {
		return tlsNames(nil)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return tlsNames(nil)
	}
	names := append([]string{}, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	return tlsNames(names)
}

// loadCA reads a CA certificate and its key from dir.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("tls: the CA in %s: %w", dir, err)
	}
	ca, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("tls: %s: %w", filepath.Join(dir, CAFile), err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !ca.IsCA {
		return nil, nil, fmt.Errorf("tls: %s is not an ECDSA CA certificate and key", dir)
	}
	return ca, key, nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	certs, err := wire.ParseBusCAs(string(bytes.TrimSpace(b)))
	if err != nil {
		return nil, err
	}
	return certs[0], nil
}

func pemOf(c *x509.Certificate) []byte { return wire.EncodeCAs([]*x509.Certificate{c}) }
