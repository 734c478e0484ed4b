package wire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
)

// TargetSigningHeader is the first line of the text a target's signature covers.
const TargetSigningHeader = "mesh-host target 1\n"

// Target is the value under KV mesh_host_targets keys "node.<id>" and "fleet": the host
// version a node should run, chosen by the holder of a target key (decision 0011). The
// signature covers SigningText(key), a documented text any tool can reproduce:
//
//	mesh-host target 1
//	key=node.web-01
//	version=v1.4.0
//	seq=1764417600000
//	expires=2026-12-06T12:00:00Z
//
// each line ending in "\n", and after them "urgent=true\n" when the target is urgent (so a target
// that is not reads as it always did). An urgent target is not held for a maintenance window
// (decision 0029): a node stands aside for it as soon as it is staged. key is the KV key the target is stored under, so a target signed
// for one node cannot be moved to another node or to the fleet key. A host keeps, per key, the
// highest Seq it accepted and refuses a lower one (a replay); it does not act on a target past
// Expires, and says so in its heartbeat.
type Target struct {
	Version string `json:"version"`
	Seq     uint64 `json:"seq"`
	Expires string `json:"expires"`
	Urgent  bool   `json:"urgent,omitempty"`
	// SignatureList holds the signatures, last in the JSON: one as key_id and signature (byte
	// for byte what hosts before roots read), two or more as signatures (decision 0045).
	SignatureList
}

// MaxSeq is the largest sequence number a target or withdrawal list may carry: a JSON-safe
// integer (2^53 - 1), far beyond any clock in milliseconds, so a number can neither wrap nor lose
// precision in a reader that holds it as a float or a signed integer.
const MaxSeq = 1<<53 - 1

// Errors Target.Verify returns (wrapped, with the details); test them with errors.Is.
var (
	ErrTargetUnsigned     = errors.New("target is not signed")
	ErrTargetUnknownKey   = errors.New("target is signed by a key this node does not trust")
	ErrTargetBadSignature = errors.New("target signature does not verify: a field was altered after signing, it was moved from another key, or the signature is corrupt")
)

// ParseTarget decodes a target strictly, at most MaxTargetBytes (DecodeSigned), and checks its
// fields (the version by the one version rule, ValidVersion; the expiry as RFC 3339; the
// signatures' form). It does not check the signatures: that is Verify, which needs the key the
// target was read under.
func ParseTarget(b []byte) (Target, error) { return parseSigned[Target](KindTarget, b) }

// Validate checks every field except the signature, naming the first one that is wrong.
func (t Target) Validate() error {
	if !ValidVersion(t.Version) {
		return fmt.Errorf("target: version %q is not %s", t.Version, VersionRule)
	}
	if err := checkSeq("target", t.Seq); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, t.Expires); err != nil {
		return fmt.Errorf("target: expires %q is not an RFC 3339 time like 2026-12-06T12:00:00Z", txt.Bound(t.Expires))
	}
	return t.SignatureList.Check("target")
}

// ExpiresAt is Expires as a time; the zero time if it does not parse (Validate refuses that).
func (t Target) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, t.Expires)
	return at
}

// ExpiredAt reports whether the target is past its expiry at now.
func (t Target) ExpiredAt(now time.Time) bool { return expiredAt(t.ExpiresAt(), now) }

// SigningText returns the exact bytes the signature covers when the target is stored under key.
func (t Target) SigningText(key string) []byte {
	var b bytes.Buffer
	b.WriteString(TargetSigningHeader)
	for _, kv := range [][2]string{
		{"key", key},
		{"version", t.Version},
		{"seq", strconv.FormatUint(t.Seq, 10)},
		{"expires", t.Expires},
	} {
		b.WriteString(kv[0])
		b.WriteByte('=')
		b.WriteString(kv[1])
		b.WriteByte('\n')
	}
	if t.Urgent {
		b.WriteString("urgent=true\n")
	}
	return b.Bytes()
}

// NewTarget is a target for version under key, numbered after prev (the value the key holds
// now, or zero) and valid for ttl from now, signed with priv. Its seq is the larger of prev's
// seq + 1 and now in Unix milliseconds, so a key deleted and set again still moves forward.
func NewTarget(key, version string, prev uint64, now time.Time, ttl time.Duration, priv ed25519.PrivateKey) (Target, error) {
	if prev >= MaxSeq {
		return Target{}, fmt.Errorf("sign target %s: the value it replaces has seq %d, the largest allowed: no later target can be numbered", key, prev)
	}
	seq := max(prev+1, uint64(max(now.UnixMilli(), 0)))
	t := Target{Version: version, Seq: seq, Expires: now.Add(ttl).UTC().Truncate(time.Second).Format(time.RFC3339)}
	if err := t.Sign(key, priv); err != nil {
		return Target{}, err
	}
	return t, nil
}

// Sign validates the target and signs it for key with priv: the first signature, replacing any
// it had. AddSignature adds another.
func (t *Target) Sign(key string, priv ed25519.PrivateKey) error {
	t.SignatureList = SignatureList{}
	return t.AddSignature(key, priv)
}

// AddSignature validates the target and adds priv's signature for key to those it has (the
// targets role's threshold). A key that has signed is refused.
func (t *Target) AddSignature(key string, priv ed25519.PrivateKey) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("sign target: %w", err)
	}
	if err := t.SignatureList.Add(t.SigningText(key), priv); err != nil {
		return fmt.Errorf("sign target %s: %w", txt.Bound(key), err)
	}
	return nil
}

// Envelope is the target stored under key as the verifier sees it: signed by the targets role,
// expiring at Expires.
func (t Target) Envelope(key string) Envelope {
	return Envelope{Kind: KindTarget, Name: key, Role: RoleTargets, Text: t.SigningText(key), Signatures: t.List(), Expires: t.ExpiresAt()}
}

// Verify checks that the target was signed for key as trust requires at now (Trust.Verify: a
// threshold of the targets role's keys, an expiry within its max_ttl; one trusted target key
// before any root). An unsigned target, a key that is not trusted (or too few) and a signature
// that does not verify are distinct errors, each naming the key: ErrTargetUnsigned,
// ErrTargetUnknownKey and ErrTargetBadSignature, which are also Trust.Verify's sentinels. It
// does not judge expiry: ExpiredAt does.
func (t Target) Verify(key string, trust Trust, now time.Time) error {
	if err := t.Validate(); err != nil {
		return err
	}
	return verifyDocument(trust, t.Envelope(key), now, ErrTargetUnsigned, ErrTargetUnknownKey, ErrTargetBadSignature)
}

// Marshal returns the target's JSON.
func (t Target) Marshal() []byte { b, _ := json.Marshal(t); return b }
