package host

import (
	"sync"

	"github.com/novox/mesh-host/wire"
)

// machineReport is what the reconciles found on the machine, for the heartbeat: what the host
// owns and the resources the drift check found changed (the last wire.MaxDrifted).
//
// It also keeps the profile last detected (host/machine.go): detection runs commands, so it runs
// at the start and on the drift timer, and every heartbeat reads what it found.
type machineReport struct {
	mu      sync.Mutex
	owned   wire.OwnedCount
	drifted []wire.Drifted
	profile *wire.Profile   // nil until the first detection ends
	inv     *wire.Inventory // taken with the profile; Disks and Owned are read per heartbeat
}

// setApplied is called after each reconcile with what the host owns and what drifted in it.
func (m *machineReport) setApplied(owned wire.OwnedCount, drifted []wire.Drifted) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.owned = owned
	m.drifted = append(m.drifted, drifted...)
	if over := len(m.drifted) - wire.MaxDrifted; over > 0 {
		m.drifted = append([]wire.Drifted(nil), m.drifted[over:]...)
	}
}

// applied returns copies of what setApplied kept.
func (m *machineReport) applied() (wire.OwnedCount, []wire.Drifted) {
	m.mu.Lock()
	defer m.mu.Unlock()
	byType := make(map[string]int, len(m.owned.ByType))
	for k, v := range m.owned.ByType {
		byType[k] = v
	}
	owned := m.owned
	owned.ByType = byType
	return owned, append([]wire.Drifted(nil), m.drifted...)
}
