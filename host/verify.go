package host

import (
	"time"

	"github.com/novox/mesh-host/wire"
)

// The host verifies every signed document with the trust it holds now (Host.trustNow): the
// chain of roots it walked, or host.json's keys before the first. Each document's own Verify
// goes through the one envelope (decision 0045); these name the calls the host makes.

// verifyTarget checks t, stored under key, against trust at now.
func verifyTarget(t wire.Target, key string, trust wire.Trust, now time.Time) error {
	return t.Verify(key, trust, now)
}

// checkWindow checks w, stored under key, against trust at now.
func checkWindow(w wire.Window, key string, trust wire.Trust, now time.Time) error {
	return w.Verify(key, trust, now)
}

// verifyWithdrawals checks the withdrawal list against trust at now.
func verifyWithdrawals(w wire.Withdrawals, trust wire.Trust, now time.Time) error {
	return w.Verify(trust, now)
}
