package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
)

// RootSchema is the root format this package writes and reads.
const RootSchema = 1

// RootSigningHeader is the first line of the text a root's signatures cover.
const RootSigningHeader = "mesh-host root 1\n"

// Limits of a root.
const (
	MaxRootKeys = 32
	// MaxRootVersion keeps a version JSON-safe, as MaxSeq does a sequence number.
	MaxRootVersion = MaxSeq
)

// Root is the node's root of trust (decision 0045): which keys may sign what, numbered. It is
// stored on the bus under the releases bucket's key RootKey(Version), every version kept, and
// on a node under ROOT/trust. Version N+1 is accepted only when signed by a threshold of N's
// root keys and of its own (Trust.Advance). Its signatures cover SigningText:
//
//	mesh-host root 1
//	version=4
//	expires=2027-12-02T00:00:00Z
//	key=8291289712345678 <standard base64 of the ed25519 public key>
//	role=root threshold=2 keys=<key id>,<key id>,<key id> max_ttl=
//	role=releases threshold=1 keys=<key id> max_ttl=
//	role=targets threshold=1 keys=<key id> max_ttl=720h0m0s
//
// key= lines sorted by key id, role= lines in the order root, releases, targets, each role's
// keys sorted; each line ending in "\n".
type Root struct {
	Schema  int    `json:"schema"`
	Version uint64 `json:"version"`
	// Expires is when this root stops being fresh: a node whose newest root is past it keeps
	// running what it has and takes no new target (Trust.ExpiredSince). A root past its expiry
	// still counts as a link of the chain.
	Expires string `json:"expires"`
	// Keys maps each key id (KeyID) to the standard base64 of its ed25519 public key.
	Keys       map[string]string `json:"keys"`
	Roles      map[Role]RoleKeys `json:"roles"`
	Signatures []Signature       `json:"signatures"`
}

// RoleKeys is a role's keys (ids in Root.Keys, sorted) and its threshold: how many of them must
// sign. MaxTTL, for the targets role, is the longest a document it signs may claim to last from
// the moment a node reads it: an online key cannot sign a target that outlives a freeze.
type RoleKeys struct {
	Keys      []string `json:"keys"`
	Threshold int      `json:"threshold"`
	MaxTTL    string   `json:"max_ttl,omitempty"`
}

// RootKey is the releases bucket's key holding root version n: root.4.
func RootKey(n uint64) string { return "root." + strconv.FormatUint(n, 10) }

// ParseRoot decodes a root strictly (DecodeSigned) and validates it. It does not check the
// signatures: that is Trust.Advance.
func ParseRoot(b []byte) (Root, error) { return parseSigned[Root](KindRoot, b) }

// Validate checks every field, naming the first that is wrong; signatures are checked for form.
func (r Root) Validate() error {
	what := "root v" + strconv.FormatUint(r.Version, 10)
	if r.Schema != RootSchema {
		return fmt.Errorf("root: schema %d is not supported (this host reads schema %d)", r.Schema, RootSchema)
	}
	if r.Version == 0 || r.Version > MaxRootVersion {
		return fmt.Errorf("root: version %d is not between 1 and %d", r.Version, uint64(MaxRootVersion))
	}
	if _, err := time.Parse(time.RFC3339, r.Expires); err != nil {
		return fmt.Errorf("%s: expires %q is not an RFC 3339 time like 2027-12-02T12:00:00Z", what, txt.Bound(r.Expires))
	}
	if len(r.Keys) == 0 || len(r.Keys) > MaxRootKeys {
		return fmt.Errorf("%s: %d keys; a root holds 1 to %d", what, len(r.Keys), MaxRootKeys)
	}
	for id, pub := range r.Keys {
		k, err := ParseTrustedKey(pub)
		if err != nil {
			return fmt.Errorf("%s: key %s: %w", what, txt.Bound(id), err)
		}
		if KeyID(k) != id {
			return fmt.Errorf("%s: key %s is listed under the id %s; its id is %s", what, txt.Bound(id), txt.Bound(id), KeyID(k))
		}
	}
	if len(r.Roles) != len(Roles) {
		return fmt.Errorf("%s: roles must be exactly root, releases and targets", what)
	}
	used := map[string]bool{}
	for _, role := range Roles {
		rk, ok := r.Roles[role]
		if !ok {
			return fmt.Errorf("%s: role %s is missing", what, role)
		}
		if len(rk.Keys) == 0 {
			return fmt.Errorf("%s: role %s has no keys", what, role)
		}
		if !slices.IsSorted(rk.Keys) || len(slices.Compact(slices.Clone(rk.Keys))) != len(rk.Keys) {
			return fmt.Errorf("%s: role %s: keys must be sorted and unique", what, role)
		}
		for _, id := range rk.Keys {
			if _, ok := r.Keys[id]; !ok {
				return fmt.Errorf("%s: role %s names key %s, which keys does not hold", what, role, txt.Bound(id))
			}
			used[id] = true
		}
		if rk.Threshold < 1 || rk.Threshold > len(rk.Keys) {
			return fmt.Errorf("%s: role %s: threshold %d is not between 1 and its %d keys", what, role, rk.Threshold, len(rk.Keys))
		}
		if rk.MaxTTL != "" {
			if role != RoleTargets {
				return fmt.Errorf("%s: role %s: max_ttl is for the targets role only (its documents expire)", what, role)
			}
			d, err := time.ParseDuration(rk.MaxTTL)
			if err != nil || d <= 0 || d.String() != rk.MaxTTL {
				return fmt.Errorf("%s: role targets: max_ttl %q is not a positive duration written as Go writes it (720h0m0s)", what, txt.Bound(rk.MaxTTL))
			}
		}
	}
	for id := range r.Keys {
		if !used[id] {
			return fmt.Errorf("%s: key %s is in no role", what, id)
		}
	}
	return checkSignatures(what, r.Signatures)
}

// ExpiresAt is Expires as a time; the zero time if it does not parse (Validate refuses that).
func (r Root) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, r.Expires)
	return at
}

// MaxTTL is the targets role's max_ttl; 0 when the root states none.
func (r Root) MaxTTL(role Role) time.Duration {
	d, _ := time.ParseDuration(r.Roles[role].MaxTTL)
	return d
}

// PublicKey is the key id's public key, nil when the root does not hold it.
func (r Root) PublicKey(id string) ed25519.PublicKey {
	s, ok := r.Keys[id]
	if !ok {
		return nil
	}
	k, err := ParseTrustedKey(s)
	if err != nil {
		return nil
	}
	return k
}

// HasKey reports whether id is one of role's keys in this root.
func (r Root) HasKey(role Role, id string) bool { return slices.Contains(r.Roles[role].Keys, id) }

// SigningText returns the exact bytes a root's signatures cover.
func (r Root) SigningText() []byte {
	var b bytes.Buffer
	b.WriteString(RootSigningHeader)
	fmt.Fprintf(&b, "version=%d\nexpires=%s\n", r.Version, r.Expires)
	ids := make([]string, 0, len(r.Keys))
	for id := range r.Keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		fmt.Fprintf(&b, "key=%s %s\n", id, r.Keys[id])
	}
	for _, role := range Roles {
		rk := r.Roles[role]
		fmt.Fprintf(&b, "role=%s threshold=%d keys=%s max_ttl=%s\n", role, rk.Threshold, strings.Join(rk.Keys, ","), rk.MaxTTL)
	}
	return b.Bytes()
}

// Fingerprint names this root's content, what an enrolment token pins: "sha256:" and the hex of
// the SHA-256 of its signing text.
func (r Root) Fingerprint() string {
	sum := sha256.Sum256(r.SigningText())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Envelope is the root as the verifier sees it: signed by the root role.
func (r Root) Envelope() Envelope {
	return Envelope{Kind: KindRoot, Name: "v" + strconv.FormatUint(r.Version, 10), Role: RoleRoot,
		Text: r.SigningText(), Signatures: r.Signatures}
}

// Sign validates the root and adds priv's signature. A key that has signed is refused.
func (r *Root) Sign(priv ed25519.PrivateKey) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("sign root: %w", err)
	}
	sg, err := SignText(r.SigningText(), priv)
	if err != nil {
		return fmt.Errorf("sign root: %w", err)
	}
	for _, have := range r.Signatures {
		if have.KeyID == sg.KeyID {
			return fmt.Errorf("sign root v%d: key %s has signed it already", r.Version, sg.KeyID)
		}
	}
	r.Signatures = append(r.Signatures, sg)
	return nil
}

// Marshal returns the root as indented JSON with a final newline, as root files hold it.
func (r Root) Marshal() []byte {
	if r.Signatures == nil {
		r.Signatures = []Signature{}
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}
