package wire_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func pubOf(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

// testRoot is root version v with rootKeys (threshold th) and one releases and targets key.
func testRoot(t *testing.T, v uint64, th int, rootKeys []ed25519.PrivateKey, rel, tgt ed25519.PrivateKey) wire.Root {
	t.Helper()
	r := wire.Root{Schema: wire.RootSchema, Version: v, Expires: "2099-01-01T00:00:00Z", Keys: map[string]string{}, Roles: map[wire.Role]wire.RoleKeys{}}
	add := func(role wire.Role, ks ...ed25519.PrivateKey) []string {
		var ids []string
		for _, k := range ks {
			id := wire.KeyID(pubOf(k))
			r.Keys[id] = base64.StdEncoding.EncodeToString(pubOf(k))
			ids = append(ids, id)
		}
		slicesSort(ids)
		return ids
	}
	r.Roles[wire.RoleRoot] = wire.RoleKeys{Keys: add(wire.RoleRoot, rootKeys...), Threshold: th}
	r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: add(wire.RoleReleases, rel), Threshold: 1}
	r.Roles[wire.RoleTargets] = wire.RoleKeys{Keys: add(wire.RoleTargets, tgt), Threshold: 1, MaxTTL: "720h0m0s"}
	return r
}

func slicesSort(s []string) {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
}

func sign(t *testing.T, r wire.Root, ks ...ed25519.PrivateKey) wire.Root {
	t.Helper()
	for _, k := range ks {
		if err := r.Sign(k); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func TestTrustWalksTheChainAndNamesAKeyARootRemoved(t *testing.T) {
	r1, r2, r3 := newKey(t), newKey(t), newKey(t)
	rel, rel2, tgt := newKey(t), newKey(t), newKey(t)
	roots := []ed25519.PrivateKey{r1, r2, r3}
	legacy := wire.LegacyTrust([]ed25519.PublicKey{pubOf(rel)}, []ed25519.PublicKey{pubOf(tgt)})

	v1 := testRoot(t, 1, 2, roots, rel, tgt)
	if _, err := legacy.Advance(sign(t, v1, r1, r2)); !errors.Is(err, wire.ErrKeyNotTrusted) {
		t.Fatalf("root v1 without a host.json key's signature: %v", err)
	}
	tr, err := legacy.Advance(sign(t, v1, r1, r2, rel))
	if err != nil {
		t.Fatal(err)
	}
	v2 := testRoot(t, 2, 2, roots, rel2, tgt)
	if _, err := tr.Advance(sign(t, v2, r1)); !errors.Is(err, wire.ErrBelowThreshold) {
		t.Fatalf("root v2 signed by 1 of 3: %v", err)
	}
	tr2, err := tr.Advance(sign(t, v2, r1, r3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr2.Advance(sign(t, v1, r1, r2, rel)); err == nil || !strings.Contains(err.Error(), "never goes back") {
		t.Fatalf("going back: %v", err)
	}
	text := []byte("mesh-host release 4\nversion=v9.9.9\n")
	sg, _ := wire.SignText(text, rel)
	env := wire.Envelope{Kind: wire.KindManifest, Name: "v9.9.9", Role: wire.RoleReleases, Text: text, Signatures: []wire.Signature{sg}}
	if err := tr.Verify(env, time.Now()); err != nil {
		t.Fatalf("v1 trusts rel: %v", err)
	}
	err = tr2.Verify(env, time.Now())
	want := "signed by key " + wire.ShortKeyID(wire.KeyID(pubOf(rel))) + " which root v2 removed from releases"
	if !errors.Is(err, wire.ErrKeyRemoved) || !strings.Contains(err.Error(), want) {
		t.Fatalf("removed key: %v, want %q", err, want)
	}
	again, err := wire.TrustFromRoots(tr2.Roots())
	if err != nil || again.Version() != 2 {
		t.Fatalf("from stored roots: %v %d", err, again.Version())
	}
	far := wire.Envelope{Kind: wire.KindTarget, Name: "fleet", Role: wire.RoleTargets, Text: []byte("x"), Expires: time.Now().Add(1000 * time.Hour)}
	sgt, _ := wire.SignText(far.Text, tgt)
	far.Signatures = []wire.Signature{sgt}
	if err := tr2.Verify(far, time.Now()); !errors.Is(err, wire.ErrTooFarAhead) {
		t.Fatalf("max_ttl: %v", err)
	}
	b := sign(t, v2, r1, r3).Marshal()
	if back, err := wire.ParseRoot(b); err != nil || back.Fingerprint() != v2.Fingerprint() {
		t.Fatalf("round trip: %v", err)
	}
}
