package wire

import (
	"strings"
	"time"
	"unicode/utf8"
)

// What a host reports about its machine in every heartbeat (docs/wire.md, "Profile and
// inventory"): detected on the machine, never assumed from configuration, and bounded. The
// texts come from the machine (os-release, a runtime's output), so each is cut to its bound
// before it is sent: Bounded on each type does it.

// Profile is what this machine can be asked to do. A capability is present only when it was
// found working: an installed package is not a capability.
type Profile struct {
	Arch string `json:"arch"` // the kernel's machine, as GOARCH names it (amd64, arm64); the kernel's own word when Go has none
	OS   string `json:"os"`   // "linux"
	// Platform is the machine's platform as manifests name it (linux/arm/v7: the arm variant is
	// the kernel's word), set by hosts since manifest schema 4; ProfilePlatform reads it, or
	// os/arch from a host that did not send it.
	Platform       string `json:"platform,omitempty"`
	OSID           string `json:"os_id"`           // os-release ID (debian), "" when unknown
	OSVersion      string `json:"os_version"`      // os-release VERSION_ID (12), "" when unknown
	Kernel         string `json:"kernel"`          // uname release
	Systemd        string `json:"systemd"`         // SystemdRunning, SystemdPresent or SystemdAbsent
	SystemdVersion string `json:"systemd_version"` // the manager's Version property, when running
	// SystemdError says why systemd is not running (no /run/systemd/system, or its bus did
	// not answer); "" when running. Bounded by MaxProbeErrorBytes.
	SystemdError   string `json:"systemd_error,omitempty"`
	PackageManager string `json:"package_manager"` // "apt" (apt-get and dpkg work), "dpkg", or ""
	// ContainerRuntimes are the runtimes looked for (docker, podman) and found on PATH, each
	// with whether it answered; ContainerRuntime names the first that did, "" for none.
	ContainerRuntimes []RuntimeProbe `json:"container_runtimes"`
	ContainerRuntime  string         `json:"container_runtime"`
	DetectedAt        time.Time      `json:"detected_at"`
}

// systemd as the profile sees it.
const (
	SystemdRunning = "running" // /run/systemd/system exists (systemd is PID 1) and its bus answers
	SystemdPresent = "present" // installed, not running (or its bus does not answer)
	SystemdAbsent  = "absent"
)

// RuntimeProbe is one container runtime looked for: found on PATH, and whether it ran (its
// `info` answered, which needs its engine: an installed client alone is not working); Error
// says why not, bounded by MaxProbeErrorBytes.
type RuntimeProbe struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	Working bool   `json:"working"`
	Error   string `json:"error,omitempty"`
}

// Bounds of the texts in a profile and an inventory, in bytes, and of their lists.
const (
	MaxProbeErrorBytes = 256  // RuntimeProbe.Error, Profile.SystemdError
	MaxHostnameBytes   = 255  // Inventory.Hostname
	MaxReleaseBytes    = 64   // os_version, kernel, systemd_version, a runtime's version
	MaxWordBytes       = 64   // arch, os, os_id, systemd, package_manager, runtime names, machine_id, drift type
	MaxPathBytes       = 1024 // a runtime's path, a disk's path, a drifted resource's id
	MaxRuntimes        = 4    // Profile.ContainerRuntimes
)

// Inventory is what this machine is and holds.
type Inventory struct {
	Hostname  string `json:"hostname"`
	MachineID string `json:"machine_id"` // /etc/machine-id, "" when absent
	// CPUs are the processors /proc/cpuinfo lists (the machine's, whatever this process may
	// use); runtime.NumCPU when it cannot be read.
	CPUs        int        `json:"cpus"`
	MemoryBytes uint64     `json:"memory_bytes"` // /proc/meminfo MemTotal
	Disks       []Disk     `json:"disks"`        // the filesystems holding / and the host's root, at most MaxDisks
	Owned       OwnedCount `json:"owned"`
}

// MaxDisks bounds Inventory.Disks.
const MaxDisks = 4

// Disk is one filesystem's size and the space free to an unprivileged writer.
type Disk struct {
	Path       string `json:"path"`
	TotalBytes uint64 `json:"total_bytes"`
	FreeBytes  uint64 `json:"free_bytes"`
}

// OwnedCount is what the host applied and owns, counted by type (`mesh-host owned` lists it),
// and when it last applied a declaration completely. ByType holds resource kinds only, so it
// has at most one entry per kind.
type OwnedCount struct {
	Total     int            `json:"total"`
	ByType    map[string]int `json:"by_type"`
	AppliedAt *time.Time     `json:"applied_at"`
}

// Drifted is one resource the drift check found changed on the machine and put back (or could
// not): What says how it differed, bounded by MaxDriftWhatBytes.
type Drifted struct {
	Type     string    `json:"type"`
	ID       string    `json:"id"`
	What     string    `json:"what"`
	At       time.Time `json:"at"`
	Restored bool      `json:"restored"`
}

// Bounds of a heartbeat's drift report: the last MaxDrifted drifted resources are named, each
// What cut to MaxDriftWhatBytes.
const (
	MaxDrifted        = 20
	MaxDriftWhatBytes = 256
)

// Bounded returns p with every text cut to its bound and at most MaxRuntimes runtimes.
func (p Profile) Bounded() Profile {
	p.Arch = CutText(p.Arch, MaxWordBytes)
	p.OS = CutText(p.OS, MaxWordBytes)
	p.Platform = CutText(p.Platform, MaxWordBytes)
	p.OSID = CutText(p.OSID, MaxWordBytes)
	p.OSVersion = CutText(p.OSVersion, MaxReleaseBytes)
	p.Kernel = CutText(p.Kernel, MaxReleaseBytes)
	p.Systemd = CutText(p.Systemd, MaxWordBytes)
	p.SystemdVersion = CutText(p.SystemdVersion, MaxReleaseBytes)
	p.SystemdError = CutText(p.SystemdError, MaxProbeErrorBytes)
	p.PackageManager = CutText(p.PackageManager, MaxWordBytes)
	p.ContainerRuntime = CutText(p.ContainerRuntime, MaxWordBytes)
	rts := p.ContainerRuntimes
	if len(rts) > MaxRuntimes {
		rts = rts[:MaxRuntimes]
	}
	p.ContainerRuntimes = make([]RuntimeProbe, len(rts))
	for i, r := range rts {
		p.ContainerRuntimes[i] = RuntimeProbe{
			Name: CutText(r.Name, MaxWordBytes), Path: CutText(r.Path, MaxPathBytes),
			Version: CutText(r.Version, MaxReleaseBytes), Working: r.Working, Error: CutText(r.Error, MaxProbeErrorBytes),
		}
	}
	return p
}

// Bounded returns i with every text cut to its bound, at most MaxDisks disks, and only
// resource kinds counted by type (a copy: i's map is left as it was).
func (i Inventory) Bounded() Inventory {
	i.Hostname = CutText(i.Hostname, MaxHostnameBytes)
	i.MachineID = CutText(i.MachineID, MaxWordBytes)
	disks := i.Disks
	if len(disks) > MaxDisks {
		disks = disks[:MaxDisks]
	}
	i.Disks = make([]Disk, len(disks))
	for k, d := range disks {
		d.Path = CutText(d.Path, MaxPathBytes)
		i.Disks[k] = d
	}
	byType := make(map[string]int, len(i.Owned.ByType))
	for _, k := range kinds {
		if n, ok := i.Owned.ByType[k]; ok {
			byType[k] = n
		}
	}
	i.Owned.ByType = byType
	return i
}

// BoundDrift returns the last MaxDrifted of d, each with its texts cut to their bounds; nil
// for none.
func BoundDrift(d []Drifted) []Drifted {
	if len(d) == 0 {
		return nil
	}
	if over := len(d) - MaxDrifted; over > 0 {
		d = d[over:]
	}
	out := make([]Drifted, len(d))
	for i, x := range d {
		x.Type = CutText(x.Type, MaxWordBytes)
		x.ID = CutText(x.ID, MaxPathBytes)
		x.What = CutText(x.What, MaxDriftWhatBytes)
		out[i] = x
	}
	return out
}

// CutText returns s as valid UTF-8 in at most max bytes: whole when it fits, else cut on a
// character boundary with "…" as the last character (so a cut text never reads as whole).
func CutText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	const mark = "…"
	if max < len(mark) {
		return ""
	}
	keep := max - len(mark)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + mark
}
