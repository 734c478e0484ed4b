package wire_test

import (
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
)

// `mesh-release trust sign FILE --key K`: one signature added to a file of any kind, by kind or
// recognised; the result verifies with the threshold it reaches.
func TestAddSignatureToEachKind(t *testing.T) {
	tr := trustAt(t, makeRoot(1, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(relA, relB), 2, ""}, roleSpec{keys(tgtA, tgtB), 2, ""}), rootA, rootB)
	m := testManifestDoc()
	must(t, m.Sign(relA))
	x := testTargetDoc()
	must(t, x.Sign("node.web-01", tgtA))
	w := testWindowDoc()
	must(t, w.Sign("window.node.web-01", tgtA))
	l := testWithdrawalsDoc()
	must(t, l.Sign(tgtA))
	v2 := sign(t, makeRoot(2, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(relB), 1, ""}, roleSpec{keys(tgtB), 1, ""}), rootA)
	for _, tc := range []struct {
		kind, name string
		b          []byte
		key        []byte
		verify     func([]byte) error
	}{
		{wire.KindManifest, "", m.Marshal(), relB, func(b []byte) error {
			m, err := wire.ParseManifest(b)
			if err != nil {
				return err
			}
			return m.Verify(tr)
		}},
		{wire.KindTarget, "node.web-01", x.Marshal(), tgtB, func(b []byte) error {
			x, err := wire.ParseTarget(b)
			if err != nil {
				return err
			}
			return x.Verify("node.web-01", tr, envNow)
		}},
		{wire.KindWindow, "window.node.web-01", w.Marshal(), tgtB, func(b []byte) error {
			w, err := wire.ParseWindow(b)
			if err != nil {
				return err
			}
			return w.Verify("window.node.web-01", tr, envNow)
		}},
		{wire.KindWithdrawals, "", l.Marshal(), tgtB, func(b []byte) error {
			l, err := wire.ParseWithdrawals(b)
			if err != nil {
				return err
			}
			return l.Verify(tr, envNow)
		}},
		{wire.KindRoot, "", v2.Marshal(), rootC, func(b []byte) error {
			r, err := wire.ParseRoot(b)
			if err != nil {
				return err
			}
			_, err = tr.Advance(r)
			return err
		}},
	} {
		for _, given := range []string{tc.kind, ""} {
			t.Run(tc.kind+" given as "+given, func(t *testing.T) {
				if err := tc.verify(tc.b); err == nil {
					t.Fatal("one signature already reaches the threshold: the test means nothing")
				}
				out, err := wire.AddSignature(given, tc.name, tc.b, tc.key)
				must(t, err)
				if err := tc.verify(out); err != nil {
					t.Fatalf("with the second signature: %v", err)
				}
				if _, err := wire.AddSignature(given, tc.name, out, tc.key); err == nil || !strings.Contains(err.Error(), "signed it already") {
					t.Fatalf("the same key again: %v", err)
				}
			})
		}
	}
}

// What AddSignature refuses, named.
func TestAddSignatureRefuses(t *testing.T) {
	x := testTargetDoc()
	must(t, x.Sign("fleet", tgtA))
	r := sign(t, makeRoot(2, roleSpec{keys(rootA, rootB), 2, ""}, roleSpec{keys(relB), 1, ""}, roleSpec{keys(tgtB), 1, ""}), rootA)
	r.Expires = "2099-01-01T00:00:00Z" // changed after rootA signed
	bad := testManifestDoc()
	bad.Size = 0
	for _, tc := range []struct {
		name, kind, key string
		b               []byte
		want            string
	}{
		{"an unknown kind", "rollout", "", x.Marshal(), `"rollout" is not a kind of document this signs (root, manifest, target, window, withdrawals)`},
		{"a target without its key", wire.KindTarget, "", x.Marshal(), "a target is signed for the KV key it is stored under"},
		{"a file of no kind", "", "", []byte(`{"colour":"red"}`), "not a kind of signed document this recognises"},
		{"not JSON", "", "", []byte("hello"), "not a JSON object"},
		{"an invalid manifest", wire.KindManifest, "", bad.Marshal(), "manifest size"},
		{"a root changed after a signature", wire.KindRoot, "", r.Marshal(), "the file was changed after that key signed it"},
		{"a target given as a window", wire.KindWindow, "fleet", x.Marshal(), "window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.AddSignature(tc.kind, tc.key, tc.b, rootB)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
