package host

import (
	"context"

	"github.com/novox/mesh-host/host/profile"
	"github.com/novox/mesh-host/wire"
)

// detectMachine detects what this machine can do and what it is, and keeps both for the
// heartbeats. Detection runs commands (a container runtime's `info` may take seconds), so it
// runs at the start and on each drift timer's reconcile, never per heartbeat. Hosts given one
// Options.Detector share its detection: they are on one machine.
func (h *Host) detectMachine(ctx context.Context) {
	p, err := h.detector.Detect(ctx)
	if err != nil {
		return // cut short by a stop: keep the last
	}
	inv := profile.Take(ctx, h.root)
	h.machine.setMachine(p, inv)
	h.log.Debug("detected the machine's profile", "arch", p.Arch, "systemd", p.Systemd,
		"package_manager", p.PackageManager, "container_runtime", p.ContainerRuntime)
}

// machineProfile is the profile last detected, detecting it first when none has been: for
// what needs it before the first heartbeat does (the container applier's choice of runtime).
func (h *Host) machineProfile(ctx context.Context) wire.Profile {
	if p := h.machine.profileNow(); p != nil {
		return *p
	}
	h.detectMachine(ctx)
	if p := h.machine.profileNow(); p != nil {
		return *p
	}
	return wire.Profile{} // cut short by a stop: nothing detected, so nothing claimed
}

// setMachine keeps p and inv as what the heartbeats carry.
func (m *machineReport) setMachine(p wire.Profile, inv wire.Inventory) {
	p, inv = p.Bounded(), inv.Bounded()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.profile, m.inv = &p, &inv
}

// profileNow returns a copy of the profile last detected, nil before the first detection ends.
func (m *machineReport) profileNow() *wire.Profile {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.profile == nil {
		return nil
	}
	p := *m.profile
	p.ContainerRuntimes = append([]wire.RuntimeProbe{}, p.ContainerRuntimes...)
	return &p
}

// inventory is what the machine is and holds for a heartbeat: what was taken with the profile,
// the disks read now, what the host owns, and what drifted. Before the first detection ends it
// is taken whole.
func (h *Host) inventory(ctx context.Context) (*wire.Inventory, []wire.Drifted) {
	h.machine.mu.Lock()
	kept := h.machine.inv
	h.machine.mu.Unlock()
	var inv wire.Inventory
	if kept == nil {
		inv = profile.Take(ctx, h.root)
	} else {
		inv = *kept
		inv.Disks = profile.Disks(ctx, h.root)
	}
	owned, drifted := h.machine.applied()
	inv.Owned = owned
	inv = inv.Bounded()
	return &inv, wire.BoundDrift(drifted)
}
