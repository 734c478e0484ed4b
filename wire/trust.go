package wire

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"time"
)

// Trust is what a node verifies signed documents with (decision 0045): the roots it accepted,
// oldest first, of which the newest decides; or, before it holds any root, the keys host.json
// names (trusted_keys for releases; trusted_target_keys, else trusted_keys, for targets). The
// older roots are kept to name, in a refusal, the root that removed a key. A Trust is a value:
// Advance returns a new one.
type Trust struct {
	roots  []Root
	legacy map[Role][]ed25519.PublicKey
}

// LegacyTrust is the trust of a node that holds no root yet: its host.json keys, each role
// satisfied by one signature.
func LegacyTrust(releases, targets []ed25519.PublicKey) Trust {
	return Trust{legacy: map[Role][]ed25519.PublicKey{RoleReleases: releases, RoleTargets: targets}}
}

// TrustFromRoots rebuilds a node's trust from the roots it stored, oldest first: each link is
// verified again (N+1 signed by a threshold of N's root keys and of its own), so a file changed
// on disk is refused, not believed. The first is taken as it is: it was accepted by migration or
// pinned by an enrolment token when stored. A node that stores roots keeps the legacy keys for
// nothing: from the first root on, only the chain counts.
func TrustFromRoots(roots []Root) (Trust, error) {
	if len(roots) == 0 {
		return Trust{}, fmt.Errorf("no roots")
	}
	if err := roots[0].Validate(); err != nil {
		return Trust{}, err
	}
	if err := verifyEnvelope(roots[0], roots[0].Envelope()); err != nil {
		return Trust{}, fmt.Errorf("root v%d: %w", roots[0].Version, err)
	}
	t := Trust{roots: []Root{roots[0]}}
	for _, r := range roots[1:] {
		next, err := t.Advance(r)
		if err != nil {
			return Trust{}, err
		}
		t = next
	}
	return t, nil
}

// PinnedTrust is the trust of a node enrolled with a token naming root r's version and
// fingerprint: r is taken when its fingerprint is the token's and a threshold of its own root
// keys signed it.
func PinnedTrust(r Root, fingerprint string) (Trust, error) {
	if err := r.Validate(); err != nil {
		return Trust{}, err
	}
	if r.Fingerprint() != fingerprint {
		return Trust{}, fmt.Errorf("root v%d has fingerprint %s, not the %s the enrolment token names", r.Version, r.Fingerprint(), fingerprint)
	}
	if err := verifyEnvelope(r, r.Envelope()); err != nil {
		return Trust{}, fmt.Errorf("root v%d: %w", r.Version, err)
	}
	return Trust{roots: []Root{r}}, nil
}

// Root is the newest root accepted; ok is false before the first.
func (t Trust) Root() (r Root, ok bool) {
	if len(t.roots) == 0 {
		return Root{}, false
	}
	return t.roots[len(t.roots)-1], true
}

// Version is the newest root's version, 0 before the first (what a heartbeat's trust_root says).
func (t Trust) Version() uint64 {
	if r, ok := t.Root(); ok {
		return r.Version
	}
	return 0
}

// Roots are the roots accepted, oldest first (the caller must not change them).
func (t Trust) Roots() []Root { return t.roots }

// Advance accepts next as the following root: version N+1 signed by a threshold of N's root
// keys and a threshold of its own. A node holding no root accepts version 1 once (the
// migration from host.json's keys), when a threshold of its own root keys and at least one key
// the node already trusts signed it. A version that is not the next is refused by name: going
// back is never possible, and skipping one is walking the chain instead.
func (t Trust) Advance(next Root) (Trust, error) {
	if err := next.Validate(); err != nil {
		return t, err
	}
	cur, ok := t.Root()
	want := cur.Version + 1
	if next.Version < want {
		return t, fmt.Errorf("root v%d refused: this node holds root v%d and never goes back a version", next.Version, cur.Version)
	}
	if next.Version > want {
		return t, fmt.Errorf("root v%d refused: this node holds root v%d and takes v%d first", next.Version, cur.Version, want)
	}
	env := next.Envelope()
	if !ok {
		if err := verifyEnvelope(next, env); err != nil {
			return t, fmt.Errorf("root v1 refused: %w", err)
		}
		if !t.legacySigned(env) {
			return t, fmt.Errorf("root v1 refused: %w: none of its signatures is by a key in this node's trusted_keys or trusted_target_keys, so it cannot replace them", ErrKeyNotTrusted)
		}
		return Trust{roots: []Root{next}}, nil
	}
	if err := verifyEnvelope(cur, env); err != nil {
		return t, fmt.Errorf("root v%d refused: by root v%d's root keys: %w", next.Version, cur.Version, err)
	}
	if err := verifyEnvelope(next, env); err != nil {
		return t, fmt.Errorf("root v%d refused: by its own root keys: %w", next.Version, err)
	}
	roots := append(append(make([]Root, 0, len(t.roots)+1), t.roots...), next)
	return Trust{roots: roots}, nil
}

// legacySigned reports whether one of env's signatures is by a host.json key.
func (t Trust) legacySigned(env Envelope) bool {
	for _, keys := range t.legacy {
		for _, pub := range keys {
			for _, sg := range env.Signatures {
				if sg.KeyID == KeyID(pub) && verifyOne(pub, env.Text, sg) {
					return true
				}
			}
		}
	}
	return false
}

// Verify checks env's signatures against its role: a threshold of the role's keys in the
// newest root (one host.json key before any root) must have signed. It also refuses a document
// of a role with a max_ttl whose expiry lies further than that from now. It does not judge
// expiry itself (ExpiredAt): an expired target is accepted and kept in force, not acted on. A
// signature by a key a root removed from the role is named: `signed by key 82912897… which root
// v4 removed from releases`.
func (t Trust) Verify(env Envelope, now time.Time) error {
	if !env.signed() {
		return fmt.Errorf("%s: %w", env.what(), ErrNotSigned)
	}
	r, ok := t.Root()
	if !ok {
		return t.verifyLegacy(env)
	}
	if err := verifyEnvelope(r, env); err != nil {
		if removed := t.removedBy(env); removed != "" {
			return &sentinelError{msg: env.what() + ": " + removed, is: []error{ErrKeyRemoved, ErrKeyNotTrusted}}
		}
		return fmt.Errorf("%s: %w", env.what(), err)
	}
	if max := r.MaxTTL(env.Role); max > 0 && !env.Expires.IsZero() && env.Expires.Sub(now) > max {
		return fmt.Errorf("%s: %w: it expires %s, more than root v%d's max_ttl of %s for %s from now",
			env.what(), ErrTooFarAhead, env.Expires.UTC().Format(time.RFC3339), r.Version, max, env.Role)
	}
	return nil
}

// verifyLegacy is Verify before any root: one signature by a host.json key of the role.
func (t Trust) verifyLegacy(env Envelope) error {
	keys := t.legacy[env.Role]
	for _, sg := range env.Signatures {
		for _, pub := range keys {
			if sg.KeyID != KeyID(pub) {
				continue
			}
			if !verifyOne(pub, env.Text, sg) {
				return fmt.Errorf("%s: %w (key %s)", env.what(), ErrSignatureInvalid, sg.KeyID)
			}
			return nil
		}
	}
	what := "trusted_keys"
	if env.Role == RoleTargets {
		what = "trusted target keys (trusted_target_keys, else trusted_keys)"
	}
	return fmt.Errorf("%s: %w: key_id %q is not among the %d %s", env.what(), ErrKeyNotTrusted, ShortKeyID(env.Signatures[0].KeyID), len(keys), what)
}

// verifyEnvelope checks that a threshold of r's keys for env's role signed env. A signature by
// a key outside the role is ignored; one by a key of the role that does not verify is refused.
func verifyEnvelope(r Root, env Envelope) error {
	if len(env.Signatures) == 0 {
		return ErrNotSigned
	}
	rk := r.Roles[env.Role]
	good, outside := 0, []string{}
	for _, sg := range env.Signatures {
		if !r.HasKey(env.Role, sg.KeyID) {
			outside = append(outside, ShortKeyID(sg.KeyID))
			continue
		}
		if !verifyOne(r.PublicKey(sg.KeyID), env.Text, sg) {
			return fmt.Errorf("%w (key %s)", ErrSignatureInvalid, ShortKeyID(sg.KeyID))
		}
		good++
	}
	if good >= rk.Threshold {
		return nil
	}
	if good == 0 {
		return fmt.Errorf("%w: signed by key %s, which root v%d does not list for %s", ErrKeyNotTrusted, strings.Join(outside, ", "), r.Version, env.Role)
	}
	return fmt.Errorf("%w: %d of root v%d's %s keys must sign it; %d did", ErrBelowThreshold, rk.Threshold, r.Version, env.Role, good)
}

// removedBy names the root that removed one of env's signing keys from its role, newest root
// first: `signed by key 82912897… which root v4 removed from releases`; "" when none did.
func (t Trust) removedBy(env Envelope) string {
	cur, _ := t.Root()
	for _, sg := range env.Signatures {
		if cur.HasKey(env.Role, sg.KeyID) {
			continue
		}
		for i := len(t.roots) - 1; i > 0; i-- {
			if !t.roots[i].HasKey(env.Role, sg.KeyID) && t.roots[i-1].HasKey(env.Role, sg.KeyID) {
				return fmt.Sprintf("signed by key %s which root v%d removed from %s", ShortKeyID(sg.KeyID), t.roots[i].Version, env.Role)
			}
		}
	}
	return ""
}

// ExpiredSince reports when the newest root expired, if it has by now: the node then keeps
// running and reconciling what it has, says `trust expired since T`, and takes no new target
// until a fresher root reaches it. Before any root, trust does not expire.
func (t Trust) ExpiredSince(now time.Time) (time.Time, bool) {
	r, ok := t.Root()
	if !ok {
		return time.Time{}, false
	}
	at := r.ExpiresAt()
	return at, !now.Before(at)
}

// TrustExpiredLine is how every reader says it: `trust expired since 2026-12-02T12:00:00Z`.
func TrustExpiredLine(since time.Time) string {
	return "trust expired since " + since.UTC().Format(time.RFC3339)
}
