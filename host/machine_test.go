package host

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A running host's heartbeat, as the bus stored it, says what machine it runs on: detected, so
// it matches what this test reads for itself.
func TestHeartbeatCarriesTheMachinesProfileAndInventory(t *testing.T) {
	_, hbs, th := linkedHost(t)
	hb := meshtest.WaitHeartbeat(t, hbs, "a profile", func(hb wire.Heartbeat) bool { return hb.Profile != nil })
	if hb.Profile.Arch != runtime.GOARCH || hb.Profile.OS != runtime.GOOS || hb.Profile.DetectedAt.IsZero() {
		t.Errorf("profile %+v; want arch %s, os %s", hb.Profile, runtime.GOARCH, runtime.GOOS)
	}
	want, _ := os.Hostname()
	if hb.Inventory == nil || hb.Inventory.Hostname != want {
		t.Fatalf("inventory %+v; want hostname %q", hb.Inventory, want)
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && hb.Inventory.MachineID != strings.TrimSpace(string(b)) {
		t.Errorf("machine_id %q, want /etc/machine-id's %q", hb.Inventory.MachineID, strings.TrimSpace(string(b)))
	}
	if len(hb.Inventory.Disks) == 0 || hb.Inventory.CPUs < 1 || hb.Inventory.MemoryBytes == 0 {
		t.Errorf("inventory %+v: no disk, CPU or memory", hb.Inventory)
	}
	// The root's filesystem is among the disks (the first is /'s; the root is listed unless
	// it is on the same one).
	found := false
	for _, d := range hb.Inventory.Disks {
		found = found || d.Path == "/" || d.Path == th.root
	}
	if !found {
		t.Errorf("disks %+v: neither / nor the root %s", hb.Inventory.Disks, th.root)
	}
}

// What a reconcile hands the heartbeat (setApplied) is in the next heartbeat: what the host
// owns in inventory.owned, and what drifted, bounded.
func TestDriftAndOwnedFromAReconcileAppearInTheNextHeartbeat(t *testing.T) {
	_, hbs, th := linkedHost(t)
	meshtest.WaitHeartbeat(t, hbs, "the start reconcile", func(hb wire.Heartbeat) bool { return hb.LastReconcile != nil })
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	var drifted []wire.Drifted
	for i := 0; i < 30; i++ {
		drifted = append(drifted, wire.Drifted{Type: wire.KindFile, ID: "/srv/app/" + strings.Repeat("x", i),
			What: "content differs " + strings.Repeat("d", 1000), At: at.Add(time.Duration(i) * time.Second), Restored: true})
	}
	th.h.machine.setApplied(wire.OwnedCount{Total: 3, ByType: map[string]int{wire.KindFile: 2, wire.KindDirectory: 1}, AppliedAt: &at}, drifted)
	th.h.heartbeatSoon()
	hb := meshtest.WaitHeartbeat(t, hbs, "the drift", func(hb wire.Heartbeat) bool { return len(hb.Drift) > 0 })
	if len(hb.Drift) != wire.MaxDrifted || hb.Drift[len(hb.Drift)-1].ID != drifted[29].ID || hb.Drift[0].ID != drifted[30-wire.MaxDrifted].ID {
		t.Errorf("drift: %d entries from %q; want the last %d, oldest first", len(hb.Drift), hb.Drift[0].ID, wire.MaxDrifted)
	}
	for _, d := range hb.Drift {
		if len(d.What) > wire.MaxDriftWhatBytes || !strings.HasPrefix(d.What, "content differs") || !d.Restored {
			t.Fatalf("drifted %+v: what over %d bytes or lost", d, wire.MaxDriftWhatBytes)
		}
	}
	if o := hb.Inventory.Owned; o.Total != 3 || o.ByType[wire.KindFile] != 2 || o.ByType[wire.KindDirectory] != 1 || o.AppliedAt == nil || !o.AppliedAt.Equal(at) {
		t.Errorf("owned %+v", o)
	}
}

// Asked before any heartbeat, the profile is detected then and kept: what the container
// applier reads to choose a runtime.
func TestMachineProfileIsDetectedWhenFirstAsked(t *testing.T) {
	th := startHost(t, newRoot(t, "v1.0.0"), "n1", "") // no bus: no heartbeat loop detects
	ctx := t.Context()
	p := th.h.machineProfile(ctx)
	if p.Arch != runtime.GOARCH || th.h.machine.profileNow() == nil || !th.h.machine.profileNow().DetectedAt.Equal(p.DetectedAt) {
		t.Fatalf("profile %+v, kept %+v", p, th.h.machine.profileNow())
	}
}
