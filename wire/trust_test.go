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

// chainTo is the trust of a node that migrated to root v1 (root keys rootA, rootB, rootC,
// threshold 2; releases relA; targets tgtA) and walked to each of next, each signed by rootA
// and rootB.
func chainTo(t *testing.T, next ...wire.Root) wire.Trust {
	t.Helper()
	v1 := makeRoot(1, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, "720h0m0s"})
	tr := trustAt(t, v1, rootA, rootB)
	for _, r := range next {
		var err error
		if tr, err = tr.Advance(sign(t, r, rootA, rootB)); err != nil {
			t.Fatalf("advance to v%d: %v", r.Version, err)
		}
	}
	return tr
}

// releasesRoot is root version v of chainTo's root keys with releases keys rel and targets tgtA.
func releasesRoot(v uint64, rel ...ed25519.PrivateKey) wire.Root {
	return makeRoot(v, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{rel, 1, ""}, roleSpec{keys(tgtA), 1, "720h0m0s"})
}

// A manifest signed by a key a root removed from releases is refused naming the key and the
// root that removed it, exactly as the issue words it, and matching both ErrKeyRemoved and
// ErrKeyNotTrusted (and the manifest's ErrUnknownKey): a refused signature, never a bad release.
func TestAKeyARootRemovedIsRefusedByName(t *testing.T) {
	tr := chainTo(t, releasesRoot(2, relA), releasesRoot(3, relA, relB), releasesRoot(4, relB))
	m := testManifestDoc()
	must(t, m.Sign(relA))
	err := m.Verify(tr)
	if want := "manifest v1.4.0: signed by key a43799df… which root v4 removed from releases"; err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	for _, is := range []error{wire.ErrKeyRemoved, wire.ErrKeyNotTrusted, wire.ErrUnknownKey} {
		if !errors.Is(err, is) {
			t.Errorf("%v is not %v", err, is)
		}
	}
	must(t, m.Sign(relB))
	if err := m.Verify(tr); err != nil {
		t.Fatalf("signed by the key v4 keeps: %v", err)
	}
	// A key removed long ago is named with the root that removed it, not the newest.
	tr5 := chainTo(t, releasesRoot(2, relB), releasesRoot(3, relB), releasesRoot(4, relC))
	must(t, m.Sign(relA))
	if err := m.Verify(tr5); err == nil || !strings.Contains(err.Error(), "signed by key a43799df… which root v2 removed from releases") {
		t.Fatalf("a key removed by v2, checked at v4: %v", err)
	}
	// A key no root ever listed is not "removed".
	must(t, m.Sign(outsider))
	if err := m.Verify(tr); errors.Is(err, wire.ErrKeyRemoved) || !errors.Is(err, wire.ErrKeyNotTrusted) {
		t.Fatalf("a key never listed: %v", err)
	}
}

// The chain moves one version at a time, signed by a threshold of the old root keys and of the
// new: never back, never a skip, never a second content for a version it holds.
func TestTrustAdvanceOneVersionAtATime(t *testing.T) {
	v1 := makeRoot(1, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, ""})
	tr := trustAt(t, v1, rootA, rootB)
	// v2 hands the root role to new keys relB, relC, outsider (threshold 2).
	rotated := makeRoot(2, roleSpec{keys(relB, relC, outsider), 2, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, ""})
	other := releasesRoot(2, relB)
	for _, tc := range []struct {
		name string
		next wire.Root
		want string // "" accepted
	}{
		{"v2 by 2 of v1's 3 root keys", sign(t, releasesRoot(2, relB), rootA, rootC), ""},
		{"v2 by 1 of 3", sign(t, releasesRoot(2, relB), rootC), "1 did"},
		{"v2 by a root key and a key outside the root role", sign(t, releasesRoot(2, relB), rootC, relA), "1 did"},
		{"v2 with new root keys, by v1's threshold and its own", sign(t, rotated, rootA, rootB, relB, relC), ""},
		{"v2 with new root keys, by v1's threshold only", sign(t, rotated, rootA, rootB), "by its own root keys"},
		{"v2 with new root keys, by its own only", sign(t, rotated, relB, relC), "by root v1's root keys"},
		{"v3 skipping v2", sign(t, releasesRoot(3, relA), rootA, rootB), "takes v2 first"},
		{"v1 again, the one held", sign(t, v1, rootA, rootB, relA), ""},
		{"another v1", sign(t, releasesRoot(1, relB), rootA, rootB, relA), "holds another root v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := tr.Advance(tc.next)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if next.Version() != tc.next.Version {
					t.Fatalf("holds v%d, want v%d", next.Version(), tc.next.Version)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if next.Version() != tr.Version() {
				t.Fatalf("a refused root changed the trust to v%d", next.Version())
			}
		})
	}
	v2 := sign(t, other, rootA, rootB)
	tr2, err := tr.Advance(v2)
	must(t, err)
	if _, err := tr2.Advance(sign(t, v1, rootA, rootB, relA)); err == nil || !strings.Contains(err.Error(), "root v1 refused: this node holds root v2 and never goes back a version") {
		t.Fatalf("going back: %v", err)
	}
}

// A node with only host.json keys takes root v1 once, when a threshold of its root keys and a
// key the node already trusts signed it; from then on only the chain counts.
func TestMigrationFromTrustedKeysToRootV1(t *testing.T) {
	legacy := wire.LegacyTrust(pubs(relA), pubs(tgtA))
	v1 := makeRoot(1, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(relB), 1, ""}, roleSpec{keys(tgtB), 1, ""})
	for _, tc := range []struct {
		name string
		next wire.Root
		want string
	}{
		{"by its root keys and a trusted_keys key", sign(t, v1, rootA, rootB, relA), ""},
		{"by its root keys and a trusted_target_keys key", sign(t, v1, rootA, rootB, tgtA), ""},
		{"by its root keys only", sign(t, v1, rootA, rootB), "none of its signatures is by a key in this node's trusted_keys"},
		{"by a trusted key and too few root keys", sign(t, v1, rootA, relA), "1 did"},
		{"v2 first", sign(t, releasesRoot(2, relA), rootA, rootB, relA), "takes v1 first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := legacy.Advance(tc.next)
			if tc.want == "" {
				must(t, err)
				// The host.json keys no longer count: v1 moved releases to relB.
				m := testManifestDoc()
				must(t, m.Sign(relA))
				if err := m.Verify(tr); !errors.Is(err, wire.ErrKeyNotTrusted) {
					t.Fatalf("a host.json key after migration: %v", err)
				}
				must(t, m.Sign(relB))
				must(t, m.Verify(tr))
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if legacy.Version() != 0 {
		t.Fatal("legacy trust has a version")
	}
	if _, expired := legacy.ExpiredSince(envNow.AddDate(100, 0, 0)); expired {
		t.Fatal("host.json keys expired")
	}
}

// A node enrolled with a token pinning a root's fingerprint takes that root, signed by its own
// threshold, and nothing else.
func TestPinnedTrust(t *testing.T) {
	v3 := makeRoot(3, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, ""})
	good := sign(t, v3, rootA, rootC)
	tr, err := wire.PinnedTrust(good, good.Fingerprint())
	if err != nil || tr.Version() != 3 {
		t.Fatalf("pinned: %v v%d", err, tr.Version())
	}
	if !strings.HasPrefix(good.Fingerprint(), "sha256:") || len(good.Fingerprint()) != len("sha256:")+64 {
		t.Fatalf("fingerprint %q", good.Fingerprint())
	}
	if _, err := wire.PinnedTrust(good, releasesRoot(3, relA).Fingerprint()); err == nil || !strings.Contains(err.Error(), "not the sha256:") {
		t.Fatalf("another fingerprint: %v", err)
	}
	under := sign(t, v3, rootA)
	if _, err := wire.PinnedTrust(under, under.Fingerprint()); !errors.Is(err, wire.ErrBelowThreshold) {
		t.Fatalf("pinned root under its threshold: %v", err)
	}
	// The fingerprint is of the signed text: adding a signature does not change it.
	if sign(t, v3, rootA, rootB, rootC).Fingerprint() != good.Fingerprint() {
		t.Fatal("a signature changed the fingerprint")
	}
}

// What a node stored is verified again when loaded: a gap, a change, a root below threshold.
func TestTrustFromRootsVerifiesEveryLink(t *testing.T) {
	tr := chainTo(t, releasesRoot(2, relB), releasesRoot(3, relC))
	roots := tr.Roots()
	if again, err := wire.TrustFromRoots(roots); err != nil || again.Version() != 3 {
		t.Fatalf("stored chain: %v", err)
	}
	if _, err := wire.TrustFromRoots([]wire.Root{roots[0], roots[2]}); err == nil || !strings.Contains(err.Error(), "takes v2 first") {
		t.Fatalf("a gap: %v", err)
	}
	if _, err := wire.TrustFromRoots(nil); err == nil {
		t.Fatal("no roots")
	}
	first := roots[0]
	first.Signatures = first.Signatures[:1]
	if _, err := wire.TrustFromRoots([]wire.Root{first}); !errors.Is(err, wire.ErrBelowThreshold) {
		t.Fatalf("a first root below its threshold: %v", err)
	}
}

// max_ttl bounds how far ahead a targets-role document may expire, from the moment it is read;
// a manifest and host.json keys know no max_ttl.
func TestMaxTTLBoundsTargetsRoleExpiry(t *testing.T) {
	tr := chainTo(t) // targets max_ttl 720h
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		want error
	}{
		{"within", 719 * time.Hour, nil},
		{"at", 720 * time.Hour, nil},
		{"beyond", 721 * time.Hour, wire.ErrTooFarAhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := wire.NewTarget("fleet", "v1.4.0", 0, envNow, tc.ttl, tgtA)
			must(t, err)
			w, err := wire.Withdrawals{}.WithdrawFor("v1.2.0", "bad", envNow, tc.ttl, tgtA)
			must(t, err)
			spec, err := wire.ParseWindowSpec("daily 02:00-03:00 UTC")
			must(t, err)
			win, err := wire.NewWindow("window.fleet", nil, spec, 0, envNow, tc.ttl, tgtA)
			must(t, err)
			for what, err := range map[string]error{
				"target":      x.Verify("fleet", tr, envNow),
				"withdrawals": w.Verify(tr, envNow),
				"window":      win.Verify("window.fleet", tr, envNow),
			} {
				if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
					t.Errorf("%s: got %v, want %v", what, err, tc.want)
				}
			}
			if tc.want != nil {
				// The same document is fine later, and under host.json keys.
				if err := x.Verify("fleet", tr, envNow.Add(2*time.Hour)); err != nil {
					t.Errorf("read later: %v", err)
				}
				if err := x.Verify("fleet", wire.LegacyTrust(nil, pubs(tgtA)), envNow); err != nil {
					t.Errorf("host.json keys: %v", err)
				}
			}
		})
	}
	err := func() error {
		x, _ := wire.NewTarget("fleet", "v1.4.0", 0, envNow, 721*time.Hour, tgtA)
		return x.Verify("fleet", tr, envNow)
	}()
	if want := "more than root v1's max_ttl of 720h0m0s for targets from now"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("message: %v, want %q", err, want)
	}
}

// An expired root is said, never enforced on what verifies: the node keeps running and
// reconciling; a later root refreshes it.
func TestExpiredTrustIsSaidNotEnforced(t *testing.T) {
	tr := chainTo(t)
	r, _ := tr.Root()
	at := r.ExpiresAt()
	if _, expired := tr.ExpiredSince(at.Add(-time.Second)); expired {
		t.Fatal("expired before its expiry")
	}
	since, expired := tr.ExpiredSince(at.Add(21 * 24 * time.Hour))
	if !expired || !since.Equal(at) {
		t.Fatalf("three weeks later: %v %v", since, expired)
	}
	if got := wire.TrustExpiredLine(since); got != "trust expired since "+at.UTC().Format(time.RFC3339) {
		t.Fatalf("line %q", got)
	}
	m := testManifestDoc()
	must(t, m.Sign(relA))
	if err := m.Verify(tr); err != nil {
		t.Fatalf("a manifest under an expired root: %v", err)
	}
	// The laptop back after three weeks walks the chain (v2 signed long after v1 expired).
	v2 := releasesRoot(2, relA)
	v2.Expires = at.AddDate(1, 0, 0).Format(time.RFC3339)
	next, err := tr.Advance(sign(t, v2, rootA, rootB))
	must(t, err)
	if _, expired := next.ExpiredSince(at.Add(21 * 24 * time.Hour)); expired {
		t.Fatal("still expired after a fresh root")
	}
}
