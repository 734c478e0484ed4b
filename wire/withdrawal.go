package wire

import (
	"bytes"
	"crypto/ed25519"
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
)

// Withdrawals is the value under KV mesh_host_withdrawals key "list": every version withdrawn
// from the fleet, signed by a target key. The signature covers SigningText:
//
//	mesh-host withdrawals 1
//	seq=7
//	withdrawn=v1.2.0 2026-11-29T10:42:00Z "crashes on arm64 under load"
//	expires=2026-12-09T10:42:00Z
//
// one withdrawn= line per entry in list order, the reason as a JSON string, then expires= only
// when the list expires (so a list that does not signs as it always did), each line ending in
// "\n". A host keeps the highest Seq it accepted and refuses a lower one (a replay of a list
// from before a withdrawal). A withdrawal is never undone by a later list, nor by the list
// expiring: an expired list says only that a newer one is overdue (decision 0045).
type Withdrawals struct {
	Seq       uint64      `json:"seq"`
	Withdrawn []Withdrawn `json:"withdrawn"`
	// Expires is when the list stops being fresh (RFC 3339), empty for a list that never does.
	// Hosts before decision 0045 refuse a list carrying it (an unknown field) and keep the
	// withdrawals they hold, so the release side writes it only once its fleet reads it.
	Expires string `json:"expires,omitempty"`
	// SignatureList holds the signatures, last in the JSON: one as key_id and signature (byte
	// for byte what hosts before roots read), two or more as signatures (decision 0045).
	SignatureList
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

// ParseWithdrawals decodes a withdrawal list strictly, at most MaxWithdrawalsBytes
// (DecodeSigned), and checks its fields. It does not check
// the signature: that is Verify.
func ParseWithdrawals(b []byte) (Withdrawals, error) {
	return parseSigned[Withdrawals](KindWithdrawals, b)
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
	if w.Expires != "" {
		if _, err := time.Parse(time.RFC3339, w.Expires); err != nil {
			return fmt.Errorf("withdrawal list: expires %q is not an RFC 3339 time like 2026-12-09T10:42:00Z", text.Bound(w.Expires))
		}
	}
	return w.SignatureList.Check("withdrawal list")
}

// ExpiresAt is Expires as a time; the zero time for a list that does not expire.
func (w Withdrawals) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, w.Expires)
	return at
}

// ExpiredAt reports whether the list is past its expiry at now; never for a list without one.
func (w Withdrawals) ExpiredAt(now time.Time) bool { return expiredAt(w.ExpiresAt(), now) }

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
	if w.Expires != "" {
		b.WriteString("expires=" + w.Expires + "\n")
	}
	return b.Bytes()
}

// Withdraw returns the list after prev (the value the key holds now, or the zero list) with
// version withdrawn for reason at now, numbered like a target (the larger of prev's seq + 1 and
// now in Unix milliseconds) and signed with priv. It does not expire: WithdrawFor makes one that
// does. A version already withdrawn is an error.
func (prev Withdrawals) Withdraw(version, reason string, now time.Time, priv ed25519.PrivateKey) (Withdrawals, error) {
	return prev.WithdrawFor(version, reason, now, 0, priv)
}

// WithdrawFor is Withdraw for a list valid for ttl from now (expires, at a whole second); a ttl
// of 0 writes no expiry, for a fleet with hosts that do not read it.
func (prev Withdrawals) WithdrawFor(version, reason string, now time.Time, ttl time.Duration, priv ed25519.PrivateKey) (Withdrawals, error) {
	if _, ok := prev.Has(version); ok {
		return Withdrawals{}, fmt.Errorf("withdraw %s: it is already withdrawn", version)
	}
	w, err := prev.next(append(slices.Clone(prev.Withdrawn), Withdrawn{Version: version, Reason: reason, At: now.UTC().Format(time.RFC3339)}), now, ttl, priv)
	if err != nil {
		return Withdrawals{}, fmt.Errorf("withdraw %s: %w", version, err)
	}
	return w, nil
}

// Renew is prev's withdrawals again, numbered after it, valid for ttl from now and signed with
// priv: what the release side writes before a list expires, so a node cut off from newer
// lists knows it is (a list that never expires lets a freeze go unnoticed).
func (prev Withdrawals) Renew(now time.Time, ttl time.Duration, priv ed25519.PrivateKey) (Withdrawals, error) {
	if ttl <= 0 {
		return Withdrawals{}, fmt.Errorf("renew the withdrawal list: ttl %s is not positive", ttl)
	}
	w, err := prev.next(slices.Clone(prev.Withdrawn), now, ttl, priv)
	if err != nil {
		return Withdrawals{}, fmt.Errorf("renew the withdrawal list: %w", err)
	}
	return w, nil
}

// next is the list after prev holding entries, numbered, expiring ttl after now (never for 0)
// and signed with priv.
func (prev Withdrawals) next(entries []Withdrawn, now time.Time, ttl time.Duration, priv ed25519.PrivateKey) (Withdrawals, error) {
	if prev.Seq >= MaxSeq {
		return Withdrawals{}, fmt.Errorf("the list has seq %d, the largest allowed: no later list can be numbered", prev.Seq)
	}
	if ttl < 0 {
		return Withdrawals{}, fmt.Errorf("ttl %s is negative", ttl)
	}
	w := Withdrawals{Seq: max(prev.Seq+1, uint64(max(now.UnixMilli(), 0))), Withdrawn: entries}
	if ttl > 0 {
		w.Expires = now.Add(ttl).UTC().Truncate(time.Second).Format(time.RFC3339)
	}
	if err := w.Sign(priv); err != nil {
		return Withdrawals{}, err
	}
	return w, nil
}

// Sign validates the list and signs it with priv: the first signature, replacing any it had.
// AddSignature adds another.
func (w *Withdrawals) Sign(priv ed25519.PrivateKey) error {
	w.SignatureList = SignatureList{}
	return w.AddSignature(priv)
}

// AddSignature validates the list and adds priv's signature to those it has (the targets role's
// threshold). A key that has signed is refused.
func (w *Withdrawals) AddSignature(priv ed25519.PrivateKey) error {
	if err := w.Validate(); err != nil {
		return fmt.Errorf("sign %w", err)
	}
	if err := w.SignatureList.Add(w.SigningText(), priv); err != nil {
		return fmt.Errorf("sign withdrawal list seq %d: %w", w.Seq, err)
	}
	return nil
}

// Envelope is the list as the verifier sees it: signed by the targets role, expiring at Expires
// (never when it has none).
func (w Withdrawals) Envelope() Envelope {
	return Envelope{Kind: KindWithdrawals, Name: "seq " + strconv.FormatUint(w.Seq, 10), Role: RoleTargets,
		Text: w.SigningText(), Signatures: w.List(), Expires: w.ExpiresAt()}
}

// Verify checks the list's fields and its signatures as trust requires at now (Trust.Verify),
// its errors also ErrWithdrawalsUnsigned, ErrWithdrawalsUnknownKey or
// ErrWithdrawalsBadSignature. It does not judge expiry: ExpiredAt does.
func (w Withdrawals) Verify(trust Trust, now time.Time) error {
	if err := w.Validate(); err != nil {
		return err
	}
	return verifyDocument(trust, w.Envelope(), now, ErrWithdrawalsUnsigned, ErrWithdrawalsUnknownKey, ErrWithdrawalsBadSignature)
}

// Marshal returns the list's JSON.
func (w Withdrawals) Marshal() []byte { b, _ := json.Marshal(w); return b }
