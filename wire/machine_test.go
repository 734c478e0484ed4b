package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func machineHeartbeat() Heartbeat {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return Heartbeat{Node: "web-01", State: StateRunning, Running: "v1.4.0", SentAt: at,
		Profile: &Profile{Arch: "amd64", OS: "linux", OSID: "debian", OSVersion: "12", Kernel: "6.1.0-28-amd64",
			Systemd: SystemdRunning, SystemdVersion: "252.30-1~deb12u2", PackageManager: "apt",
			ContainerRuntimes: []RuntimeProbe{{Name: "docker", Path: "/usr/bin/docker", Version: "28.2.2", Error: "`docker info` failed (exit status 1): Cannot connect to the Docker daemon"},
				{Name: "podman", Path: "/usr/bin/podman", Version: "5.0.2", Working: true}},
			ContainerRuntime: "podman", DetectedAt: at},
		Inventory: &Inventory{Hostname: "web-01.example.net", MachineID: "3d1219c7c4c5404aaa1f6d2a48adfda4", CPUs: 8, MemoryBytes: 16 << 30,
			Disks: []Disk{{Path: "/", TotalBytes: 100 << 30, FreeBytes: 40 << 30}, {Path: "/var/lib/mesh-host", TotalBytes: 500 << 30, FreeBytes: 300 << 30}},
			Owned: OwnedCount{Total: 3, ByType: map[string]int{KindFile: 2, KindService: 1}, AppliedAt: &at}},
		Drift: []Drifted{{Type: KindFile, ID: "/etc/app.conf", What: "content differs", At: at, Restored: true}},
	}
}

func TestHeartbeatCarriesProfileInventoryAndDrift(t *testing.T) {
	in := machineHeartbeat()
	b := in.Marshal()
	var keys struct {
		Profile   map[string]json.RawMessage `json:"profile"`
		Inventory map[string]json.RawMessage `json:"inventory"`
		Drift     []map[string]json.RawMessage
	}
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"arch", "os", "os_id", "os_version", "kernel", "systemd", "systemd_version", "package_manager", "container_runtimes", "container_runtime", "detected_at"} {
		if _, ok := keys.Profile[k]; !ok {
			t.Errorf("profile has no %q", k)
		}
	}
	for _, k := range []string{"hostname", "machine_id", "cpus", "memory_bytes", "disks", "owned"} {
		if _, ok := keys.Inventory[k]; !ok {
			t.Errorf("inventory has no %q", k)
		}
	}
	for _, k := range []string{"type", "id", "what", "at", "restored"} {
		if _, ok := keys.Drift[0][k]; !ok {
			t.Errorf("drift[0] has no %q", k)
		}
	}
	out, err := ParseHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Profile.ContainerRuntime != "podman" || len(out.Profile.ContainerRuntimes) != 2 || out.Inventory.Owned.ByType[KindFile] != 2 ||
		len(out.Inventory.Disks) != 2 || len(out.Drift) != 1 || !out.Drift[0].Restored {
		t.Fatalf("round trip: %+v", out)
	}
}

// A heartbeat from a host before issue 12 has none of the three keys; it still reads, with
// nothing in their place. One from this host with nothing detected yet leaves them out.
func TestHeartbeatWithoutProfileInventoryOrDriftStillReads(t *testing.T) {
	old := `{"schema":1,"node":"n1","state":"running","running":"v1.0.0","standing_aside_for":"","known_good":"v1.0.0","staged":[],"target":"","declaration_revision":0,"last_reconcile":null,"rollbacks":[],"uptime_s":5,"sent_at":"2026-11-29T12:00:00Z"}`
	hb, err := ParseHeartbeat([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if hb.Profile != nil || hb.Inventory != nil || hb.Drift != nil {
		t.Fatalf("%+v", hb)
	}
	b := Heartbeat{Node: "n1", State: StateRunning}.Marshal()
	for _, k := range []string{`"profile"`, `"inventory"`, `"drift"`} {
		if strings.Contains(string(b), k) {
			t.Errorf("%s written with nothing to say: %s", k, b)
		}
	}
}

// Empty lists in a profile or inventory are written as [] (and by_type as {}), not null, and
// the caller's heartbeat is left as it was.
func TestHeartbeatWritesEmptyMachineListsAsEmpty(t *testing.T) {
	in := Heartbeat{Node: "n1", State: StateRunning, Profile: &Profile{}, Inventory: &Inventory{}}
	b := string(in.Marshal())
	for _, want := range []string{`"container_runtimes":[]`, `"disks":[]`, `"by_type":{}`} {
		if !strings.Contains(b, want) {
			t.Errorf("no %s in %s", want, b)
		}
	}
	if in.Profile.ContainerRuntimes != nil || in.Inventory.Disks != nil || in.Inventory.Owned.ByType != nil {
		t.Error("Marshal changed the caller's heartbeat")
	}
}

func TestBoundedCutsEveryMachineText(t *testing.T) {
	long := strings.Repeat("é", 3000)
	p := Profile{Arch: long, OS: long, OSID: long, OSVersion: long, Kernel: long, Systemd: long, SystemdVersion: long,
		SystemdError: long, PackageManager: long, ContainerRuntime: long}
	for i := 0; i < 10; i++ {
		p.ContainerRuntimes = append(p.ContainerRuntimes, RuntimeProbe{Name: long, Path: long, Version: long, Error: long})
	}
	p = p.Bounded()
	inv := Inventory{Hostname: long, MachineID: long, Disks: make([]Disk, 10),
		Owned: OwnedCount{Total: 99, ByType: map[string]int{KindFile: 1, "made-up": 5, long: 7}}}
	for i := range inv.Disks {
		inv.Disks[i].Path = long
	}
	inv = inv.Bounded()
	var drift []Drifted
	for i := 0; i < 50; i++ {
		drift = append(drift, Drifted{Type: long, ID: long, What: long, At: time.Unix(int64(i), 0)})
	}
	drift = BoundDrift(drift)
	for _, c := range []struct {
		what string
		s    string
		max  int
	}{
		{"arch", p.Arch, MaxWordBytes}, {"os", p.OS, MaxWordBytes}, {"os_id", p.OSID, MaxWordBytes},
		{"os_version", p.OSVersion, MaxReleaseBytes}, {"kernel", p.Kernel, MaxReleaseBytes}, {"systemd", p.Systemd, MaxWordBytes},
		{"systemd_version", p.SystemdVersion, MaxReleaseBytes}, {"systemd_error", p.SystemdError, MaxProbeErrorBytes},
		{"package_manager", p.PackageManager, MaxWordBytes}, {"container_runtime", p.ContainerRuntime, MaxWordBytes},
		{"runtime name", p.ContainerRuntimes[0].Name, MaxWordBytes}, {"runtime path", p.ContainerRuntimes[0].Path, MaxPathBytes},
		{"runtime version", p.ContainerRuntimes[0].Version, MaxReleaseBytes}, {"runtime error", p.ContainerRuntimes[0].Error, MaxProbeErrorBytes},
		{"hostname", inv.Hostname, MaxHostnameBytes}, {"machine_id", inv.MachineID, MaxWordBytes}, {"disk path", inv.Disks[0].Path, MaxPathBytes},
		{"drift type", drift[0].Type, MaxWordBytes}, {"drift id", drift[0].ID, MaxPathBytes}, {"drift what", drift[0].What, MaxDriftWhatBytes},
	} {
		if len(c.s) > c.max || len(c.s) < c.max-4 || !utf8.ValidString(c.s) || !strings.HasSuffix(c.s, "…") {
			t.Errorf("%s: %d bytes, want at most %d, cut on a character and marked", c.what, len(c.s), c.max)
		}
	}
	if len(p.ContainerRuntimes) != MaxRuntimes || len(inv.Disks) != MaxDisks || len(drift) != MaxDrifted {
		t.Errorf("%d runtimes, %d disks, %d drifted; want at most %d, %d, %d", len(p.ContainerRuntimes), len(inv.Disks), len(drift), MaxRuntimes, MaxDisks, MaxDrifted)
	}
	if drift[0].At.Unix() != 30 {
		t.Errorf("drift keeps the last %d: first kept is #%d", MaxDrifted, drift[0].At.Unix())
	}
	if len(inv.Owned.ByType) != 1 || inv.Owned.ByType[KindFile] != 1 || inv.Owned.Total != 99 {
		t.Errorf("by_type %v (total %d): only resource kinds are counted by type", inv.Owned.ByType, inv.Owned.Total)
	}
}

func TestCutTextLeavesATextThatFitsAsItIs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"debian", 64, "debian"},
		{"abcdef", 6, "abcdef"},
		{"abcdefg", 6, "abc…"},
		{"abcdefg", 2, ""},
		{"a\xffb", 64, "a\uFFFDb"}, // invalid UTF-8 is made valid: JSON would do it anyway
	} {
		if got := CutText(tc.in, tc.max); got != tc.want {
			t.Errorf("CutText(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
