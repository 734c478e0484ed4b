package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// fakeMachine answers as a machine with systemd running, apt, a docker client without engine
// and a working podman; it records the root it was asked about.
func fakeMachine(roots *[]string) machineProbe {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	return machineProbe{
		detect: func(_ context.Context, root string) wire.Profile {
			*roots = append(*roots, root)
			return wire.Profile{Arch: "arm64", OS: "linux", OSID: "debian\x1b[31m", OSVersion: "12", Kernel: "6.1.0-28-arm64",
				Systemd: wire.SystemdRunning, SystemdVersion: "252", PackageManager: "apt", ContainerRuntime: "podman",
				ContainerRuntimes: []wire.RuntimeProbe{
					{Name: "docker", Path: "/usr/bin/docker", Version: "28.2.2", Error: "`docker info` failed (exit status 1): Cannot connect to the Docker daemon"},
					{Name: "podman", Path: "/usr/bin/podman", Version: "5.0.2", Working: true}},
				DetectedAt: at}
		},
		take: func(_ context.Context, root string) wire.Inventory {
			*roots = append(*roots, root)
			return wire.Inventory{Hostname: "web-01", MachineID: "3d1219c7c4c5404aaa1f6d2a48adfda4", CPUs: 8, MemoryBytes: 16 << 30,
				Disks: []wire.Disk{{Path: "/", TotalBytes: 100 << 30, FreeBytes: 40 << 30}}, Owned: wire.OwnedCount{Total: 9}}
		},
	}
}

func TestProfilePrintsOneAlignedLinePerFact(t *testing.T) {
	var roots []string
	var out, errOut bytes.Buffer
	if code := profileWith([]string{"--root", t.TempDir()}, &out, &errOut, func(string) string { return "" }, fakeMachine(&roots)); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	col := -1
	for _, l := range lines {
		k, _, _ := strings.Cut(l, " ")
		i := len(k) + len(l[len(k):]) - len(strings.TrimLeft(l[len(k):], " "))
		if col == -1 {
			col = i
		}
		if i != col {
			t.Errorf("value of %q starts at column %d, not %d:\n%s", k, i, col, out.String())
		}
	}
	for _, want := range []string{
		"arch               arm64\n",
		"os_id              debian\\x1b[31m\n", // the machine's words made printable
		"systemd            running (252)\n",
		"container_runtime  podman\n",
		"runtime            docker 28.2.2 at /usr/bin/docker: not working: `docker info` failed (exit status 1): Cannot connect to the Docker daemon\n",
		"runtime            podman 5.0.2 at /usr/bin/podman: working\n",
		"memory             16.0 GiB\n",
		"disk               / 40.0 GiB free of 100.0 GiB\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
}

// The profile describes the machine, which needs no root: with none given and none at the
// default place, it reports the machine and the disk of /; a root that is there has its disk
// asked about too; a root named by --root or MESH_HOST_ROOT that is not there is refused, naming it.
func TestProfileNeedsNoRootButRefusesOneNamedThatIsNotThere(t *testing.T) {
	present := t.TempDir()
	missing := filepath.Join(t.TempDir(), "nowhere")
	defaultRoot := ""
	if _, err := os.Stat(rollback.DefaultRoot); err == nil {
		defaultRoot = rollback.DefaultRoot
	}
	for _, tc := range []struct {
		name      string
		args      []string
		env       string // MESH_HOST_ROOT
		code      int
		root      string // the root asked about; "" for none
		errPrefix string
	}{
		{name: "none given", code: 0, root: defaultRoot},
		{name: "flag", args: []string{"--root", present}, code: 0, root: present},
		{name: "variable", env: present, code: 0, root: present},
		{name: "flag not there", args: []string{"--root", missing}, code: 2,
			errPrefix: "mesh-host profile: no mesh-host root at " + missing + " (--root or MESH_HOST_ROOT)"},
		{name: "variable not there", env: missing, code: 2,
			errPrefix: "mesh-host profile: no mesh-host root at " + missing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var roots []string
			var out, errOut bytes.Buffer
			env := func(k string) string {
				if k == rollback.EnvRoot {
					return tc.env
				}
				return ""
			}
			code := profileWith(tc.args, &out, &errOut, env, fakeMachine(&roots))
			if code != tc.code || !strings.HasPrefix(errOut.String(), tc.errPrefix) {
				t.Fatalf("exit %d, stderr %q; want exit %d, %q", code, errOut.String(), tc.code, tc.errPrefix)
			}
			if code != 0 {
				if len(roots) != 0 {
					t.Errorf("detected with roots %q after refusing", roots)
				}
				return
			}
			if len(roots) != 2 || roots[0] != tc.root || !strings.HasPrefix(out.String(), "arch ") {
				t.Errorf("asked about roots %q, want %q; printed:\n%s", roots, tc.root, out.String())
			}
		})
	}
}

func TestProfileJSONIsTheHeartbeatsProfileAndInventory(t *testing.T) {
	var roots []string
	var out, errOut bytes.Buffer
	fromEnv, given := t.TempDir(), t.TempDir()
	env := func(k string) string {
		if k == "MESH_HOST_ROOT" {
			return fromEnv
		}
		return ""
	}
	if code := profileWith([]string{"--json", "--root", given}, &out, &errOut, env, fakeMachine(&roots)); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(doc) != 2 || doc["profile"] == nil || doc["inventory"] == nil {
		t.Fatalf("want {profile, inventory}:\n%s", out.String())
	}
	if string(doc["profile"]["arch"]) != `"arm64"` || string(doc["inventory"]["hostname"]) != `"web-01"` || string(doc["profile"]["container_runtime"]) != `"podman"` {
		t.Errorf("%s", out.String())
	}
	// What the host owns is the running host's to say (`mesh-host owned`), not a zero here.
	if _, ok := doc["inventory"]["owned"]; ok {
		t.Errorf("inventory.owned printed by profile:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "\n  \"profile\": {\n    \"arch\"") {
		t.Errorf("not indented:\n%s", out.String())
	}
	if len(roots) != 2 || roots[0] != given {
		t.Errorf("asked about roots %q; --root wins over MESH_HOST_ROOT", roots)
	}
	roots = nil
	profileWith([]string{"--json"}, &bytes.Buffer{}, &bytes.Buffer{}, env, fakeMachine(&roots))
	if len(roots) != 2 || roots[0] != fromEnv {
		t.Errorf("asked about roots %q; want MESH_HOST_ROOT's", roots)
	}
}

// The built binary on this machine: exit 0, JSON whose facts this test can check itself.
func TestProfileBinaryOnThisMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-host")
	}
	bin := filepath.Join(t.TempDir(), "mesh-host")
	build := exec.Command("go", "build", "-o", bin, "github.com/novox/mesh-host/host/cmd/mesh-host")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := t.TempDir()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "profile", "--json", "--root", root)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("mesh-host profile --json: %v\n%s", err, errOut.String())
	}
	var doc struct {
		Profile   wire.Profile   `json:"profile"`
		Inventory wire.Inventory `json:"inventory"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	host, _ := os.Hostname()
	if doc.Profile.Arch != runtime.GOARCH || doc.Inventory.Hostname != host || len(doc.Inventory.Disks) == 0 {
		t.Errorf("arch %q hostname %q disks %v; want %q, %q, at least one:\n%s", doc.Profile.Arch, doc.Inventory.Hostname, doc.Inventory.Disks, runtime.GOARCH, host, out.String())
	}
	out.Reset()
	cmd = exec.CommandContext(ctx, bin, "profile", "--root", root)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil || !strings.HasPrefix(out.String(), "arch ") {
		t.Fatalf("mesh-host profile: %v\n%s%s", err, out.String(), errOut.String())
	}
	// No root at all: neither --root nor MESH_HOST_ROOT, and (on a machine that is not a node)
	// none at the default place. The machine is described all the same.
	out.Reset()
	errOut.Reset()
	cmd = exec.CommandContext(ctx, bin, "profile")
	cmd.Env = withoutEnv(os.Environ(), rollback.EnvRoot)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil || !strings.HasPrefix(out.String(), "arch ") || !strings.Contains(out.String(), "\ndisk ") {
		t.Fatalf("mesh-host profile with no root: %v\nstdout:\n%sstderr:\n%s", err, out.String(), errOut.String())
	}
}

// withoutEnv is env without the variable name.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
