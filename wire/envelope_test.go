package wire_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
)

// seedKey is a key fixed by its name, so a message naming its short id can be written out.
func seedKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("wire envelope test key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

var (
	rootA, rootB, rootC = seedKey("root a"), seedKey("root b"), seedKey("root c")
	relA, relB, relC    = seedKey("releases a"), seedKey("releases b"), seedKey("releases c")
	tgtA, tgtB          = seedKey("targets a"), seedKey("targets b")
	outsider            = seedKey("outsider")
	envNow              = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
)

// roleSpec is a role's keys and threshold in a test root.
type roleSpec struct {
	keys      []ed25519.PrivateKey
	threshold int
	maxTTL    string
}

// makeRoot is root version v with the roles given, expiring a year after envNow, unsigned.
func makeRoot(v uint64, root, releases, targets roleSpec) wire.Root {
	r := wire.Root{Schema: wire.RootSchema, Version: v, Expires: envNow.AddDate(1, 0, 0).Format(time.RFC3339),
		Keys: map[string]string{}, Roles: map[wire.Role]wire.RoleKeys{}}
	for role, spec := range map[wire.Role]roleSpec{wire.RoleRoot: root, wire.RoleReleases: releases, wire.RoleTargets: targets} {
		var ids []string
		for _, k := range spec.keys {
			id := wire.KeyID(pubOf(k))
			r.Keys[id] = base64.StdEncoding.EncodeToString(pubOf(k))
			ids = append(ids, id)
		}
		slices.Sort(ids)
		r.Roles[role] = wire.RoleKeys{Keys: ids, Threshold: spec.threshold, MaxTTL: spec.maxTTL}
	}
	return r
}

func keys(k ...ed25519.PrivateKey) []ed25519.PrivateKey { return k }

func pubs(k ...ed25519.PrivateKey) []ed25519.PublicKey {
	var out []ed25519.PublicKey
	for _, x := range k {
		out = append(out, pubOf(x))
	}
	return out
}

// trustAt is the trust of a node that migrated from host.json keys (relA, tgtA) to r, signed by
// r's root keys and relA.
func trustAt(t *testing.T, r wire.Root, rootSigners ...ed25519.PrivateKey) wire.Trust {
	t.Helper()
	legacy := wire.LegacyTrust(pubs(relA), pubs(tgtA))
	tr, err := legacy.Advance(sign(t, r, append(rootSigners, relA)...))
	if err != nil {
		t.Fatalf("migrate to root v%d: %v", r.Version, err)
	}
	return tr
}

// oneKeyRoot is root v1 with one key per role: rootA, relA, tgtA.
func oneKeyRoot() wire.Root {
	return makeRoot(1, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, "8760h0m0s"})
}

func testManifestDoc() wire.Manifest {
	return wire.Manifest{Schema: wire.ManifestSchema, Version: "v1.4.0", OS: "linux", Arch: "amd64",
		Object: wire.ObjectName("v1.4.0", "linux", "amd64"), Size: 7340032,
		Digest: digest.FromString("the archive"), BinaryDigest: digest.FromString("the binary"), Created: "2026-10-01T12:00:00Z"}
}

func testTargetDoc() wire.Target {
	return wire.Target{Version: "v1.4.0", Seq: 10, Expires: envNow.Add(96 * time.Hour).Format(time.RFC3339)}
}

func testWindowDoc() wire.Window {
	return wire.Window{Nodes: []string{"web-01", "web-02"}, Days: []string{"mon", "tue"}, Start: "02:00", Duration: "2h0m0s",
		Zone: "Europe/Brussels", Seq: 10, Expires: envNow.Add(96 * time.Hour).Format(time.RFC3339)}
}

func testWithdrawalsDoc() wire.Withdrawals {
	return wire.Withdrawals{Seq: 10, Withdrawn: []wire.Withdrawn{
		{Version: "v1.2.0", Reason: "crashes", At: "2026-11-29T10:42:00Z"},
		{Version: "v1.3.0", Reason: "leaks", At: "2026-11-30T10:42:00Z"},
	}, Expires: envNow.Add(96 * time.Hour).Format(time.RFC3339)}
}

// A field changed after signing — any field of any document — is refused as a signature that
// does not verify, both by host.json's keys and by a root, matching both the document's own
// sentinel and ErrSignatureInvalid; so is a target or window moved to another key.
func TestEveryDocumentAlteredAfterSigningIsRefused(t *testing.T) {
	type tamper struct {
		doc, field string
		verify     func(wire.Trust) error
		bad        error
	}
	var cases []tamper
	manifest := func(field string, edit func(*wire.Manifest)) {
		m := testManifestDoc()
		must(t, m.Sign(relA))
		edit(&m)
		cases = append(cases, tamper{"manifest", field, func(tr wire.Trust) error { return m.Verify(tr) }, wire.ErrBadSignature})
	}
	manifest("version", func(m *wire.Manifest) { m.Version, m.Object = "v1.4.1", wire.ObjectName("v1.4.1", "linux", "amd64") })
	manifest("os", func(m *wire.Manifest) { m.OS, m.Object = "freebsd", wire.ObjectName("v1.4.0", "freebsd", "amd64") })
	manifest("arch", func(m *wire.Manifest) { m.Arch, m.Object = "arm64", wire.ObjectName("v1.4.0", "linux", "arm64") })
	manifest("size", func(m *wire.Manifest) { m.Size++ })
	manifest("digest", func(m *wire.Manifest) { m.Digest = digest.FromString("another archive") })
	manifest("binary_digest", func(m *wire.Manifest) { m.BinaryDigest = digest.FromString("another binary") })
	manifest("created", func(m *wire.Manifest) { m.Created = "2026-10-02T12:00:00Z" })

	target := func(field, key string, edit func(*wire.Target)) {
		x := testTargetDoc()
		must(t, x.Sign("node.web-01", tgtA))
		edit(&x)
		cases = append(cases, tamper{"target", field, func(tr wire.Trust) error { return x.Verify(key, tr, envNow) }, wire.ErrTargetBadSignature})
	}
	target("version", "node.web-01", func(x *wire.Target) { x.Version = "v9.9.9" })
	target("seq", "node.web-01", func(x *wire.Target) { x.Seq++ })
	target("expires", "node.web-01", func(x *wire.Target) { x.Expires = envNow.Add(97 * time.Hour).Format(time.RFC3339) })
	target("urgent", "node.web-01", func(x *wire.Target) { x.Urgent = true })
	target("key (moved to the fleet key)", "fleet", func(*wire.Target) {})

	window := func(field, key string, edit func(*wire.Window)) {
		x := testWindowDoc()
		must(t, x.Sign("window.node.web-01", tgtA))
		edit(&x)
		cases = append(cases, tamper{"window", field, func(tr wire.Trust) error { return x.Verify(key, tr, envNow) }, wire.ErrWindowBadSignature})
	}
	window("nodes", "window.node.web-01", func(x *wire.Window) { x.Nodes = []string{"web-01"} })
	window("days", "window.node.web-01", func(x *wire.Window) { x.Days = []string{"mon", "wed"} })
	window("start", "window.node.web-01", func(x *wire.Window) { x.Start = "03:00" })
	window("duration", "window.node.web-01", func(x *wire.Window) { x.Duration = "3h0m0s" })
	window("zone", "window.node.web-01", func(x *wire.Window) { x.Zone = "UTC" })
	window("seq", "window.node.web-01", func(x *wire.Window) { x.Seq++ })
	window("expires", "window.node.web-01", func(x *wire.Window) { x.Expires = envNow.Add(97 * time.Hour).Format(time.RFC3339) })
	window("key (moved to another node)", "window.node.web-02", func(*wire.Window) {})

	withdrawals := func(field string, edit func(*wire.Withdrawals)) {
		x := testWithdrawalsDoc()
		must(t, x.Sign(tgtA))
		edit(&x)
		cases = append(cases, tamper{"withdrawals", field, func(tr wire.Trust) error { return x.Verify(tr, envNow) }, wire.ErrWithdrawalsBadSignature})
	}
	withdrawals("seq", func(x *wire.Withdrawals) { x.Seq++ })
	withdrawals("withdrawn dropped", func(x *wire.Withdrawals) { x.Withdrawn = x.Withdrawn[:1] })
	withdrawals("withdrawn reordered", func(x *wire.Withdrawals) { x.Withdrawn[0], x.Withdrawn[1] = x.Withdrawn[1], x.Withdrawn[0] })
	withdrawals("withdrawn version", func(x *wire.Withdrawals) { x.Withdrawn[0].Version = "v1.2.1" })
	withdrawals("withdrawn reason", func(x *wire.Withdrawals) { x.Withdrawn[0].Reason = "fine after all" })
	withdrawals("withdrawn at", func(x *wire.Withdrawals) { x.Withdrawn[0].At = "2026-11-29T10:43:00Z" })
	withdrawals("expires moved", func(x *wire.Withdrawals) { x.Expires = envNow.Add(97 * time.Hour).Format(time.RFC3339) })
	withdrawals("expires removed", func(x *wire.Withdrawals) { x.Expires = "" })

	trusts := map[string]wire.Trust{
		"host.json keys": wire.LegacyTrust(pubs(relA), pubs(tgtA)),
		"root v1":        trustAt(t, oneKeyRoot(), rootA),
	}
	for _, c := range cases {
		for name, tr := range trusts {
			t.Run(c.doc+" "+c.field+" by "+name, func(t *testing.T) {
				err := c.verify(tr)
				if !errors.Is(err, wire.ErrSignatureInvalid) || !errors.Is(err, c.bad) {
					t.Fatalf("got %v, want %v and %v", err, wire.ErrSignatureInvalid, c.bad)
				}
			})
		}
	}
}

// A root changed after its signers signed it is refused as the next link, and as a root read
// back from disk.
func TestARootAlteredAfterSigningIsRefused(t *testing.T) {
	tr := trustAt(t, oneKeyRoot(), rootA)
	for _, tc := range []struct {
		field string
		edit  func(*wire.Root)
	}{
		{"expires", func(r *wire.Root) { r.Expires = envNow.AddDate(5, 0, 0).Format(time.RFC3339) }},
		{"a releases key replaced", func(r *wire.Root) {
			delete(r.Keys, wire.KeyID(pubOf(relA)))
			delete(r.Keys, wire.KeyID(pubOf(relB)))
			r.Keys[wire.KeyID(pubOf(outsider))] = base64.StdEncoding.EncodeToString(pubOf(outsider))
			r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: []string{wire.KeyID(pubOf(outsider))}, Threshold: 1}
		}},
		{"a key added to targets", func(r *wire.Root) {
			ids := []string{wire.KeyID(pubOf(tgtA)), wire.KeyID(pubOf(outsider))}
			slices.Sort(ids)
			r.Keys[wire.KeyID(pubOf(outsider))] = base64.StdEncoding.EncodeToString(pubOf(outsider))
			r.Roles[wire.RoleTargets] = wire.RoleKeys{Keys: ids, Threshold: 1, MaxTTL: "8760h0m0s"}
		}},
		{"a threshold", func(r *wire.Root) {
			rk := r.Roles[wire.RoleReleases]
			rk.Threshold = 2
			r.Roles[wire.RoleReleases] = rk
		}},
		{"max_ttl", func(r *wire.Root) {
			rk := r.Roles[wire.RoleTargets]
			rk.MaxTTL = "87600h0m0s"
			r.Roles[wire.RoleTargets] = rk
		}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			v2 := makeRoot(2, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA, relB), 1, ""}, roleSpec{keys(tgtA), 1, "8760h0m0s"})
			v2 = sign(t, v2, rootA)
			tc.edit(&v2)
			if err := v2.Validate(); err != nil {
				t.Fatalf("the altered root must be valid for the test to mean anything: %v", err)
			}
			if _, err := tr.Advance(v2); !errors.Is(err, wire.ErrSignatureInvalid) {
				t.Fatalf("advance to an altered root: %v", err)
			}
			if _, err := wire.TrustFromRoots(append(slices.Clone(tr.Roots()), v2)); !errors.Is(err, wire.ErrSignatureInvalid) {
				t.Fatalf("an altered root on disk: %v", err)
			}
		})
	}
}

// A threshold of the role's keys must sign: fewer is refused by count, a key outside the role
// counts for nothing, a key cannot count twice; each form of refusal still matches the
// document's older sentinel.
func TestThresholdOfTwoOfThreeReleaseKeys(t *testing.T) {
	tr := thresholdTrust(t)
	for _, tc := range []struct {
		name    string
		signers []ed25519.PrivateKey
		want    []error
	}{
		{"one of three", keys(relA), []error{wire.ErrBelowThreshold, wire.ErrUnknownKey}},
		{"two of three", keys(relA, relC), nil},
		{"three of three", keys(relC, relB, relA), nil},
		{"one and a key outside the role", keys(relB, outsider), []error{wire.ErrBelowThreshold, wire.ErrUnknownKey}},
		{"a targets key is not a releases key", keys(relB, tgtA), []error{wire.ErrBelowThreshold}},
		{"only keys outside the role", keys(outsider), []error{wire.ErrKeyNotTrusted, wire.ErrUnknownKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testManifestDoc()
			must(t, m.Sign(tc.signers[0]))
			for _, k := range tc.signers[1:] {
				must(t, m.AddSignature(k))
			}
			back, err := wire.ParseManifest(m.Marshal())
			must(t, err)
			err = back.Verify(tr)
			if tc.want == nil && err != nil {
				t.Fatalf("verify: %v", err)
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Fatalf("got %v, want %v", err, want)
				}
			}
		})
	}
}

// thresholdTrust is root v1 with releases relA, relB, relC and targets tgtA, tgtB, each
// threshold 2.
func thresholdTrust(t *testing.T) wire.Trust {
	r := makeRoot(1, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA, relB, relC), 2, ""}, roleSpec{keys(tgtA, tgtB), 2, ""})
	return trustAt(t, r, rootA)
}

// A key counts once toward a threshold: adding it again, a list naming it twice, an envelope
// naming it twice are refused.
func TestAKeySigningTwiceIsRefused(t *testing.T) {
	tr := thresholdTrust(t)
	m := testManifestDoc()
	must(t, m.Sign(relA))
	if err := m.AddSignature(relA); err == nil || !strings.Contains(err.Error(), "signed it already") {
		t.Fatalf("adding the same key again: %v", err)
	}
	sg, _ := wire.SignText(m.SigningText(), relA)
	m.SignatureList = wire.SignatureList{Signatures: []wire.Signature{sg, sg}}
	if _, err := wire.ParseManifest(m.Marshal()); err == nil || !strings.Contains(err.Error(), "signed twice") {
		t.Fatalf("parse a manifest signed twice by one key: %v", err)
	}
	if err := tr.Verify(m.Envelope(), envNow); err == nil || !strings.Contains(err.Error(), "signed twice") {
		t.Fatalf("verify an envelope signed twice by one key: %v", err)
	}
}

// A target, a window and the withdrawal list signed by two targets keys are written as
// signatures and verify with a threshold of 2.
func TestOnlineDocumentsSignedByTwoKeys(t *testing.T) {
	tr := thresholdTrust(t)
	x := testTargetDoc()
	must(t, x.Sign("fleet", tgtA))
	if err := x.Verify("fleet", tr, envNow); !errors.Is(err, wire.ErrBelowThreshold) || !errors.Is(err, wire.ErrTargetUnknownKey) {
		t.Fatalf("target signed by one: %v", err)
	}
	must(t, x.AddSignature("fleet", tgtB))
	w := testWindowDoc()
	must(t, w.Sign("window.fleet", tgtB))
	must(t, w.AddSignature("window.fleet", tgtA))
	l := testWithdrawalsDoc()
	must(t, l.Sign(tgtA))
	must(t, l.AddSignature(tgtB))
	for _, c := range []struct {
		name   string
		b      []byte
		verify func([]byte) error
	}{
		{"target", x.Marshal(), func(b []byte) error {
			x, err := wire.ParseTarget(b)
			if err != nil {
				return err
			}
			return x.Verify("fleet", tr, envNow)
		}},
		{"window", w.Marshal(), func(b []byte) error {
			x, err := wire.ParseWindow(b)
			if err != nil {
				return err
			}
			return x.Verify("window.fleet", tr, envNow)
		}},
		{"withdrawals", l.Marshal(), func(b []byte) error {
			x, err := wire.ParseWithdrawals(b)
			if err != nil {
				return err
			}
			return x.Verify(tr, envNow)
		}},
	} {
		if err := c.verify(c.b); err != nil {
			t.Errorf("%s signed by two: %v", c.name, err)
		}
		var top map[string]json.RawMessage
		must(t, json.Unmarshal(c.b, &top))
		_, single := top["key_id"]
		if _, list := top["signatures"]; single || !list {
			t.Errorf("%s signed by two is not written as signatures: %s", c.name, c.b)
		}
	}
}

// One signature is written as key_id and signature, more as signatures, never both; a list
// holding one, both forms, or more than MaxSignatures are refused.
func TestSignatureListForms(t *testing.T) {
	text := []byte("some text\n")
	var one wire.SignatureList
	must(t, one.Add(text, relA))
	b, _ := json.Marshal(one)
	if want := fmt.Sprintf(`{"key_id":"%s","signature":"%s"}`, one.KeyID, one.Signature); string(b) != want {
		t.Fatalf("one signature: %s, want %s", b, want)
	}
	two := one
	must(t, two.Add(text, relB))
	b, _ = json.Marshal(two)
	if !strings.HasPrefix(string(b), `{"signatures":[{"key_id":"`+one.KeyID) || len(two.List()) != 2 {
		t.Fatalf("two signatures: %s", b)
	}
	if two.Joined() != one.Signature+","+two.Signatures[1].Signature || one.Joined() != one.Signature {
		t.Fatalf("joined: %q %q", one.Joined(), two.Joined())
	}
	many := wire.SignatureList{}
	for i := range wire.MaxSignatures + 1 {
		must(t, many.Add(text, seedKey(fmt.Sprint("many ", i))))
	}
	for _, tc := range []struct {
		name string
		l    wire.SignatureList
		want string
	}{
		{"both forms", wire.SignatureList{KeyID: one.KeyID, Signature: one.Signature, Signatures: two.Signatures}, "both set"},
		{"a list of one", wire.SignatureList{Signatures: two.Signatures[:1]}, "one is written as key_id and signature"},
		{"a malformed key id", wire.SignatureList{KeyID: "82912897"}, "key_id \"82912897\" is not 16 hex digits"},
		{"a malformed key id in a list", wire.SignatureList{Signatures: []wire.Signature{two.Signatures[0], {KeyID: "x"}}}, "signatures[1].key_id"},
		{"too many", many, fmt.Sprintf("more than the %d allowed", wire.MaxSignatures)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.Check("target"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// Each kind has one size cap, applied before parsing: a byte over it is refused by size, a
// document at it is not.
func TestSizeCapPerKind(t *testing.T) {
	for _, tc := range []struct {
		kind  string
		limit int
		parse func([]byte) error
	}{
		{wire.KindManifest, 64 << 10, func(b []byte) error { _, err := wire.ParseManifest(b); return err }},
		{wire.KindTarget, 1 << 10, func(b []byte) error { _, err := wire.ParseTarget(b); return err }},
		{wire.KindWindow, 8 << 10, func(b []byte) error { _, err := wire.ParseWindow(b); return err }},
		{wire.KindWithdrawals, 256 << 10, func(b []byte) error { _, err := wire.ParseWithdrawals(b); return err }},
		{wire.KindRoot, 64 << 10, func(b []byte) error { _, err := wire.ParseRoot(b); return err }},
		{wire.KindBus, 64 << 10, nil},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			if got := wire.MaxSignedBytes(tc.kind); got != tc.limit {
				t.Fatalf("MaxSignedBytes(%s) = %d, want %d", tc.kind, got, tc.limit)
			}
			over := append([]byte("{}"), bytes.Repeat([]byte(" "), tc.limit-1)...)
			at := over[:tc.limit]
			sizeErr := fmt.Sprintf("%s: %d bytes, more than the %d allowed", tc.kind, tc.limit+1, tc.limit)
			var v map[string]any
			if err := wire.DecodeSigned(tc.kind, over, &v); err == nil || err.Error() != sizeErr {
				t.Fatalf("DecodeSigned over the cap: %v, want %q", err, sizeErr)
			}
			if err := wire.DecodeSigned(tc.kind, at, &v); err != nil {
				t.Fatalf("DecodeSigned at the cap: %v", err)
			}
			if tc.parse == nil {
				return
			}
			if err := tc.parse(over); err == nil || err.Error() != sizeErr {
				t.Fatalf("parse over the cap: %v, want %q", err, sizeErr)
			}
			if err := tc.parse(at); err == nil || strings.Contains(err.Error(), "allowed") {
				t.Fatalf("parse at the cap must fail on its fields, not its size: %v", err)
			}
		})
	}
	var v any
	if err := wire.DecodeSigned("rollout", []byte("{}"), &v); err == nil || !strings.Contains(err.Error(), `rollout: not a kind of signed document`) {
		t.Fatalf("unknown kind: %v", err)
	}
}

// The envelope's expiry rule: a manifest never expires; the others from their expires on; a
// withdrawal list only when it carries one.
func TestEnvelopeExpiry(t *testing.T) {
	unexpiring := testWithdrawalsDoc()
	unexpiring.Expires = ""
	at := envNow.Add(96 * time.Hour)
	for _, tc := range []struct {
		name    string
		env     wire.Envelope
		role    wire.Role
		expires time.Time
	}{
		{"manifest", testManifestDoc().Envelope(), wire.RoleReleases, time.Time{}},
		{"target", testTargetDoc().Envelope("fleet"), wire.RoleTargets, at},
		{"window", testWindowDoc().Envelope("window.fleet"), wire.RoleTargets, at},
		{"withdrawals", testWithdrawalsDoc().Envelope(), wire.RoleTargets, at},
		{"withdrawals without expires", unexpiring.Envelope(), wire.RoleTargets, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env.Role != tc.role || !tc.env.Expires.Equal(tc.expires) {
				t.Fatalf("role %s expires %s, want %s %s", tc.env.Role, tc.env.Expires, tc.role, tc.expires)
			}
			far := envNow.AddDate(100, 0, 0)
			if tc.expires.IsZero() {
				if tc.env.ExpiredAt(far) {
					t.Fatal("expired, but it has no expiry")
				}
				return
			}
			if tc.env.ExpiredAt(at.Add(-time.Second)) || !tc.env.ExpiredAt(at) {
				t.Fatal("not expired from its expiry on")
			}
		})
	}
}
