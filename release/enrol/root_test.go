package enrol

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/novox/mesh-host/release/trustroot"
	"github.com/novox/mesh-host/wire"
)

// testRoot is root v1 of three fresh root keys (threshold 2) and one release key, signed by two.
func testRoot(t *testing.T) wire.Root {
	t.Helper()
	var keys []ed25519.PrivateKey
	var pubs []ed25519.PublicKey
	for range 4 {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		keys, pubs = append(keys, priv), append(pubs, pub)
	}
	r, err := trustroot.New(trustroot.Spec{RootKeys: pubs[:3], Threshold: 2, Releases: pubs[3:], Targets: pubs[3:], Expires: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys[:2] {
		if err := r.Sign(k); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// A token names the newest root on the bus, in its user's JWT tags (so that a host from before
// roots, which parses the token's JSON strictly, still reads it); a bus with no root gives a
// token that pins none; a chain on the bus that does not verify refuses the token.
func TestATokenPinsTheNewestRootOnTheBus(t *testing.T) {
	e := startEnv(t)
	o := e.clock.opts("")
	o.CAFile = e.ca
	issue := func() (Issued, wire.TokenRoot, bool) {
		t.Helper()
		iss, err := IssueToken(context.Background(), e.bus.Conn.JS, e.store, e.names, o)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := wire.ParseToken(iss.Token)
		if err != nil {
			t.Fatal(err)
		}
		tokenJWT, _ := jwt.ParseDecoratedJWT([]byte(tok.Creds))
		uc, err := jwt.DecodeUserClaims(tokenJWT)
		if err != nil {
			t.Fatal(err)
		}
		pin, ok, err := wire.TokenRootOf(uc.Tags)
		if err != nil {
			t.Fatal(err)
		}
		return iss, pin, ok
	}
	if iss, _, ok := issue(); ok || iss.Root != nil {
		t.Fatalf("with no root on the bus the token pins %v", iss.Root)
	}
	r := testRoot(t)
	e.bus.Put(e.names.Releases(), wire.RootKey(1), r.Marshal())
	iss, pin, ok := issue()
	want := wire.TokenRoot{Version: 1, Fingerprint: r.Fingerprint()}
	if !ok || pin != want || iss.Root == nil || *iss.Root != want {
		t.Fatalf("the token pins %v (tag %v), want %v", iss.Root, pin, want)
	}
	// A root.3 after no root.2 and junk under root.2 are past where a node's walk stops (anyone
	// able to write the bucket can put them): the token still pins v1, as a node would follow.
	e.bus.Put(e.names.Releases(), wire.RootKey(3), r.Marshal())
	if iss, pin, ok := issue(); !ok || pin != want || *iss.Root != want {
		t.Fatalf("a chain with a gap: the token pins %v, want %v", pin, want)
	}
	e.bus.Put(e.names.Releases(), wire.RootKey(2), []byte("junk"))
	if iss, pin, ok := issue(); !ok || pin != want || *iss.Root != want {
		t.Fatalf("junk under root.2: the token pins %v, want %v", pin, want)
	}
}
