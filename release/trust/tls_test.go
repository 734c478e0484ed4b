package trust

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func loadCert(t *testing.T, file string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(file, strings.TrimSuffix(file, ".pem")+".key")
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func read(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The decision: a CA (ECDSA P-256, 10 years) and a server certificate it signs, for a year, for
// localhost, 127.0.0.1, ::1 and the names given; keys 0600.
func TestEnsureTLSMakesACAAndAServerCertificateForTheNames(t *testing.T) {
	data := t.TempDir()
	cert, key, caFile, err := EnsureTLS(data, []string{"bus.example", "10.1.2.3", "0.0.0.0", "", "[fd00::1]"})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(cert) != filepath.Join(data, TLSDir) || filepath.Base(caFile) != CAFile || filepath.Base(key) != ServerKeyFile {
		t.Errorf("files %s %s %s", cert, key, caFile)
	}
	ca := loadCert(t, caFile)
	if !ca.IsCA || ca.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Errorf("CA: IsCA %v, key %T", ca.IsCA, ca.PublicKey)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life < CALifetime {
		t.Errorf("the CA lives %s, want 10 years", life)
	}
	srv := loadCert(t, cert)
	pair, _ := tls.LoadX509KeyPair(cert, key)
	if len(pair.Certificate) != 2 || string(pair.Certificate[1]) != string(ca.Raw) {
		t.Errorf("%s holds %d certificates; want the leaf, then the CA", cert, len(pair.Certificate))
	}
	if life := time.Until(srv.NotAfter); life < ServerLifetime-time.Hour || life > ServerLifetime {
		t.Errorf("the server certificate lives %s more, want a year", life)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"localhost", "127.0.0.1", "::1", "bus.example", "10.1.2.3", "fd00::1"} {
		if _, err := srv.Verify(x509.VerifyOptions{DNSName: name, Roots: pool}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := srv.Verify(x509.VerifyOptions{DNSName: "0.0.0.0", Roots: pool}); err == nil {
		t.Error("the certificate names 0.0.0.0")
	}
	for _, f := range []string{key, filepath.Join(data, TLSDir, CAKeyFile)} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want 0600", f, st.Mode(), err)
		}
	}
}

// A good certificate is kept: starting again changes no file.
func TestEnsureTLSKeepsAGoodCertificate(t *testing.T) {
	data := t.TempDir()
	cert, key, caFile, err := EnsureTLS(data, []string{"bus.example"})
	if err != nil {
		t.Fatal(err)
	}
	before := read(t, cert) + read(t, key) + read(t, caFile)
	// Fewer names are covered by the same certificate.
	if _, _, _, err := EnsureTLS(data, nil); err != nil {
		t.Fatal(err)
	}
	if read(t, cert)+read(t, key)+read(t, caFile) != before {
		t.Error("a second EnsureTLS changed the files")
	}
}

// The server certificate is issued again, by the same CA, when it expires within 30 days, lacks
// a name, or does not match its key (a crash between writing the two); the CA never changes.
func TestEnsureTLSReissuesTheServerCertificateWhenItMust(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey)
		names []string
	}{
		{"expiring within 30 days", func(t *testing.T, dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) {
			c, k, err := issueServer(ca, caKey, tlsNames(nil), time.Now().Add(-ServerLifetime+29*24*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, ServerCertFile), c, 0o644)
			os.WriteFile(filepath.Join(dir, ServerKeyFile), k, 0o600)
		}, nil},
		{"a new name", func(*testing.T, string, *x509.Certificate, *ecdsa.PrivateKey) {}, []string{"new.example"}},
		{"a key that is not its own", func(t *testing.T, dir string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) {
			_, k, err := issueServer(ca, caKey, tlsNames(nil), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, ServerKeyFile), k, 0o600)
		}, nil},
		{"no certificate", func(t *testing.T, dir string, _ *x509.Certificate, _ *ecdsa.PrivateKey) {
			os.Remove(filepath.Join(dir, ServerCertFile))
		}, nil},
		{"the leaf alone, without the CA after it", func(t *testing.T, dir string, _ *x509.Certificate, _ *ecdsa.PrivateKey) {
			b, _ := os.ReadFile(filepath.Join(dir, ServerCertFile))
			leaf, _ := pem.Decode(b)
			os.WriteFile(filepath.Join(dir, ServerCertFile), pem.EncodeToMemory(leaf), 0o644)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			cert, _, caFile, err := EnsureTLS(data, nil)
			if err != nil {
				t.Fatal(err)
			}
			caPEM := read(t, caFile)
			ca, caKey, err := ensureCA(data, filepath.Join(data, TLSDir))
			if err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, filepath.Join(data, TLSDir), ca, caKey)
			spoiled, _ := os.ReadFile(cert)
			if _, _, _, err := EnsureTLS(data, tc.names); err != nil {
				t.Fatal(err)
			}
			if read(t, cert) == string(spoiled) {
				t.Fatal("the certificate was not issued again")
			}
			if read(t, caFile) != caPEM {
				t.Error("the CA changed")
			}
			srv := loadCert(t, cert)
			if srv.CheckSignatureFrom(ca) != nil || time.Until(srv.NotAfter) < ServerLifetime-time.Hour {
				t.Errorf("the new certificate: issuer %s, until %s", srv.Issuer, srv.NotAfter)
			}
			for _, n := range tc.names {
				if srv.VerifyHostname(n) != nil {
					t.Errorf("the new certificate does not name %s", n)
				}
			}
		})
	}
}

// The CA is never made again over a part of one: clients hold it.
func TestEnsureTLSNeverReplacesTheCA(t *testing.T) {
	data := t.TempDir()
	if _, _, _, err := EnsureTLS(data, nil); err != nil {
		t.Fatal(err)
	}
	caPEM := read(t, filepath.Join(data, TLSDir, CAFile))
	os.Remove(filepath.Join(data, TLSDir, CAKeyFile))
	_, _, _, err := EnsureTLS(data, nil)
	if err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("EnsureTLS without ca.key: %v", err)
	}
	if read(t, filepath.Join(data, TLSDir, CAFile)) != caPEM {
		t.Error("ca.pem changed")
	}
	if _, err := os.Stat(filepath.Join(data, TLSDir, CAKeyFile)); err == nil {
		t.Error("a new ca.key was made")
	}
}
