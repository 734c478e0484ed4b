// Package targets writes the signed values that tell hosts what to run (decision 0011).
//
// They are a target under node.<id> or fleet in the targets bucket, and the withdrawal list. Every
// write is a compare-and-set numbered after the value it replaces (seq = max(previous seq + 1, now
// in Unix milliseconds)), so two writers never lose each other's work and a host never sees a
// target's number go back; Keep re-signs targets before they expire.
package targets

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/novox/mesh-host/wire"
)

// Bounds of a target's validity (--target-ttl).
const (
	// DefaultTTL is how long a target is valid when nothing re-signs it: a week.
	DefaultTTL = 7 * 24 * time.Hour
	// MinTTL keeps a target valid long enough to reach a node and be acted on; expiries are
	// written in whole seconds.
	MinTTL = time.Minute
	// MaxTTL keeps an expiry a date a person can read and reason about.
	MaxTTL = 10 * 365 * 24 * time.Hour
)

// Signer signs targets with a target key for a validity of TTL.
type Signer struct {
	Key ed25519.PrivateKey
	// More are further target keys, each adding its signature after Key's, for a root whose
	// targets role needs a threshold of two or more (decision 0045). Without them a document
	// carries Key's signature alone, byte for byte as before roots.
	More []ed25519.PrivateKey
	TTL  time.Duration
	// Now is the clock (nil: time.Now); tests set it.
	Now func() time.Time
	// Urgent signs the targets urgent (`target --urgent`, `rollout start --urgent`): nodes
	// stand aside for them without waiting for their maintenance windows (decision 0029).
	Urgent bool
}

// NewSigner checks key and ttl (ValidTTL) and returns the signer. The errors name the flag at
// fault.
func NewSigner(key ed25519.PrivateKey, ttl time.Duration) (Signer, error) {
	s := Signer{Key: key, TTL: ttl}
	if err := s.Check(); err != nil {
		return Signer{}, err
	}
	if err := ValidTTL(ttl); err != nil {
		return Signer{}, err
	}
	return s, nil
}

// ErrNoKey is wrapped when a signer has no key.
var ErrNoKey = errors.New("no target key; targets are signed, and hosts refuse an unsigned one (decision 0011)")

// Check says whether the signer can sign at all (a key, each further key an ed25519 key given
// once, a positive TTL); NewSigner also holds the TTL to its bounds.
func (s Signer) Check() error {
	if len(s.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("--key: %w", ErrNoKey)
	}
	seen := map[string]bool{s.KeyID(): true}
	for i, k := range s.More {
		if len(k) != ed25519.PrivateKeySize {
			return fmt.Errorf("--key %d: the key is %d bytes, an ed25519 private key is %d", i+2, len(k), ed25519.PrivateKeySize)
		}
		id := wire.KeyID(k.Public().(ed25519.PublicKey))
		if seen[id] {
			return fmt.Errorf("--key %d: key %s is given twice; a threshold counts each key once", i+2, id)
		}
		seen[id] = true
	}
	if s.TTL <= 0 {
		return fmt.Errorf("--target-ttl %s: want a positive duration", s.TTL)
	}
	return nil
}

// ValidTTL checks a --target-ttl.
func ValidTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("--target-ttl %s: want between %s and %s (a target unsigned again for that long stops being acted on)", ttl, MinTTL, "87600h (10 years)")
	}
	return nil
}

func (s Signer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Public is the signer's public key, as hosts trust it.
func (s Signer) Public() ed25519.PublicKey { return s.Key.Public().(ed25519.PublicKey) }

// KeyID is the signer's key id, as a target's key_id names it.
func (s Signer) KeyID() string { return wire.KeyID(s.Public()) }

// Sign returns a target for version under KV key kvKey, numbered after prev (the seq of the
// value it replaces, or 0) and valid for TTL from now.
func (s Signer) Sign(kvKey, version string, prev uint64) (wire.Target, error) {
	return s.sign(kvKey, version, prev, s.Urgent)
}

// sign is Sign, urgent or not.
func (s Signer) sign(kvKey, version string, prev uint64, urgent bool) (wire.Target, error) {
	if err := s.Check(); err != nil {
		return wire.Target{}, err
	}
	t, err := wire.NewTarget(kvKey, version, prev, s.now(), s.TTL, s.Key)
	if err != nil {
		return t, err
	}
	if urgent {
		t.Urgent = true
		if err := t.Sign(kvKey, s.Key); err != nil {
			return wire.Target{}, err
		}
	}
	for _, k := range s.More {
		if err := t.AddSignature(kvKey, k); err != nil {
			return wire.Target{}, err
		}
	}
	return t, nil
}

// KeyIDs are the ids of every key the signer signs with, Key's first.
func (s Signer) KeyIDs() []string {
	ids := []string{s.KeyID()}
	for _, k := range s.More {
		ids = append(ids, wire.KeyID(k.Public().(ed25519.PublicKey)))
	}
	return ids
}

// Signed reports whether t, stored under kvKey, verifies with the signer's key.
func (s Signer) Signed(kvKey string, t wire.Target) bool {
	return len(s.Key) == ed25519.PrivateKeySize && t.Verify(kvKey, wire.LegacyTrust(nil, []ed25519.PublicKey{s.Public()}), s.now()) == nil
}

// Due reports whether t, signed by this signer, should be signed again: less than half of TTL
// of its validity is left (or it has expired).
func (s Signer) Due(t wire.Target) bool {
	return t.ExpiresAt().Sub(s.now()) < s.TTL/2
}
