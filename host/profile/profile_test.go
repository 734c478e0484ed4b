package profile

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// fixture is a machine made of files in a temp dir: os-release, machine-id, meminfo, cpuinfo, a
// systemd runtime directory that exists only when asked, and a PATH holding only the commands
// a test writes (real shell scripts, run as real processes).
type fixture struct {
	dir, bin string
	o        options
}

var detectedAt = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, bin: filepath.Join(dir, "bin")}
	if err := os.Mkdir(f.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	f.o = options{
		osRelease:   []string{filepath.Join(dir, "etc-os-release"), filepath.Join(dir, "usr-lib-os-release")},
		machineID:   filepath.Join(dir, "machine-id"),
		meminfo:     filepath.Join(dir, "meminfo"),
		cpuinfo:     filepath.Join(dir, "cpuinfo"),
		systemdDir:  filepath.Join(dir, "run-systemd-system"),
		path:        f.bin,
		rootFS:      dir,
		bus:         func(context.Context) (string, error) { return "", errors.New("no bus in a fixture") },
		uname:       func() (string, string, error) { return "x86_64", "6.1.0-test", nil },
		goarch:      "amd64",
		hostname:    func() (string, error) { return "fixture-host", nil },
		now:         func() time.Time { return detectedAt },
		infoTimeout: 5 * time.Second,
	}
	return f
}

func (f *fixture) file(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// command writes an executable shell script called name onto the fixture's PATH.
func (f *fixture) command(t *testing.T, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.bin, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestOSReleaseIsReadFromTheFirstFileThatExists(t *testing.T) {
	for _, tc := range []struct {
		name       string
		etc, usr   string // "" = absent
		id, versID string
	}{
		{"quoted values are unquoted", "NAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_ID=\"12\"\n", "", "debian", "12"},
		{"single quotes too", "ID='ubuntu'\nVERSION_ID='24.04'\n", "", "ubuntu", "24.04"},
		{"falls back to /usr/lib/os-release", "", "ID=fedora\nVERSION_ID=40\n", "fedora", "40"},
		{"etc wins over usr/lib", "ID=alpine\n", "ID=fedora\nVERSION_ID=40\n", "alpine", ""},
		{"no os-release reads as unknown", "", "", "", ""},
		{"comments and junk lines are skipped", "# ID=wrong\nnot a pair\nID=arch\n", "", "arch", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.etc != "" {
				f.file(t, f.o.osRelease[0], tc.etc)
			}
			if tc.usr != "" {
				f.file(t, f.o.osRelease[1], tc.usr)
			}
			id, v := osRelease(f.o.osRelease)
			if id != tc.id || v != tc.versID {
				t.Fatalf("got %q %q, want %q %q", id, v, tc.id, tc.versID)
			}
		})
	}
}

func TestTheKernelsMachineIsNamedAsGoNamesIt(t *testing.T) {
	for machine, want := range map[string]string{
		"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "armv6l": "arm", "i686": "386",
		"ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64", "loongarch64": "loong64",
		"sparc64": "sparc64", // Go has no port: the kernel's word, which no GOARCH matches
	} {
		if got := goarch(machine); got != want {
			t.Errorf("goarch(%q) = %q, want %q", machine, got, want)
		}
	}
}

// The platform is the build the host takes: what it is built for, arm's variant the kernel's
// word — so a 32-bit host on a 64-bit kernel stays linux/arm/v7, as delivery picks.
func TestThePlatformIsTheHostsBuildWithArmsVariantFromTheKernel(t *testing.T) {
	for _, tc := range []struct {
		goarch, machine string
		unameFails      bool
		want            string
	}{
		{"amd64", "x86_64", false, "linux/amd64"},
		{"arm64", "aarch64", false, "linux/arm64"},
		{"arm", "armv7l", false, "linux/arm/v7"},
		{"arm", "armv6l", false, "linux/arm/v6"},
		{"arm", "aarch64", false, "linux/arm/v7"}, // a 32-bit host on a 64-bit kernel (Raspberry Pi OS)
		{"arm", "armv8l", false, "linux/arm/v7"},
		{"arm", "", true, "linux/arm/v7"}, // no word from the kernel: Go's default GOARM
		{"amd64", "", true, "linux/amd64"},
	} {
		t.Run(tc.goarch+" on "+tc.machine, func(t *testing.T) {
			f := newFixture(t)
			f.o.goarch = tc.goarch
			f.o.uname = func() (string, string, error) {
				if tc.unameFails {
					return "", "", errors.New("uname: not permitted")
				}
				return tc.machine, "6.1.0-test", nil
			}
			p := detect(context.Background(), f.o)
			if p.Platform != tc.want {
				t.Fatalf("platform %q, want %q", p.Platform, tc.want)
			}
			if got := wire.ProfilePlatform(p).String(); got != tc.want {
				t.Errorf("the release side reads %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSystemdIsRunningOnlyWhenBootedByItAndItsBusAnswers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		booted    bool   // /run/systemd/system exists
		installed bool   // systemctl on PATH
		bus       error  // what the bus probe says
		state     string // want
		why       string // a word of systemd_error; "" = empty
	}{
		{"booted and answering is running", true, true, nil, wire.SystemdRunning, ""},
		{"booted but the bus is silent is only present", true, true, errors.New("connection refused"), wire.SystemdPresent, "connection refused"},
		{"installed, not PID 1, is present", false, true, nil, wire.SystemdPresent, "not PID 1"},
		{"neither is absent", false, false, nil, wire.SystemdAbsent, "not PID 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.booted {
				if err := os.Mkdir(f.o.systemdDir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.installed {
				f.command(t, "systemctl", "exit 0")
			}
			asked := false
			f.o.bus = func(context.Context) (string, error) { asked = true; return "252.30-1~deb12u2", tc.bus }
			p := detect(context.Background(), f.o)
			if p.Systemd != tc.state || (tc.why == "") != (p.SystemdError == "") || !strings.Contains(p.SystemdError, tc.why) {
				t.Fatalf("systemd %q (%q), want %q with %q", p.Systemd, p.SystemdError, tc.state, tc.why)
			}
			if tc.state == wire.SystemdRunning && p.SystemdVersion != "252.30-1~deb12u2" {
				t.Errorf("version %q", p.SystemdVersion)
			}
			if !tc.booted && asked {
				t.Error("the bus was asked although systemd is not PID 1")
			}
		})
	}
}

func TestThePackageManagerIsOneThatRuns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		commands map[string]string
		want     string
	}{
		{"apt-get and dpkg both run", map[string]string{"dpkg": "exit 0", "apt-get": "exit 0"}, "apt"},
		{"dpkg alone", map[string]string{"dpkg": "exit 0"}, "dpkg"},
		{"apt-get without a working dpkg is none", map[string]string{"dpkg": "exit 2", "apt-get": "exit 0"}, ""},
		{"apt-get that fails leaves dpkg", map[string]string{"dpkg": "exit 0", "apt-get": "exit 1"}, "dpkg"},
		{"nothing on PATH", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for name, script := range tc.commands {
				f.command(t, name, script)
			}
			if got := detect(context.Background(), f.o).PackageManager; got != tc.want {
				t.Fatalf("package manager %q, want %q", got, tc.want)
			}
		})
	}
}

// dockerNoEngine is what a docker client does with no engine: it knows its version, and info
// fails on stderr.
const dockerNoEngine = `case "$1" in
--version) echo "Docker version 28.2.2, build e6534b4";;
info) echo "Client: Docker Engine"; echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1;;
esac`

const podmanWorking = `case "$1" in
--version) echo "podman version 5.0.2";;
info) echo "host: ok";;
esac`

func TestAContainerRuntimeIsWorkingOnlyWhenItsInfoAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		commands map[string]string
		timeout  time.Duration
		want     map[string]string // runtime → "working" or a word of its error
		first    string            // ContainerRuntime
	}{
		{"a client with no engine is not working", map[string]string{"docker": dockerNoEngine},
			0, map[string]string{"docker": "Cannot connect to the Docker daemon"}, ""},
		{"the first working one is chosen", map[string]string{"docker": dockerNoEngine, "podman": podmanWorking},
			0, map[string]string{"docker": "exit status 1", "podman": "working"}, "podman"},
		{"docker is preferred when both work", map[string]string{"docker": strings.ReplaceAll(podmanWorking, "podman version", "Docker version"), "podman": podmanWorking},
			0, map[string]string{"docker": "working", "podman": "working"}, "docker"},
		{"an info that hangs is cut at its timeout", map[string]string{"podman": strings.Replace(podmanWorking, `echo "host: ok"`, "exec sleep 30", 1)},
			300 * time.Millisecond, map[string]string{"podman": "did not answer within 300ms"}, ""},
		{"a version that fails is not working", map[string]string{"podman": "echo 'podman: broken install' >&2; exit 3"},
			0, map[string]string{"podman": "`podman --version` failed (exit status 3): podman: broken install"}, ""},
		{"a runtime not on PATH is not listed", nil, 0, map[string]string{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			for name, script := range tc.commands {
				f.command(t, name, script)
			}
			if tc.timeout > 0 {
				f.o.infoTimeout = tc.timeout
			}
			p := detect(context.Background(), f.o)
			if len(p.ContainerRuntimes) != len(tc.want) {
				t.Fatalf("runtimes %+v, want %v", p.ContainerRuntimes, tc.want)
			}
			for _, r := range p.ContainerRuntimes {
				want := tc.want[r.Name]
				if want == "working" {
					if !r.Working || r.Error != "" {
						t.Errorf("%s: %+v, want working", r.Name, r)
					}
				} else if r.Working || !strings.Contains(r.Error, want) {
					t.Errorf("%s: %+v, want not working: …%s…", r.Name, r, want)
				}
				if r.Path != filepath.Join(f.bin, r.Name) {
					t.Errorf("%s path %q", r.Name, r.Path)
				}
			}
			if p.ContainerRuntime != tc.first {
				t.Errorf("container_runtime %q, want %q", p.ContainerRuntime, tc.first)
			}
		})
	}
}

func TestARuntimesVersionIsTheWordAfterVersion(t *testing.T) {
	for in, want := range map[string]string{
		"Docker version 28.2.2, build e6534b4\n": "28.2.2",
		"podman version 5.0.2\n":                 "5.0.2",
		"nerdctl 1.7\n":                          "nerdctl 1.7",
		"":                                       "",
	} {
		if got := versionOf([]byte(in)); got != want {
			t.Errorf("versionOf(%q) = %q, want %q", in, got, want)
		}
	}
}

// What a machine says is bounded however much it says: a runtime's error, its version line,
// os-release values, the hostname.
func TestEveryTextFromTheMachineIsBounded(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("ä", 5000) // two bytes a character: a cut must not split one
	f.command(t, "docker", `case "$1" in
--version) echo "Docker version `+strings.Repeat("9", 500)+`";;
info) head -c 200000 /dev/zero | tr '\0' x >&2; echo " the engine is gone" >&2; exit 1;;
esac`)
	f.file(t, f.o.osRelease[0], "ID="+long+"\nVERSION_ID="+long+"\n")
	f.o.uname = func() (string, string, error) { return long, long, nil }
	f.o.hostname = func() (string, error) { return long, nil }
	f.file(t, f.o.machineID, long)
	p := detect(context.Background(), f.o)
	inv := take(context.Background(), f.dir, f.o)
	for what, tc := range map[string]struct {
		s   string
		max int
	}{
		"arch": {p.Arch, wire.MaxWordBytes}, "os_id": {p.OSID, wire.MaxWordBytes}, "os_version": {p.OSVersion, wire.MaxReleaseBytes},
		"kernel": {p.Kernel, wire.MaxReleaseBytes}, "hostname": {inv.Hostname, wire.MaxHostnameBytes}, "machine_id": {inv.MachineID, wire.MaxWordBytes},
		"runtime version": {p.ContainerRuntimes[0].Version, wire.MaxReleaseBytes},
	} {
		if len(tc.s) > tc.max || len(tc.s) < tc.max/2 || !strings.HasSuffix(tc.s, "…") || !utf8Valid(tc.s) {
			t.Errorf("%s: %d bytes %q; want at most %d, cut and marked", what, len(tc.s), tc.s, tc.max)
		}
	}
	// The error keeps the runtime's last words, where it says what went wrong.
	if e := p.ContainerRuntimes[0].Error; len(e) > wire.MaxProbeErrorBytes || !strings.HasSuffix(e, "the engine is gone") || !strings.HasPrefix(e, "`docker info` failed (exit status 1): …xxx") {
		t.Errorf("runtime error %q", e)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func TestInventoryIsReadFromTheMachinesFiles(t *testing.T) {
	f := newFixture(t)
	f.file(t, f.o.machineID, "0123456789abcdef0123456789abcdef\n")
	f.file(t, f.o.meminfo, "MemTotal:       16318508 kB\nMemFree:         1234 kB\n")
	f.file(t, f.o.cpuinfo, "processor\t: 0\nmodel name\t: x\n\nprocessor\t: 1\n\nprocessor\t: 2\n")
	inv := take(context.Background(), f.dir, f.o)
	if inv.Hostname != "fixture-host" || inv.MachineID != "0123456789abcdef0123456789abcdef" || inv.CPUs != 3 || inv.MemoryBytes != 16318508*1024 {
		t.Fatalf("%+v", inv)
	}
	// rootFS and the root are one filesystem here: it is reported once.
	if len(inv.Disks) != 1 || inv.Disks[0].Path != f.dir || inv.Disks[0].TotalBytes == 0 || inv.Disks[0].FreeBytes > inv.Disks[0].TotalBytes {
		t.Fatalf("disks %+v", inv.Disks)
	}
	if inv.Owned.Total != 0 || inv.Owned.ByType == nil {
		t.Errorf("owned %+v: left for the host, by_type empty not null", inv.Owned)
	}
}

func TestInventoryLeavesOutWhatIsNotThere(t *testing.T) {
	f := newFixture(t) // no machine-id, meminfo or cpuinfo
	f.o.hostname = func() (string, error) { return "", errors.New("no hostname") }
	inv := take(context.Background(), filepath.Join(f.dir, "no-such-root"), f.o)
	if inv.Hostname != "" || inv.MachineID != "" || inv.MemoryBytes != 0 {
		t.Errorf("%+v", inv)
	}
	if inv.CPUs != runtime.NumCPU() {
		t.Errorf("cpus %d: without /proc/cpuinfo, runtime.NumCPU (%d)", inv.CPUs, runtime.NumCPU())
	}
	if len(inv.Disks) != 1 || inv.Disks[0].Path != f.dir {
		t.Errorf("disks %+v: the root that does not exist is left out", inv.Disks)
	}
}

func TestDetectedAtIsWhenDetectionRan(t *testing.T) {
	f := newFixture(t)
	if p := detect(context.Background(), f.o); !p.DetectedAt.Equal(detectedAt) || p.OS != runtime.GOOS || p.Arch != "amd64" || p.Kernel != "6.1.0-test" {
		t.Fatalf("%+v", p)
	}
}

// On this machine, checked against what can be read independently of the code under test.
func TestDetectOnThisMachine(t *testing.T) {
	ctx := context.Background()
	p := Detect(ctx, t.TempDir())
	if p.Arch != runtime.GOARCH {
		t.Errorf("arch %q, want %q (this test binary's)", p.Arch, runtime.GOARCH)
	}
	inv := Take(ctx, t.TempDir())
	if b, err := os.ReadFile("/etc/machine-id"); err == nil {
		if inv.MachineID != strings.TrimSpace(string(b)) {
			t.Errorf("machine_id %q, want %q", inv.MachineID, strings.TrimSpace(string(b)))
		}
	} else if inv.MachineID != "" {
		t.Errorf("machine_id %q with no /etc/machine-id", inv.MachineID)
	}
	if d := Disks(ctx, t.TempDir()); len(d) == 0 || d[0].Path != "/" || d[0].TotalBytes == 0 {
		t.Errorf("Disks: %+v; want /'s first", d)
	}
	if h, _ := os.Hostname(); inv.Hostname != h {
		t.Errorf("hostname %q, want %q", inv.Hostname, h)
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Log("no docker on PATH: its probe is not checked here")
		return
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	infoErr := exec.CommandContext(ictx, docker, "info").Run()
	for _, r := range p.ContainerRuntimes {
		if r.Name != "docker" {
			continue
		}
		if infoErr != nil && (r.Working || r.Error == "" || len(r.Error) > wire.MaxProbeErrorBytes) {
			t.Errorf("docker info fails here (%v) but the probe says %+v", infoErr, r)
		}
		if infoErr == nil && !r.Working {
			t.Errorf("docker info answers here but the probe says %+v", r)
		}
		return
	}
	t.Errorf("docker is on PATH at %s but not in the profile: %+v", docker, p.ContainerRuntimes)
}
