package wire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/novox/mesh-host/internal/text"
	"slices"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// WithdrawalsSigningHeader is the first line of the text a withdrawal list's signature covers.
const WithdrawalsSigningHeader = "mesh-host withdrawals 1\n"

// Limits of a withdrawal list (decision 0011).
const (
	MaxWithdrawn        = 1000
	MaxWithdrawalReason = 256
	MaxWithdrawalsBytes = 256 << 10
)

// Withdrawals is the value under KV mesh_host_withdrawals key "list": every version withdrawn
// from the fleet, signed by a target key. The signature covers SigningText:
//
//	mesh-host withdrawals 1
//	seq=7
//	withdrawn=v1.2.0 2026-11-29T10:42:00Z "crashes on arm64 under load"
//
// one withdrawn= line per entry in list order, the reason as a JSON string, each line ending
// in "\n". A host keeps the highest Seq it accepted and refuses a lower one (a replay of a list
// from before a withdrawal). A withdrawal is never undone by a later list.
type Withdrawals struct {
	Seq       uint64      `json:"seq"`
	Withdrawn []Withdrawn `json:"withdrawn"`
	KeyID     string      `json:"key_id"`
	Signature string      `json:"signature"`
}

// Withdrawn is one withdrawn version: why, and when it was withdrawn.
type Withdrawn struct {
	Version string `json:"version"`
	Reason  string `json:"reason"`
	At      string `json:"at"`
}

// Errors Withdrawals.Verify returns (wrapped); test them with errors.Is.
var (
	ErrWithdrawalsUnsigned     = errors.New("withdrawal list is not signed")
	ErrWithdrawalsUnknownKey   = errors.New("withdrawal list is signed by a key this node does not trust")
	ErrWithdrawalsBadSignature = errors.New("withdrawal list signature does not verify: it was altered after signing, or the signature is corrupt")
)

// ParseWithdrawals decodes a withdrawal list strictly and checks its fields. It does not check
// the signature: that is Verify.
func ParseWithdrawals(b []byte) (Withdrawals, error) {
	if len(b) > MaxWithdrawalsBytes {
		return Withdrawals{}, fmt.Errorf("withdrawal list: %d bytes, more than the %d allowed", len(b), MaxWithdrawalsBytes)
	}
	var w Withdrawals
	if err := decodeStrict(b, &w); err != nil {
		return Withdrawals{}, fmt.Errorf("withdrawal list: %w", err)
	}
	if err := w.Validate(); err != nil {
		return Withdrawals{}, err
	}
	return w, nil
}

// Validate checks every field except the signature, naming the first one that is wrong.
func (w Withdrawals) Validate() error {
	if err := checkSeq("withdrawal list", w.Seq); err != nil {
		return err
	}
	if len(w.Withdrawn) > MaxWithdrawn {
		return fmt.Errorf("withdrawal list: %d entries, more than the %d allowed", len(w.Withdrawn), MaxWithdrawn)
	}
	seen := make(map[string]bool, len(w.Withdrawn))
	for i, e := range w.Withdrawn {
		field := func(name string) string { return fmt.Sprintf("withdrawal list: withdrawn[%d].%s", i, name) }
		if !ValidVersion(e.Version) {
			return fmt.Errorf("%s %q is not %s", field("version"), text.Bound(e.Version), VersionRule)
		}
		if seen[e.Version] {
			return fmt.Errorf("%s %s is withdrawn twice", field("version"), e.Version)
		}
		seen[e.Version] = true
		if _, err := time.Parse(time.RFC3339, e.At); err != nil {
			return fmt.Errorf("%s %q is not an RFC 3339 time", field("at"), text.Bound(e.At))
		}
		if err := validReason(e.Reason); err != nil {
			return fmt.Errorf("%s: %w", field("reason"), err)
		}
	}
	if w.KeyID != "" {
		if !validKeyID(w.KeyID) {
			return fmt.Errorf("withdrawal list: key_id %q is not 16 hex digits", text.Bound(w.KeyID))
		}
	}
	return nil
}

// validReason accepts up to MaxWithdrawalReason bytes of printable UTF-8 on one line.
func validReason(s string) error {
	if len(s) > MaxWithdrawalReason {
		return fmt.Errorf("%d bytes, more than the %d allowed", len(s), MaxWithdrawalReason)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("holds the unprintable character %U", r)
		}
	}
	return nil
}

// Has returns the entry for version, if it is withdrawn.
func (w Withdrawals) Has(version string) (Withdrawn, bool) {
	i := slices.IndexFunc(w.Withdrawn, func(e Withdrawn) bool { return e.Version == version })
	if i < 0 {
		return Withdrawn{}, false
	}
	return w.Withdrawn[i], true
}

// SigningText returns the exact bytes the signature covers (see Withdrawals).
func (w Withdrawals) SigningText() []byte {
	var b bytes.Buffer
	b.WriteString(WithdrawalsSigningHeader)
	b.WriteString("seq=" + strconv.FormatUint(w.Seq, 10) + "\n")
	for _, e := range w.Withdrawn {
		reason, _ := json.Marshal(e.Reason)
		b.WriteString("withdrawn=" + e.Version + " " + e.At + " ")
		b.Write(reason)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// Withdraw returns the list after prev (the value the key holds now, or the zero list) with
// version withdrawn for reason at now, numbered like a target (the larger of prev's seq + 1 and
// now in Unix milliseconds) and signed with priv. A version already withdrawn is an error.
func (prev Withdrawals) Withdraw(version, reason string, now time.Time, priv ed25519.PrivateKey) (Withdrawals, error) {
	if prev.Seq >= MaxSeq {
		return Withdrawals{}, fmt.Errorf("withdraw %s: the list has seq %d, the largest allowed: no later list can be numbered", version, prev.Seq)
	}
	if _, ok := prev.Has(version); ok {
		return Withdrawals{}, fmt.Errorf("withdraw %s: it is already withdrawn", version)
	}
	w := Withdrawals{
		Seq:       max(prev.Seq+1, uint64(max(now.UnixMilli(), 0))),
		Withdrawn: append(slices.Clone(prev.Withdrawn), Withdrawn{Version: version, Reason: reason, At: now.UTC().Format(time.RFC3339)}),
	}
	if err := w.Sign(priv); err != nil {
		return Withdrawals{}, err
	}
	return w, nil
}

// Sign validates the list and signs it with priv, setting KeyID and Signature.
func (w *Withdrawals) Sign(priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign withdrawal list: the key is %d bytes, an ed25519 private key is %d", len(priv), ed25519.PrivateKeySize)
	}
	w.KeyID, w.Signature = "", ""
	if err := w.Validate(); err != nil {
		return fmt.Errorf("sign %w", err)
	}
	w.KeyID = KeyID(priv.Public().(ed25519.PublicKey))
	w.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(priv, w.SigningText()))
	return nil
}

// Verify checks the list's fields and that one of the trusted keys signed it
// (ErrWithdrawalsUnsigned, ErrWithdrawalsUnknownKey, ErrWithdrawalsBadSignature).
func (w Withdrawals) Verify(trusted []ed25519.PublicKey) error {
	if err := w.Validate(); err != nil {
		return err
	}
	return verifySigned("withdrawal list", "seq "+strconv.FormatUint(w.Seq, 10), w.KeyID, w.Signature, w.SigningText(), trusted,
		ErrWithdrawalsUnsigned, ErrWithdrawalsUnknownKey, ErrWithdrawalsBadSignature)
}

// Marshal returns the list's JSON.
func (w Withdrawals) Marshal() []byte { b, _ := json.Marshal(w); return b }
