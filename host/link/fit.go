package link

import (
	"fmt"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// A heartbeat that is over the largest message the host may send is never dropped: a node that
// cannot say anything is silent, and silence means it is down. It is cut instead, by fixed
// steps in a fixed order (docs/wire.md, "Heartbeat size"), least useful first, until it fits.
// The identity — schema, node, state, running, standing_aside_for, known_good,
// declaration_revision, uptime_s, sent_at — is never cut, nor is the launcher (a rollout judges
// a node by it) but for its rollback reason. Drift and the inventory's disks go
// first (the next heartbeat says them again); the profile and inventory, which are small and
// bounded, go only after everything else.

// Sizes the steps cut texts to.
const (
	fitOutputBytes = 512 // rollbacks[].output, first
	fitReasonBytes = 256 // rollbacks[].reason
	fitErrorBytes  = 512 // last_reconcile.error, refused.error, fetch.error, first
	fitErrorLast   = 64  // the same, second
	fitDriftWhat   = 64  // drift[].what
)

// fitStep changes hb by one step and reports whether it may change more when applied again
// (steps that drop list entries drop one at a time, so as little as needed goes).
type fitStep func(hb *wire.Heartbeat) (again bool)

// fitSteps are the steps in the order docs/wire.md lists them.
func fitSteps() []fitStep {
	return []fitStep{
		cutDriftWhats, dropOldestDrift, dropLastDisk,
		func(hb *wire.Heartbeat) bool { // the command printed them, the journal has them
			if hb.Rescue != nil {
				hb.Rescue.NotAdopted, hb.Rescue.SetAside = nil, nil
			}
			return false
		},
		cutRollbackOutputs, emptyRollbackOutputs, cutRollbackReasons, dropOldestRollback,
		func(hb *wire.Heartbeat) bool { cutErrors(hb, fitErrorBytes); return false },
		func(hb *wire.Heartbeat) bool { cutErrors(hb, fitErrorLast); return false },
		dropOldestStaged,
		func(hb *wire.Heartbeat) bool { hb.Fetch = nil; return false },
		func(hb *wire.Heartbeat) bool { hb.Refused = nil; return false },
		emptyReconcileError,
		func(hb *wire.Heartbeat) bool { hb.Target = ""; return false },
		emptyProfileErrors,
		func(hb *wire.Heartbeat) bool { hb.Inventory = nil; return false },
		func(hb *wire.Heartbeat) bool { hb.Profile = nil; return false },
	}
}

// cutDriftWhats cuts each drifted resource's what to 64 bytes.
func cutDriftWhats(hb *wire.Heartbeat) bool {
	for i := range hb.Drift {
		hb.Drift[i].What = text.Cut(hb.Drift[i].What, fitDriftWhat)
	}
	return false
}

// dropOldestDrift drops the oldest drifted resource (the list is oldest first).
func dropOldestDrift(hb *wire.Heartbeat) bool {
	if len(hb.Drift) > 0 {
		hb.Drift = hb.Drift[1:]
	}
	return len(hb.Drift) > 0
}

// dropLastDisk drops the inventory's last disk.
func dropLastDisk(hb *wire.Heartbeat) bool {
	if hb.Inventory == nil || len(hb.Inventory.Disks) == 0 {
		return false
	}
	hb.Inventory.Disks = hb.Inventory.Disks[:len(hb.Inventory.Disks)-1]
	return len(hb.Inventory.Disks) > 0
}

// cutRollbackOutputs cuts each rollback's output to 512 bytes.
func cutRollbackOutputs(hb *wire.Heartbeat) bool {
	for i := range hb.Rollbacks {
		hb.Rollbacks[i].Output = text.Cut(hb.Rollbacks[i].Output, fitOutputBytes)
	}
	return false
}

// emptyRollbackOutputs empties each rollback's output.
func emptyRollbackOutputs(hb *wire.Heartbeat) bool {
	for i := range hb.Rollbacks {
		hb.Rollbacks[i].Output = ""
	}
	return false
}

// cutRollbackReasons cuts each rollback's reason, and the launcher's, to 256 bytes.
func cutRollbackReasons(hb *wire.Heartbeat) bool {
	for i := range hb.Rollbacks {
		hb.Rollbacks[i].Reason = text.Cut(hb.Rollbacks[i].Reason, fitReasonBytes)
	}
	if hb.Launcher != nil {
		hb.Launcher.RollbackReason = text.Cut(hb.Launcher.RollbackReason, fitReasonBytes)
	}
	return false
}

// dropOldestRollback drops the oldest rollback (the list is newest first).
func dropOldestRollback(hb *wire.Heartbeat) bool {
	if len(hb.Rollbacks) > 0 {
		hb.Rollbacks = hb.Rollbacks[:len(hb.Rollbacks)-1]
	}
	return len(hb.Rollbacks) > 0
}

// dropOldestStaged drops the oldest staged version (the list is newest first).
func dropOldestStaged(hb *wire.Heartbeat) bool {
	if len(hb.Staged) > 0 {
		hb.Staged = hb.Staged[:len(hb.Staged)-1]
	}
	return len(hb.Staged) > 0
}

// emptyReconcileError empties last_reconcile.error.
func emptyReconcileError(hb *wire.Heartbeat) bool {
	if hb.LastReconcile != nil {
		hb.LastReconcile.Error = ""
	}
	return false
}

// emptyProfileErrors empties the profile's errors: systemd's and each container runtime's.
func emptyProfileErrors(hb *wire.Heartbeat) bool {
	if hb.Profile != nil {
		hb.Profile.SystemdError = ""
		for i := range hb.Profile.ContainerRuntimes {
			hb.Profile.ContainerRuntimes[i].Error = ""
		}
	}
	return false
}

func cutErrors(hb *wire.Heartbeat, max int) {
	if hb.LastReconcile != nil {
		hb.LastReconcile.Error = text.CutMiddle(hb.LastReconcile.Error, max)
	}
	if hb.Refused != nil {
		hb.Refused.Error = text.CutMiddle(hb.Refused.Error, max)
	}
	if hb.Fetch != nil {
		hb.Fetch.Error = text.CutMiddle(hb.Fetch.Error, max)
	}
}

// FitHeartbeat returns hb's JSON in at most max bytes. A heartbeat that fits is sent as it is;
// one that does not gets "truncated": true and is cut by fitSteps until it fits. It fails only
// when even the identity is over max. max <= 0 means no limit is known.
func FitHeartbeat(hb wire.Heartbeat, max int) (b []byte, truncated bool, err error) {
	b = hb.Marshal()
	if max <= 0 || len(b) <= max {
		return b, false, nil
	}
	hb = copyHeartbeat(hb)
	hb.Truncated = true
	for _, step := range fitSteps() {
		for {
			again := step(&hb)
			if b = hb.Marshal(); len(b) <= max {
				return b, true, nil
			}
			if !again {
				break
			}
		}
	}
	return nil, true, fmt.Errorf("a heartbeat cut to its identity is still %d bytes, over the %d bytes the server accepts; raise the server's max_payload", len(b), max)
}

// copyHeartbeat copies what the steps change, so the caller's heartbeat is left as it was.
func copyHeartbeat(hb wire.Heartbeat) wire.Heartbeat {
	hb.Staged = append([]string(nil), hb.Staged...)
	hb.Rollbacks = append([]wire.Rollback(nil), hb.Rollbacks...)
	if hb.LastReconcile != nil {
		lr := *hb.LastReconcile
		hb.LastReconcile = &lr
	}
	if hb.Refused != nil {
		r := *hb.Refused
		hb.Refused = &r
	}
	if hb.Fetch != nil {
		f := *hb.Fetch
		hb.Fetch = &f
	}
	if hb.Launcher != nil {
		l := *hb.Launcher
		hb.Launcher = &l
	}
	if hb.Rescue != nil {
		r := *hb.Rescue
		hb.Rescue = &r
	}
	hb.Drift = append([]wire.Drifted(nil), hb.Drift...)
	if hb.Inventory != nil {
		inv := *hb.Inventory
		inv.Disks = append([]wire.Disk(nil), inv.Disks...)
		hb.Inventory = &inv
	}
	if hb.Profile != nil {
		p := *hb.Profile
		p.ContainerRuntimes = append([]wire.RuntimeProbe(nil), p.ContainerRuntimes...)
		hb.Profile = &p
	}
	return hb
}
