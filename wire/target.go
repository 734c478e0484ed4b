package wire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	txt "github.com/novox/mesh-host/internal/text"
	"strconv"
	"time"
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
	Version   string `json:"version"`
	Seq       uint64 `json:"seq"`
	Expires   string `json:"expires"`
	Urgent    bool   `json:"urgent,omitempty"`
	KeyID     string `json:"key_id"`
	Signature string `json:"signature"`
}

// MaxSeq is the largest sequence number a target or withdrawal list may carry: a JSON-safe
// integer (2^53 - 1), far beyond any clock in milliseconds, so a number can neither wrap nor lose
// precision in a reader that holds it as a float or a signed integer.
const MaxSeq = 1<<53 - 1

// Errors VerifyTarget returns (wrapped, with the details); test them with errors.Is.
var (
	ErrTargetUnsigned     = errors.New("target is not signed")
	ErrTargetUnknownKey   = errors.New("target is signed by a key this node does not trust")
	ErrTargetBadSignature = errors.New("target signature does not verify: a field was altered after signing, it was moved from another key, or the signature is corrupt")
)

// ParseTarget decodes a target strictly and checks its fields (the version by the one version
// rule, ValidVersion; the expiry as RFC 3339; the key id's form). It does not check the
// signature: that is Verify, which needs the key the target was read under.
func ParseTarget(b []byte) (Target, error) {
	var t Target
	if err := decodeStrict(b, &t); err != nil {
		return Target{}, fmt.Errorf("target: %w", err)
	}
	if err := t.Validate(); err != nil {
		return Target{}, err
	}
	return t, nil
}

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
	if t.KeyID != "" {
		if !validKeyID(t.KeyID) {
			return fmt.Errorf("target: key_id %q is not 16 hex digits", txt.Bound(t.KeyID))
		}
	}
	return nil
}

// ExpiresAt is Expires as a time; the zero time if it does not parse (Validate refuses that).
func (t Target) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, t.Expires)
	return at
}

// ExpiredAt reports whether the target is past its expiry at now.
func (t Target) ExpiredAt(now time.Time) bool { return !now.Before(t.ExpiresAt()) }

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

// Sign validates the target and signs it for key with priv, setting KeyID and Signature.
func (t *Target) Sign(key string, priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign target: the target key is %d bytes, an ed25519 private key is %d", len(priv), ed25519.PrivateKeySize)
	}
	t.KeyID, t.Signature = "", ""
	if err := t.Validate(); err != nil {
		return fmt.Errorf("sign target: %w", err)
	}
	t.KeyID = KeyID(priv.Public().(ed25519.PublicKey))
	t.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, t.SigningText(key)))
	return nil
}

// Verify checks that the target was signed for key by one of the trusted keys. An unsigned
// target, a key that is not trusted and a signature that does not verify are distinct errors
// (ErrTargetUnsigned, ErrTargetUnknownKey, ErrTargetBadSignature), each naming the key.
func (t Target) Verify(key string, trusted []ed25519.PublicKey) error {
	if err := t.Validate(); err != nil {
		return err
	}
	return verifySigned("target", key, t.KeyID, t.Signature, t.SigningText(key), trusted,
		ErrTargetUnsigned, ErrTargetUnknownKey, ErrTargetBadSignature)
}

// verifySigned is the check targets and withdrawal lists share.
func verifySigned(what, name, keyID, signature string, text []byte, trusted []ed25519.PublicKey, unsigned, unknown, bad error) error {
	if signature == "" {
		return fmt.Errorf("%s %s: %w; sign it with --key", what, name, unsigned)
	}
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%s %s: %w (the signature is not %d bytes of standard base64)", what, name, bad, ed25519.SignatureSize)
	}
	for _, pub := range trusted {
		if KeyID(pub) != keyID {
			continue
		}
		if !ed25519.Verify(pub, text, sig) {
			return fmt.Errorf("%s %s: %w (key %s)", what, name, bad, keyID)
		}
		return nil
	}
	return fmt.Errorf("%s %s: %w: key_id %q is not among the %d trusted target keys (trusted_target_keys, else trusted_keys)",
		what, name, unknown, txt.Bound(keyID), len(trusted))
}

// Marshal returns the target's JSON.
func (t Target) Marshal() []byte { b, _ := json.Marshal(t); return b }
