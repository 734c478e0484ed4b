package enrol

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/wire"
)

// fakeStore signs users with a throwaway account key and records revocations; the service's
// logic is tested against an unauthenticated bus with it (the real trust store and operator
// mode are in the tests that run `serve`).
type fakeStore struct {
	account nkeys.KeyPair
	mu      sync.Mutex
	revoked map[string]time.Time
	failRev error
	// transition makes InTransition true (decision 0024).
	transition bool
}

func newFakeStore(t testing.TB) *fakeStore {
	kp, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	return &fakeStore{account: kp, revoked: map[string]time.Time{}}
}

func (f *fakeStore) NodeUser(names wire.Names, node, userPub string) (string, error) {
	c := jwt.NewUserClaims(userPub)
	c.Name = node
	c.Tags.Add("mesh-node", "node:"+node)
	return c.Encode(f.account)
}

func (f *fakeStore) TokenUser(names wire.Names, expires time.Time, ttl time.Duration, tags ...string) (string, string, error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return "", "", err
	}
	pub, _ := u.PublicKey()
	seed, _ := u.Seed()
	c := jwt.NewUserClaims(pub)
	c.Expires = expires.Unix()
	c.Tags.Add(wire.TokenTTLTag + ttl.String())
	c.Tags.Add(tags...)
	c.Pub.Allow.Add(names.EnrolSubject())
	c.Sub.Allow.Add(wire.TokenInboxPrefix(pub) + ".>")
	tok, err := c.Encode(f.account)
	if err != nil {
		return "", "", err
	}
	creds, err := jwt.FormatUserConfig(tok, seed)
	return string(creds), pub, err
}

func (f *fakeStore) Revoke(_ context.Context, _ *nats.Conn, userPub string, at time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failRev != nil {
		return f.failRev
	}
	f.revoked[userPub] = at
	return nil
}

func (f *fakeStore) NodesSigningPublicKey() string {
	pub, _ := f.account.PublicKey()
	return pub
}

func (f *fakeStore) InTransition() bool { return f.transition }

func (f *fakeStore) PushIfNewer(context.Context, *nats.Conn) (bool, error) { return false, nil }

func (f *fakeStore) isRevoked(pub string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.revoked[pub]
	return ok
}

// writeCA makes a self-signed CA certificate in dir/ca.pem and returns its path.
func writeCA(t testing.TB, dir string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
