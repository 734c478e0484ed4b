package link

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// machineParts adds to hb what issue 12 reports: a profile, an inventory with the most disks,
// and the most drifted resources, each saying as much as it may.
func machineParts(hb wire.Heartbeat) wire.Heartbeat {
	at := time.Date(2026, 11, 29, 7, 12, 3, 0, time.UTC)
	hb.Profile = &wire.Profile{Arch: "amd64", OS: "linux", OSID: "debian", OSVersion: "12", Kernel: "6.1.0-28-amd64",
		Systemd: wire.SystemdPresent, SystemdError: "/run/systemd/system does not exist: systemd is not PID 1", PackageManager: "apt",
		ContainerRuntimes: []wire.RuntimeProbe{
			{Name: "docker", Path: "/usr/bin/docker", Version: "28.2.2", Error: strings.Repeat("d", wire.MaxProbeErrorBytes)},
			{Name: "podman", Path: "/usr/bin/podman", Version: "5.0.2", Working: true}},
		ContainerRuntime: "podman", DetectedAt: at}
	hb.Inventory = &wire.Inventory{Hostname: "web-01", MachineID: "3d1219c7c4c5404aaa1f6d2a48adfda4", CPUs: 8, MemoryBytes: 16 << 30,
		Owned: wire.OwnedCount{Total: 200, ByType: map[string]int{wire.KindFile: 150, wire.KindService: 50}, AppliedAt: &at}}
	for i := 0; i < wire.MaxDisks; i++ {
		hb.Inventory.Disks = append(hb.Inventory.Disks, wire.Disk{Path: fmt.Sprintf("/disk%d/%s", i, strings.Repeat("p", 200)), TotalBytes: 1 << 40, FreeBytes: 1 << 39})
	}
	for i := 0; i < wire.MaxDrifted; i++ {
		hb.Drift = append(hb.Drift, wire.Drifted{Type: wire.KindFile, ID: fmt.Sprintf("/etc/app/%02d.conf", i),
			What: strings.Repeat("w", wire.MaxDriftWhatBytes), At: at.Add(time.Duration(i) * time.Minute)})
	}
	return hb
}

func TestFitHeartbeatWithProfileInventoryAndDriftStillFitsAndCutsTheSameWay(t *testing.T) {
	in := machineParts(hugeHeartbeat())
	fitsEachBoundKeepingIdentity(t, in)
	if len(in.Drift) != wire.MaxDrifted || len(in.Drift[0].What) != wire.MaxDriftWhatBytes || len(in.Inventory.Disks) != wire.MaxDisks ||
		in.Profile.ContainerRuntimes[0].Error == "" {
		t.Fatal("FitHeartbeat changed the caller's heartbeat")
	}
}

// Drift goes first, then the inventory's disks, before anything older rules cut; the profile
// and inventory go only after everything else.
func TestFitHeartbeatCutsDriftFirstThenDisksAndTheMachineLast(t *testing.T) {
	base := hugeHeartbeat()
	base.LastReconcile.Error, base.Refused.Error, base.Fetch.Error = "e", "r", "f"
	for i := range base.Rollbacks {
		base.Rollbacks[i].Output = strings.Repeat("o", 2000)
		base.Rollbacks[i].Reason = "why"
	}
	in := machineParts(base)
	untouched := func(out wire.Heartbeat) bool {
		return len(out.Rollbacks) == 5 && len(out.Rollbacks[0].Output) == 2000
	}
	size := func(hb wire.Heartbeat) int { hb.Truncated = true; return len(hb.Marshal()) }

	// Room for all but a few bytes: drift whats are cut to 64 bytes, all 20 stay.
	out := fitParsed(t, in, len(in.Marshal())-10)
	if len(out.Drift) != wire.MaxDrifted || len(out.Drift[0].What) > 64 || len(out.Inventory.Disks) != wire.MaxDisks || !untouched(out) {
		t.Errorf("a little over: %d drifted (what %d bytes), %d disks", len(out.Drift), len(out.Drift[0].What), len(out.Inventory.Disks))
	}
	// Room for the heartbeat without drift: every drifted resource goes, newest last, nothing else.
	noDrift := in
	noDrift.Drift = nil
	out = fitParsed(t, in, size(noDrift)+40)
	if len(out.Drift) > 1 || len(out.Inventory.Disks) != wire.MaxDisks || !untouched(out) {
		t.Errorf("without drift: %d drifted, %d disks", len(out.Drift), len(out.Inventory.Disks))
	}
	if len(out.Drift) == 1 && out.Drift[0].ID != in.Drift[len(in.Drift)-1].ID {
		t.Errorf("the newest drifted resource should stay longest, kept %s", out.Drift[0].ID)
	}
	// Room for one disk: the first (/) stays, the rollbacks are not touched yet.
	oneDisk := noDrift
	inv := *in.Inventory
	inv.Disks = inv.Disks[:1]
	oneDisk.Inventory = &inv
	out = fitParsed(t, in, size(oneDisk))
	if len(out.Drift) != 0 || len(out.Inventory.Disks) != 1 || out.Inventory.Disks[0].Path != in.Inventory.Disks[0].Path || !untouched(out) {
		t.Errorf("one disk: %d drifted, disks %+v, rollbacks untouched %v", len(out.Drift), out.Inventory.Disks, untouched(out))
	}
	// Room for the identity, target and the machine only: every older rule has cut, and the
	// profile and inventory are still there.
	machine := wire.Heartbeat{Node: in.Node, State: in.State, Running: in.Running, StandingAsideFor: in.StandingAsideFor,
		KnownGood: in.KnownGood, DeclarationRevision: in.DeclarationRevision, UptimeS: in.UptimeS, SentAt: in.SentAt,
		LastReconcile: &wire.LastReconcile{At: in.LastReconcile.At, Trigger: in.LastReconcile.Trigger, DurationMS: in.LastReconcile.DurationMS},
		Profile:       in.Profile, Inventory: &wire.Inventory{Hostname: inv.Hostname, MachineID: inv.MachineID, CPUs: inv.CPUs, MemoryBytes: inv.MemoryBytes, Owned: inv.Owned}}
	out = fitParsed(t, in, size(machine))
	if out.Profile == nil || out.Inventory == nil || len(out.Rollbacks) != 0 || out.Refused != nil || out.Fetch != nil || len(out.Staged) != 0 || out.Target != "" {
		t.Errorf("the machine should outlast the rest: %+v", out)
	}
	if out.Profile != nil && out.Profile.ContainerRuntimes[0].Error == "" {
		t.Errorf("the profile's errors went before they had to")
	}
}
