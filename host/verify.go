package host

import (
	"strconv"
	"time"

	"github.com/novox/mesh-host/wire"
)

// The host verifies every signed document with the trust it holds now (Host.trustNow): the
// chain of roots it walked, or host.json's keys before the first. These adapters are the one
// place a document meets it.

// single is a document's one signature as the envelope lists it (none when unsigned).
func single(keyID, sig string) []wire.Signature {
	if keyID == "" && sig == "" {
		return nil
	}
	return []wire.Signature{{KeyID: keyID, Signature: sig}}
}

// verifyTarget checks t, stored under key, against trust at now.
func verifyTarget(t wire.Target, key string, trust wire.Trust, now time.Time) error {
	if err := t.Validate(); err != nil {
		return err
	}
	return trust.Verify(wire.Envelope{Kind: wire.KindTarget, Name: key, Role: wire.RoleTargets,
		Text: t.SigningText(key), Signatures: single(t.KeyID, t.Signature), Expires: t.ExpiresAt()}, now)
}

// checkWindow checks w, stored under key, against trust at now.
func checkWindow(w wire.Window, key string, trust wire.Trust, now time.Time) error {
	if err := w.Validate(); err != nil {
		return err
	}
	return trust.Verify(wire.Envelope{Kind: wire.KindWindow, Name: key, Role: wire.RoleTargets,
		Text: w.SigningText(key), Signatures: single(w.KeyID, w.Signature), Expires: w.ExpiresAt()}, now)
}

// verifyWithdrawals checks the withdrawal list against trust at now.
func verifyWithdrawals(w wire.Withdrawals, trust wire.Trust, now time.Time) error {
	if err := w.Validate(); err != nil {
		return err
	}
	return trust.Verify(wire.Envelope{Kind: wire.KindWithdrawals, Name: "seq " + strconv.FormatUint(w.Seq, 10), Role: wire.RoleTargets,
		Text: w.SigningText(), Signatures: single(w.KeyID, w.Signature)}, now)
}
