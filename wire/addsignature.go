package wire

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"

	txt "github.com/novox/mesh-host/internal/text"
)

// signableKinds are the kinds AddSignature signs, in the order a message lists them.
var signableKinds = []string{KindRoot, KindManifest, KindTarget, KindWindow, KindWithdrawals}

// AddSignature adds priv's signature to b, a signed document of kind (KindRoot, KindManifest,
// KindTarget, KindWindow or KindWithdrawals; "" recognises it by its fields) and returns the
// document with it, as its kind is written (a root or a manifest indented, the others as the
// bus holds them). A target and a window are signed for the KV key they are stored under, name;
// the others ignore it. b is parsed first, so a file that is not a valid document is refused
// before anyone signs it; a root's signatures by its own keys are checked too (a corrupt file
// is caught at the first signer, not the last). A key that signed already is refused. It is
// what `mesh-release trust sign FILE --key K` does: one signature per person and machine.
func AddSignature(kind, name string, b []byte, priv ed25519.PrivateKey) ([]byte, error) {
	if kind == "" {
		k, err := recogniseKind(b)
		if err != nil {
			return nil, err
		}
		kind = k
	}
	if (kind == KindTarget || kind == KindWindow) && name == "" {
		return nil, fmt.Errorf("a %s is signed for the KV key it is stored under; name it (node.web-01, fleet, window.fleet, ...)", kind)
	}
	switch kind {
	case KindRoot:
		return addRootSignature(b, priv)
	case KindManifest:
		m, err := ParseManifest(b)
		if err != nil {
			return nil, err
		}
		if err := m.AddSignature(priv); err != nil {
			return nil, err
		}
		return m.Marshal(), nil
	case KindTarget:
		t, err := ParseTarget(b)
		if err != nil {
			return nil, err
		}
		if err := t.AddSignature(name, priv); err != nil {
			return nil, err
		}
		return t.Marshal(), nil
	case KindWindow:
		w, err := ParseWindow(b)
		if err != nil {
			return nil, err
		}
		if err := w.AddSignature(name, priv); err != nil {
			return nil, err
		}
		return w.Marshal(), nil
	case KindWithdrawals:
		w, err := ParseWithdrawals(b)
		if err != nil {
			return nil, err
		}
		if err := w.AddSignature(priv); err != nil {
			return nil, err
		}
		return w.Marshal(), nil
	}
	return nil, fmt.Errorf("%q is not a kind of document this signs (%s)", txt.Bound(kind), strings.Join(signableKinds, ", "))
}

// addRootSignature checks root b (its form, and each signature by one of its own keys) and adds
// priv's signature.
func addRootSignature(b []byte, priv ed25519.PrivateKey) ([]byte, error) {
	r, err := ParseRoot(b)
	if err != nil {
		return nil, err
	}
	text := r.SigningText()
	for _, sg := range r.Signatures {
		if pub := r.PublicKey(sg.KeyID); pub != nil && !verifyOne(pub, text, sg) {
			return nil, fmt.Errorf("root v%d: %w (key %s): the file was changed after that key signed it", r.Version, ErrSignatureInvalid, ShortKeyID(sg.KeyID))
		}
	}
	if err := r.Sign(priv); err != nil {
		return nil, err
	}
	return r.Marshal(), nil
}

// recogniseKind names the kind of signed document b is by the field only that kind has: roles
// (a root), object or platforms (a manifest), withdrawn (the withdrawal list), days (a window),
// version (a target).
func recogniseKind(b []byte) (string, error) {
	if len(b) > MaxSignedBytes(KindWithdrawals) {
		return "", fmt.Errorf("%d bytes: larger than any signed document", len(b))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return "", fmt.Errorf("not a signed document (root, manifest, target, window, withdrawals): not a JSON object: %w", err)
	}
	has := func(k string) bool { _, ok := fields[k]; return ok }
	switch {
	case has("roles"):
		return KindRoot, nil
	case has("object"), has("platforms"):
		return KindManifest, nil
	case has("withdrawn"):
		return KindWithdrawals, nil
	case has("days"):
		return KindWindow, nil
	case has("version") && has("expires"):
		return KindTarget, nil
	}
	return "", fmt.Errorf("not a kind of signed document this recognises: no field says root (roles), manifest (object, platforms), withdrawals (withdrawn), window (days) or target (version, expires)")
}
