package wire

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
)

// One envelope for every signed document (decision 0045): a manifest, a target, a window, the
// withdrawal list, a bus configuration and a root are each, to the verifier, an Envelope: which
// kind it is, the role whose keys must sign it, the exact text the signatures cover, the
// signatures, and when it expires. Each document keeps its own documented signing text, so a
// document signed before roots existed verifies unchanged; what is shared is the parse (one
// size cap per kind, DecodeSigned), the verification against a role (Trust.Verify) and the
// expiry rule (Envelope.ExpiredAt).

// Role is a set of keys a root names and how many of them must sign a document.
type Role string

// The roles of a root: root signs roots, releases signs manifests, targets signs what is
// signed online (targets, windows, the withdrawal list, bus configurations, rollout plans).
const (
	RoleRoot     Role = "root"
	RoleReleases Role = "releases"
	RoleTargets  Role = "targets"
)

// Roles are the roles in the order a root's signed text lists them.
var Roles = []Role{RoleRoot, RoleReleases, RoleTargets}

// Signature is one key's signature over a document's signing text: the key's KeyID and the
// standard base64 of the 64-byte ed25519 signature.
type Signature struct {
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

// The kinds of signed document, and the most bytes each may be on the wire (the one size cap
// DecodeSigned applies before parsing).
const (
	KindManifest    = "manifest"
	KindTarget      = "target"
	KindWindow      = "window"
	KindWithdrawals = "withdrawals"
	KindRoot        = "root"
	KindBus         = "bus"
)

// The size caps of the kinds whose documents had one before the envelope; the others are in
// maxSignedBytes alone.
const (
	MaxManifestBytes    = 64 << 10  // the releases bucket's max value size
	MaxTargetBytes      = 1 << 10   // the targets bucket's: about 250 bytes with one signature, 5 fit
	MaxWindowBytes      = 8 << 10   // a window naming MaxWindowNodes nodes
	MaxWithdrawalsBytes = 256 << 10 // MaxWithdrawn entries with their reasons
	MaxRootBytes        = 64 << 10  // MaxRootKeys keys and their signatures
	MaxBusBytes         = 64 << 10
)

// maxSignedBytes is each kind's size cap, the one table DecodeSigned reads.
var maxSignedBytes = map[string]int{
	KindManifest:    MaxManifestBytes,
	KindTarget:      MaxTargetBytes,
	KindWindow:      MaxWindowBytes,
	KindWithdrawals: MaxWithdrawalsBytes,
	KindRoot:        MaxRootBytes,
	KindBus:         MaxBusBytes,
	KindPlan:        MaxPlanBytes,
}

// MaxSignedBytes is the size cap of kind's documents; 0 for an unknown kind.
func MaxSignedBytes(kind string) int { return maxSignedBytes[kind] }

// MaxSignatures is the most signatures a document may carry: more than any threshold needs.
const MaxSignatures = 16

// DecodeSigned is the one parse of a signed document: it refuses b above kind's size cap, then
// decodes it strictly into v (DecodeStrict). The caller validates the fields it decoded.
func DecodeSigned(kind string, b []byte, v any) error {
	limit := MaxSignedBytes(kind)
	if limit == 0 {
		return fmt.Errorf("%s: not a kind of signed document", txt.Bound(kind))
	}
	if len(b) > limit {
		return fmt.Errorf("%s: %d bytes, more than the %d allowed", kind, len(b), limit)
	}
	if err := DecodeStrict(b, v); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	return nil
}

// parseSigned is every signed document's parse: DecodeSigned, then the document's own Validate.
func parseSigned[T interface{ Validate() error }](kind string, b []byte) (T, error) {
	var v, zero T
	if err := DecodeSigned(kind, b, &v); err != nil {
		return zero, err
	}
	if err := v.Validate(); err != nil {
		return zero, err
	}
	return v, nil
}

// Envelope is one signed document as the verifier sees it.
type Envelope struct {
	Kind       string // KindManifest, ...
	Name       string // what names it in messages: the version, the KV key
	Role       Role   // the role whose keys must sign it
	Text       []byte // the exact bytes the signatures cover
	Signatures []Signature
	// Expires is when the document stops being acted on; zero when it does not expire (a
	// manifest: a version's build never goes stale, the target naming it does).
	Expires time.Time
}

// ExpiredAt is the one expiry rule: a document is expired from its expiry on.
func (e Envelope) ExpiredAt(now time.Time) bool { return expiredAt(e.Expires, now) }

// expiredAt is ExpiredAt for a document's expiry: never when zero, from the expiry on.
func expiredAt(expires, now time.Time) bool {
	return !expires.IsZero() && !now.Before(expires)
}

// sentinelError is an error matching more than one sentinel: a Trust.Verify error that is also
// the document's own older sentinel (ErrUnknownKey, ErrTargetBadSignature, ...), so callers
// testing either with errors.Is keep working.
type sentinelError struct {
	msg string
	is  []error
}

func (e *sentinelError) Error() string   { return e.msg }
func (e *sentinelError) Unwrap() []error { return e.is }

// verifyDocument is trust.Verify(env, now) for a document whose API had its own sentinels
// before roots: an error also matches unsigned, unknown (a key not trusted, removed, or too few
// keys) or bad (a signature that does not verify).
func verifyDocument(trust Trust, env Envelope, now time.Time, unsigned, unknown, bad error) error {
	err := trust.Verify(env, now)
	var also error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotSigned):
		// Said in the document's own words, as before roots: "target node.web-01: target is not signed".
		return &sentinelError{msg: env.what() + ": " + unsigned.Error(), is: []error{err, unsigned}}
	case errors.Is(err, ErrKeyNotTrusted), errors.Is(err, ErrBelowThreshold):
		also = unknown
	case errors.Is(err, ErrSignatureInvalid):
		also = bad
	default:
		return err
	}
	return &sentinelError{msg: err.Error(), is: []error{err, also}}
}

// signed reports whether any of the envelope's signatures holds a signature: a key_id alone is
// not signed.
func (e Envelope) signed() bool {
	return slices.ContainsFunc(e.Signatures, func(sg Signature) bool { return sg.Signature != "" })
}

// what is "target node.web-01" for messages.
func (e Envelope) what() string {
	if e.Name == "" {
		return e.Kind
	}
	return e.Kind + " " + txt.Bound(e.Name)
}

// Errors Trust.Verify returns (wrapped, with the details); test them with errors.Is. A
// signature by a key a later root removed from the role is ErrKeyRemoved, which is also
// ErrKeyNotTrusted.
var (
	ErrNotSigned        = errors.New("not signed")
	ErrKeyNotTrusted    = errors.New("signed by a key this node does not trust")
	ErrKeyRemoved       = errors.New("signed by a key a root removed")
	ErrSignatureInvalid = errors.New("a signature does not verify: the document was altered after signing, or the signature is corrupt")
	ErrBelowThreshold   = errors.New("signed by fewer keys than the role's threshold")
	ErrTooFarAhead      = errors.New("expires further ahead than the root lets the role's documents last")
)

// SignatureList is the signatures a document carries, in the form every signed document but the
// root writes them: one signature as the pair key_id and signature (the form hosts older than
// roots read), two or more as the list signatures, never both.
type SignatureList struct {
	KeyID      string      `json:"key_id,omitempty"`
	Signature  string      `json:"signature,omitempty"`
	Signatures []Signature `json:"signatures,omitempty"`
}

// List is every signature, whichever form holds them.
func (s SignatureList) List() []Signature {
	if s.KeyID != "" || s.Signature != "" {
		return append([]Signature{{KeyID: s.KeyID, Signature: s.Signature}}, s.Signatures...)
	}
	return slices.Clone(s.Signatures)
}

// Joined is every signature as one string, what a node keeps to tell a sequence number reused
// with other content: the one signature itself (as before roots), or the signatures joined by
// commas, in the document's order.
func (s SignatureList) Joined() string {
	list := s.List()
	parts := make([]string, len(list))
	for i, sg := range list {
		parts[i] = sg.Signature
	}
	return strings.Join(parts, ",")
}

// Check refuses a list in both forms, too many signatures, a key signing twice and a key id not
// of KeyID's form.
func (s SignatureList) Check(what string) error {
	if s.KeyID != "" && len(s.Signatures) > 0 {
		return fmt.Errorf("%s: key_id and signatures are both set; one signature is written as key_id and signature, more as signatures", what)
	}
	if len(s.Signatures) == 1 {
		return fmt.Errorf("%s: signatures holds one signature; one is written as key_id and signature", what)
	}
	if len(s.Signatures) == 0 {
		// One signature, or none yet: key_id may be empty (unsigned), else of KeyID's form.
		if s.KeyID != "" && !validKeyID(s.KeyID) {
			return fmt.Errorf("%s: key_id %q is not 16 hex digits", what, txt.Bound(s.KeyID))
		}
		return nil
	}
	return checkSignatures(what, s.Signatures)
}

// checkSignatures refuses too many signatures, a key signing twice and a malformed key id in a
// list of signatures.
func checkSignatures(what string, list []Signature) error {
	if len(list) > MaxSignatures {
		return fmt.Errorf("%s: %d signatures, more than the %d allowed", what, len(list), MaxSignatures)
	}
	for i, sg := range list {
		if !validKeyID(sg.KeyID) {
			return fmt.Errorf("%s: signatures[%d].key_id %q is not 16 hex digits", what, i, txt.Bound(sg.KeyID))
		}
		for _, prev := range list[:i] {
			if prev.KeyID == sg.KeyID {
				return fmt.Errorf("%s: key %s signed twice", what, sg.KeyID)
			}
		}
	}
	return nil
}

// Add signs text with priv and adds the signature, in the form List describes. A key that has
// signed already is refused.
func (s *SignatureList) Add(text []byte, priv ed25519.PrivateKey) error {
	sg, err := SignText(text, priv)
	if err != nil {
		return err
	}
	list := s.List()
	for _, have := range list {
		if have.KeyID == sg.KeyID {
			return fmt.Errorf("key %s has signed it already", sg.KeyID)
		}
	}
	list = append(list, sg)
	*s = SignatureList{}
	if len(list) == 1 {
		s.KeyID, s.Signature = sg.KeyID, sg.Signature
	} else {
		s.Signatures = list
	}
	return nil
}

// SignText signs text with priv.
func SignText(text []byte, priv ed25519.PrivateKey) (Signature, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return Signature{}, fmt.Errorf("the key is %d bytes, an ed25519 private key is %d", len(priv), ed25519.PrivateKeySize)
	}
	pub := priv.Public().(ed25519.PublicKey)
	return Signature{KeyID: KeyID(pub), Signature: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, text))}, nil
}

// ShortKeyID is how messages name a key: its first 8 hex digits and an ellipsis, 82912897….
func ShortKeyID(id string) string {
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

// verifyOne reports whether sg is pub's valid signature of text.
func verifyOne(pub ed25519.PublicKey, text []byte, sg Signature) bool {
	sig, err := base64.StdEncoding.DecodeString(sg.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return false
	}
	return ed25519.Verify(pub, text, sig)
}
