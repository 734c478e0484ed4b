package trustroot

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	"github.com/novox/mesh-host/wire"
)

// Threshold is how far one set of root keys is in signing a root: Of names whose keys they are
// ("root v4" for the previous root, "its own"), Signed how many of them have, Need how many
// must.
type Threshold struct {
	Of     string   `json:"of"`
	Keys   []string `json:"keys"`
	Signed []string `json:"signed"`
	Need   int      `json:"threshold"`
}

// Met reports whether enough of the keys have signed.
func (t Threshold) Met() bool { return len(t.Signed) >= t.Need }

func (t Threshold) String() string {
	met := "met"
	if !t.Met() {
		met = fmt.Sprintf("not met: %d more", t.Need-len(t.Signed))
	}
	return fmt.Sprintf("%d of %d %s root keys signed (threshold %d, %s)", len(t.Signed), len(t.Keys), t.Of, t.Need, met)
}

// Status is which thresholds r's signatures meet: those of prev's root keys (when r is not
// version 1; prev nil when not known) and of r's own. A signature that does not verify counts
// for nothing. Legacy lists the signatures by r's own releases or targets keys: on version 1
// they are what a node holding only host.json keys accepts it by (the migration).
func Status(r wire.Root, prev *wire.Root) (ts []Threshold, legacy []string) {
	env := r.Envelope()
	if prev != nil {
		ts = append(ts, signedBy(*prev, env, fmt.Sprintf("root v%d's", prev.Version)))
	}
	ts = append(ts, signedBy(r, env, "its own"))
	for _, sg := range r.Signatures {
		if (r.HasKey(wire.RoleReleases, sg.KeyID) || r.HasKey(wire.RoleTargets, sg.KeyID)) && verifies(r.PublicKey(sg.KeyID), env.Text, sg) {
			legacy = append(legacy, sg.KeyID)
		}
	}
	return ts, legacy
}

func signedBy(of wire.Root, env wire.Envelope, name string) Threshold {
	rk := of.Roles[wire.RoleRoot]
	t := Threshold{Of: name, Keys: slices.Clone(rk.Keys), Need: rk.Threshold, Signed: []string{}}
	for _, sg := range env.Signatures {
		if of.HasKey(wire.RoleRoot, sg.KeyID) && verifies(of.PublicKey(sg.KeyID), env.Text, sg) {
			t.Signed = append(t.Signed, sg.KeyID)
		}
	}
	return t
}

// verifies checks one signature (wire keeps its own check unexported).
func verifies(pub ed25519.PublicKey, text []byte, sg wire.Signature) bool {
	if pub == nil {
		return false
	}
	sig, err := base64.StdEncoding.DecodeString(sg.Signature)
	return err == nil && len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, text, sig)
}

// CanSign says whether key may sign r: a root key of r, or of prev (the root r follows), or, on
// version 1, one of its releases or targets keys (the signature nodes migrating from host.json
// keys accept it by). The error names the roles it checked.
func CanSign(r wire.Root, prev *wire.Root, id string) error {
	if r.HasKey(wire.RoleRoot, id) || prev != nil && prev.HasKey(wire.RoleRoot, id) {
		return nil
	}
	if r.Version == 1 && (r.HasKey(wire.RoleReleases, id) || r.HasKey(wire.RoleTargets, id)) {
		return nil
	}
	where := fmt.Sprintf("root v%d's root keys", r.Version)
	if prev != nil {
		where = fmt.Sprintf("root v%d's or root v%d's root keys", prev.Version, r.Version)
	}
	if r.Version == 1 {
		where += " or its releases and targets keys"
	}
	return fmt.Errorf("key %s is not among %s: its signature would count for nothing", id, where)
}

// Summary is the one line Status says: "root v5: 2 of 3 root v4's root keys signed (threshold 2,
// met); 1 of 3 its own root keys signed (threshold 2, not met: 1 more)".
func Summary(r wire.Root, prev *wire.Root) string {
	ts, legacy := Status(r, prev)
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	s := fmt.Sprintf("root v%d: %s", r.Version, strings.Join(parts, "; "))
	if r.Version == 1 {
		if len(legacy) > 0 {
			s += fmt.Sprintf("; signed by its releases/targets key %s, so nodes holding only host.json keys take it", strings.Join(legacy, ", "))
		} else {
			s += "; no signature by a releases or targets key: nodes holding only host.json keys (trusted_keys) will not take it (sign it with the current release key)"
		}
	}
	if prev == nil && r.Version > 1 {
		s += fmt.Sprintf("; root v%d not given, so its root keys were not counted", r.Version-1)
	}
	return s
}

// Complete reports whether every threshold Status names is met, and the prev one is known.
func Complete(r wire.Root, prev *wire.Root) bool {
	if r.Version > 1 && prev == nil {
		return false
	}
	ts, _ := Status(r, prev)
	for _, t := range ts {
		if !t.Met() {
			return false
		}
	}
	return true
}
