package targets

import (
	"crypto/ed25519"
	"time"

	"github.com/novox/mesh-host/wire"
)

// SignPlan numbers p after prev (the seq of the plan it replaces, or 0), sets its expiry TTL
// from now and signs it with every key of the signer (decision 0047): a plan is the targets
// role's, like a target.
func (s Signer) SignPlan(p *wire.Plan, prev uint64) error {
	if err := s.Check(); err != nil {
		return err
	}
	now := s.now()
	p.Seq = wire.NextPlanSeq(prev, now)
	p.Expires = now.Add(s.TTL).UTC().Truncate(time.Second).Format(time.RFC3339)
	if err := p.Sign(s.Key); err != nil {
		return err
	}
	for _, k := range s.More {
		if err := p.AddSignature(k); err != nil {
			return err
		}
	}
	return nil
}

// SignedPlan reports whether p verifies with the signer's key.
func (s Signer) SignedPlan(p wire.Plan) bool {
	return len(s.Key) == ed25519.PrivateKeySize && p.Verify(wire.LegacyTrust(nil, []ed25519.PublicKey{s.Public()}), s.now()) == nil
}

// PlanDue reports whether p should be signed again: less than half of TTL of its validity is
// left (or it has expired).
func (s Signer) PlanDue(p wire.Plan) bool {
	return p.ExpiresAt().Sub(s.now()) < s.TTL/2
}
