package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/novox/mesh-host/host/profile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// machineProbe is what `profile` reads: the real detection, or fixtures in tests.
type machineProbe struct {
	detect func(ctx context.Context, root string) wire.Profile
	take   func(ctx context.Context, root string) wire.Inventory
}

func profileCmd(args []string, stdout, stderr io.Writer) int {
	return profileWith(args, stdout, stderr, os.Getenv, machineProbe{detect: profile.Detect, take: profile.Take})
}

// profileDoc is `profile --json`: the heartbeat's two objects, the inventory without owned
// (what the host owns is the running host's to say: `mesh-host owned`).
type profileDoc struct {
	Profile   wire.Profile      `json:"profile"`
	Inventory inventoryNotOwned `json:"inventory"`
}

type inventoryNotOwned struct {
	Hostname    string      `json:"hostname"`
	MachineID   string      `json:"machine_id"`
	CPUs        int         `json:"cpus"`
	MemoryBytes uint64      `json:"memory_bytes"`
	Disks       []wire.Disk `json:"disks"`
}

func profileWith(args []string, stdout, stderr io.Writer, getenv func(string) string, m machineProbe) int {
	fs := prog.NewFlagSet("profile", "Detect what this machine can do (its profile: architecture, OS, systemd, package manager,\ncontainer runtimes that answer) and what it is (its inventory: hostname, machine-id, CPUs,\nmemory, disks), as the host reports them in its heartbeat. Runs the probes now (a container\nruntime's `info` may take a few seconds); changes nothing and needs no root: the root's disk is\nreported when there is one. What the host owns: `mesh-host owned`.\nExit 0, 1 interrupted, 2 refused (a --root or MESH_HOST_ROOT that is not there).")
	asJSON := fs.Bool("json", false, "print {\"profile\": …, \"inventory\": …} as JSON")
	rootFlag := fs.String("root", "", "the root whose disk is reported besides /'s (MESH_HOST_ROOT; default "+rollback.DefaultRoot+" when it is there)")
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	root, err := profileRoot(*rootFlag, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host profile: %v\n", err)
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	p := m.detect(ctx, root).Bounded()
	inv := m.take(ctx, root).Bounded()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "profile: interrupted")
		return 1
	}
	doc := profileDoc{Profile: p, Inventory: inventoryNotOwned{
		Hostname: inv.Hostname, MachineID: inv.MachineID, CPUs: inv.CPUs, MemoryBytes: inv.MemoryBytes, Disks: inv.Disks}}
	if doc.Profile.ContainerRuntimes == nil {
		doc.Profile.ContainerRuntimes = []wire.RuntimeProbe{}
	}
	if doc.Inventory.Disks == nil {
		doc.Inventory.Disks = []wire.Disk{}
	}
	if *asJSON {
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			fmt.Fprintf(stderr, "profile: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	writeProfile(stdout, doc)
	return 0
}

// profileRoot is the root whose disk the profile reports: the one named (--root, else
// MESH_HOST_ROOT), which must be there, else the default where there is one, else none ("").
// The profile describes the machine; a root only adds its disk.
func profileRoot(flag string, getenv func(string) string) (string, error) {
	root := flag
	if root == "" {
		root = getenv(rollback.EnvRoot)
	}
	if root != "" {
		return root, rollback.CheckRoot(root)
	}
	if rollback.CheckRoot(rollback.DefaultRoot) != nil {
		return "", nil
	}
	return rollback.DefaultRoot, nil
}

// writeProfile prints one `key value` line per fact, values aligned; every text from the
// machine made printable (an os-release or a runtime's error could hold escape sequences).
func writeProfile(w io.Writer, d profileDoc) {
	type kv struct{ k, v string }
	p, inv := d.Profile, d.Inventory
	or := func(s, none string) string {
		if s == "" {
			return none
		}
		return text.Printable(s)
	}
	systemd := p.Systemd
	if p.SystemdVersion != "" {
		systemd += " (" + text.Printable(p.SystemdVersion) + ")"
	}
	if p.SystemdError != "" {
		systemd += ": " + text.Printable(p.SystemdError)
	}
	lines := []kv{
		{"arch", or(p.Arch, "unknown")},
		{"platform", or(p.Platform, "unknown")},
		{"os", or(p.OS, "unknown")},
		{"os_id", or(p.OSID, "unknown")},
		{"os_version", or(p.OSVersion, "unknown")},
		{"kernel", or(p.Kernel, "unknown")},
		{"systemd", systemd},
		{"package_manager", or(p.PackageManager, "none")},
		{"container_runtime", or(p.ContainerRuntime, "none working")},
	}
	if len(p.ContainerRuntimes) == 0 {
		lines = append(lines, kv{"runtime", "none found on PATH"})
	}
	for _, r := range p.ContainerRuntimes {
		v := text.Printable(r.Name)
		if r.Version != "" {
			v += " " + text.Printable(r.Version)
		}
		v += " at " + text.Printable(r.Path)
		if r.Working {
			v += ": working"
		} else {
			v += ": not working: " + or(r.Error, "no reason given")
		}
		lines = append(lines, kv{"runtime", v})
	}
	lines = append(lines,
		kv{"detected_at", p.DetectedAt.UTC().Format(time.RFC3339)},
		kv{"hostname", or(inv.Hostname, "unknown")},
		kv{"machine_id", or(inv.MachineID, "none")},
		kv{"cpus", strconv.Itoa(inv.CPUs)},
		kv{"memory", bytesIEC(inv.MemoryBytes)},
	)
	for _, dk := range inv.Disks {
		lines = append(lines, kv{"disk", fmt.Sprintf("%s %s free of %s", text.Printable(dk.Path), bytesIEC(dk.FreeBytes), bytesIEC(dk.TotalBytes))})
	}
	width := 0
	for _, l := range lines {
		width = max(width, len(l.k))
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-*s  %s\n", width, l.k, l.v)
	}
	io.WriteString(w, b.String())
}

// bytesIEC writes n in the largest binary unit that keeps it at or above 1, to one decimal.
func bytesIEC(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}
