// Package profile detects what this machine can do (the profile) and what it is and holds (the
// inventory).
//
// Both are for the heartbeat and `mesh-host profile`. Everything is detected, never assumed (seed
// 003): a capability counts only when it was seen working — a container runtime whose client is
// installed but whose engine does not answer is not working, and systemd that is installed but not
// PID 1 is only present.
//
// Detect runs commands (a runtime's `info` can take seconds), so the host runs it at its start
// and on each drift timer, not per heartbeat. Take runs no command but reads /proc files the
// kernel builds on each read (/proc/cpuinfo costs ~0.2 ms here): the host takes it with the
// profile and reads only Disks per heartbeat.
package profile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"

	"github.com/novox/mesh-host/wire"
)

// Runtimes are the container runtimes looked for, in the order ContainerRuntime prefers them.
var runtimes = [...]string{"docker", "podman"}

// Timeouts of the probes: a runtime's `info` may need its engine to wake; `--version` and the
// bus should answer at once.
const (
	infoTimeout    = 5 * time.Second
	versionTimeout = 5 * time.Second
	busTimeout     = 3 * time.Second
)

// outputCap bounds what is kept of a probe's output: enough for a version line and the last
// words of an error, never a runaway command's whole output.
const outputCap = 64 << 10

// options are where detection looks. Tests point them at fixtures; Detect and Take use the
// machine's own.
type options struct {
	osRelease  []string // os-release files, first readable wins
	machineID  string
	meminfo    string
	cpuinfo    string
	systemdDir string // exists when systemd is PID 1 (sd_booted)
	path       string // PATH for looking up commands
	rootFS     string // the filesystem root whose disk is reported besides the host's root
	// bus asks systemd's manager for its version over the system bus.
	bus         func(ctx context.Context) (version string, err error)
	uname       func() (machine, release string, err error)
	goarch      string // what this host is built for (runtime.GOARCH)
	hostname    func() (string, error)
	now         func() time.Time
	infoTimeout time.Duration
}

func machineOptions() options {
	return options{
		osRelease:   []string{"/etc/os-release", "/usr/lib/os-release"},
		machineID:   "/etc/machine-id",
		meminfo:     "/proc/meminfo",
		cpuinfo:     "/proc/cpuinfo",
		systemdDir:  "/run/systemd/system",
		path:        os.Getenv("PATH"),
		rootFS:      "/",
		bus:         systemdBus,
		uname:       uname,
		goarch:      runtime.GOARCH,
		hostname:    os.Hostname,
		now:         time.Now,
		infoTimeout: infoTimeout,
	}
}

// Detect detects this machine's profile. It never fails: what cannot be detected reads as
// absent, with the reason where the profile has room for one. root is the host's root (unused
// today; the agreed signature keeps room for state kept there).
func Detect(ctx context.Context, root string) wire.Profile {
	return detect(ctx, machineOptions())
}

// Take reads this machine's inventory; Owned is left zero for the host to fill. root is the
// host's root, whose filesystem is reported besides /'s.
func Take(ctx context.Context, root string) wire.Inventory {
	return take(ctx, root, machineOptions())
}

func detect(ctx context.Context, o options) wire.Profile {
	p := wire.Profile{OS: runtime.GOOS}
	machine, release, err := o.uname()
	if err == nil {
		p.Arch, p.Kernel = goarch(machine), release
	}
	p.Platform = platform(o.goarch, machine)
	p.OSID, p.OSVersion = osRelease(o.osRelease)

	// The probes are independent and some wait on timeouts: run them side by side, so
	// detection takes as long as the slowest one.
	var wg sync.WaitGroup
	wg.Go(func() { p.Systemd, p.SystemdVersion, p.SystemdError = systemd(ctx, o) })
	wg.Go(func() { p.PackageManager = packageManager(ctx, o) })
	found := make([]*wire.RuntimeProbe, len(runtimes))
	for i, name := range runtimes {
		wg.Go(func() { found[i] = probeRuntime(ctx, o, name) })
	}
	wg.Wait()

	p.ContainerRuntimes = []wire.RuntimeProbe{}
	for _, r := range found {
		if r == nil {
			continue // not on PATH: not listed
		}
		p.ContainerRuntimes = append(p.ContainerRuntimes, *r)
		if r.Working && p.ContainerRuntime == "" {
			p.ContainerRuntime = r.Name
		}
	}
	p.DetectedAt = o.now().UTC()
	return p.Bounded()
}

// goarch names a kernel's machine (uname -m) as Go does; a machine Go has no name for is
// reported as the kernel says it, which no GOARCH matches.
func goarch(machine string) string {
	switch machine {
	case "x86_64", "amd64":
		return "amd64"
	case "i386", "i486", "i586", "i686":
		return "386"
	case "aarch64", "arm64", "aarch64_be":
		return "arm64"
	case "ppc64le":
		return "ppc64le"
	case "ppc64":
		return "ppc64"
	case "s390x":
		return "s390x"
	case "riscv64":
		return "riscv64"
	case "loongarch64":
		return "loong64"
	case "mips64":
		return "mips64"
	case "mips":
		return "mips"
	}
	if strings.HasPrefix(machine, "armv") || machine == "arm" {
		return "arm"
	}
	return machine
}

// platform is the build this host takes (wire.NodePlatform): the one it is built for, arm's
// variant the kernel's word (machine; "" when uname failed, read as v7). It is what the release
// side gates a rollout on, so it must be what delivery picks, not the kernel's architecture: a
// 32-bit host on an aarch64 kernel is linux/arm/v7. "" when it is not a platform a build could
// be named by (a GOARCH no manifest can name).
func platform(goarch, machine string) string {
	p := wire.NodePlatform(runtime.GOOS, goarch, machine)
	if _, err := wire.ParsePlatform(p.String()); err != nil {
		return ""
	}
	return p.String()
}

func uname() (machine, release string, err error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", "", err
	}
	return unix.ByteSliceToString(u.Machine[:]), unix.ByteSliceToString(u.Release[:]), nil
}

// osRelease reads ID and VERSION_ID from the first os-release file that can be read.
func osRelease(paths []string) (id, version string) {
	for _, p := range paths {
		b, err := readCapped(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
			if !ok {
				continue
			}
			switch k {
			case "ID":
				id = unquote(v)
			case "VERSION_ID":
				version = unquote(v)
			}
		}
		return id, version
	}
	return "", ""
}

// unquote reads an os-release value: shell-quoted with " or ', or bare.
func unquote(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
		q := v[0]
		v = v[1 : len(v)-1]
		if q == '"' { // only double quotes escape
			v = strings.NewReplacer(`\"`, `"`, `\\`, `\`, "\\`", "`", `\$`, `$`).Replace(v)
		}
	}
	return v
}

// systemd is running when systemd is PID 1 (its runtime directory exists) and its manager
// answers on the system bus; present when only installed (or its bus does not answer).
func systemd(ctx context.Context, o options) (state, version, why string) {
	installed := o.lookPath("systemctl") != "" || o.lookPath("systemd") != ""
	if fi, err := os.Stat(o.systemdDir); err != nil || !fi.IsDir() {
		why = o.systemdDir + " does not exist: systemd is not PID 1"
		if installed {
			return wire.SystemdPresent, "", why
		}
		return wire.SystemdAbsent, "", why
	}
	ctx, cancel := context.WithTimeout(ctx, busTimeout)
	defer cancel()
	v, err := o.bus(ctx)
	if err != nil {
		// systemd booted the machine but cannot be reached: present, not a capability.
		return wire.SystemdPresent, "", fmt.Sprintf("systemd's manager did not answer on the system bus: %v", err)
	}
	return wire.SystemdRunning, v, ""
}

// systemdBus asks the manager for its Version over the system bus. The connection is bound to
// ctx, so a bus that never answers ends with ctx.
func systemdBus(ctx context.Context) (string, error) {
	conn, err := sddbus.NewSystemConnectionContext(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	type answer struct {
		v   string
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := conn.GetManagerProperty("Version")
		ch <- answer{v, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			return "", a.err
		}
		// The property comes in GVariant text form: a quoted string.
		return strings.Trim(a.v, `"`), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// packageManager is "apt" when apt-get and dpkg both run, "dpkg" when only dpkg does, else "".
func packageManager(ctx context.Context, o options) string {
	runs := func(name string) bool {
		p := o.lookPath(name)
		if p == "" {
			return false
		}
		_, _, err := run(ctx, versionTimeout, p, "--version")
		return err == nil
	}
	dpkg := runs("dpkg")
	switch {
	case dpkg && runs("apt-get"):
		return "apt"
	case dpkg:
		return "dpkg"
	}
	return ""
}

// probeRuntime looks name up on PATH; nil when it is not there. Found, it is working only when
// `name info` exits 0, which needs the engine (the docker client alone fails it).
func probeRuntime(ctx context.Context, o options, name string) *wire.RuntimeProbe {
	path := o.lookPath(name)
	if path == "" {
		return nil
	}
	r := &wire.RuntimeProbe{Name: name, Path: path}
	out, errOut, err := run(ctx, versionTimeout, path, "--version")
	if err != nil {
		r.Error = failure(name+" --version", versionTimeout, errOut, out, err)
		return r
	}
	r.Version = versionOf(out)
	if _, errOut, err := run(ctx, o.infoTimeout, path, "info"); err != nil {
		r.Error = failure(name+" info", o.infoTimeout, errOut, nil, err)
		return r
	}
	r.Working = true
	return r
}

// versionOf finds the version in a `--version` line ("Docker version 28.2.2, build e6534b4",
// "podman version 5.0.2"): the word after "version", else the first line as it is.
func versionOf(out []byte) string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if strings.EqualFold(f[i], "version") {
			return strings.TrimRight(f[i+1], ",")
		}
	}
	return wire.CutText(line, wire.MaxReleaseBytes)
}

// failure says why a probe command failed, in a few words and its own last words: the end of
// its stderr (or stdout when that is empty), which is where a CLI says what went wrong.
func failure(what string, timeout time.Duration, errOut, out []byte, err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Sprintf("`%s` did not answer within %s", what, timeout)
	}
	said := strings.TrimSpace(string(errOut))
	if said == "" {
		said = strings.TrimSpace(string(out))
	}
	msg := fmt.Sprintf("`%s` failed (%v)", what, err)
	if said != "" {
		said = strings.Join(strings.Fields(said), " ") // one line
		room := wire.MaxProbeErrorBytes - len(msg) - 2
		if room > 16 && len(said) > room {
			said = "…" + tail(said, room-len("…"))
		}
		msg += ": " + said
	}
	return wire.CutText(msg, wire.MaxProbeErrorBytes)
}

// tail is the last n bytes of s, starting on a character boundary.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && s[i]&0xC0 == 0x80 {
		i++
	}
	return s[i:]
}

// run runs path args with a timeout and returns what it wrote (each capped at outputCap). A
// child that keeps the pipes open after the command is killed is cut off after a second, so a
// probe never outlives its timeout by much.
func run(ctx context.Context, timeout time.Duration, path string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	// The C locale, so what a probe says does not depend on the operator's language.
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.WaitDelay = time.Second
	o, e := capped{}, capped{tail: true}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &o, &e, nil
	err = cmd.Run()
	if ctx.Err() != nil && err != nil {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return o.b, e.b, err
}

// capped keeps outputCap bytes of what is written to it — the first, or with tail the last
// (where a command says what went wrong) — and never fails the writer: a command blocked on a
// full pipe would hang until its timeout.
type capped struct {
	b    []byte
	tail bool
}

func (c *capped) Write(p []byte) (int, error) {
	if !c.tail {
		if room := outputCap - len(c.b); room > 0 {
			c.b = append(c.b, p[:min(room, len(p))]...)
		}
		return len(p), nil
	}
	if len(p) >= outputCap {
		c.b = append(c.b[:0], p[len(p)-outputCap:]...)
		return len(p), nil
	}
	if over := len(c.b) + len(p) - outputCap; over > 0 {
		c.b = append(c.b[:0], c.b[over:]...)
	}
	c.b = append(c.b, p...)
	return len(p), nil
}

// lookPath finds an executable regular file called name in o.path; "" when there is none.
// Empty PATH entries are skipped rather than read as the working directory.
func (o options) lookPath(name string) string {
	for _, dir := range filepath.SplitList(o.path) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func take(ctx context.Context, root string, o options) wire.Inventory {
	var inv wire.Inventory
	if h, err := o.hostname(); err == nil {
		inv.Hostname = h
	}
	if b, err := readCapped(o.machineID); err == nil {
		inv.MachineID = strings.TrimSpace(string(b))
	}
	if inv.CPUs = cpus(o.cpuinfo); inv.CPUs == 0 {
		inv.CPUs = runtime.NumCPU()
	}
	inv.MemoryBytes = memTotal(o.meminfo)
	inv.Disks = disks(ctx, o.rootFS, root)
	inv.Owned.ByType = map[string]int{}
	return inv.Bounded()
}

// cpus counts the "processor" entries of a /proc/cpuinfo; 0 when it cannot be read.
func cpus(path string) int {
	b, err := readCapped(path)
	if err != nil {
		return 0
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, _, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "processor" {
			n++
		}
	}
	return n
}

// memTotal is /proc/meminfo's MemTotal in bytes (the file says kB, meaning KiB); 0 when it
// cannot be read.
func memTotal(path string) uint64 {
	b, err := readCapped(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0
		}
		if len(f) > 1 && strings.EqualFold(f[1], "kB") {
			n *= 1024
		}
		return n
	}
	return 0
}

// Disks reads the size and free space of the filesystems holding / and root, once per
// filesystem: the part of the inventory that changes by the minute, cheap enough (two statfs)
// to read for every heartbeat while the rest is kept from Take.
func Disks(ctx context.Context, root string) []wire.Disk {
	return wire.Inventory{Disks: disks(ctx, "/", root)}.Bounded().Disks
}

// disks reports the filesystems holding each path, once per device, at most wire.MaxDisks;
// a path that cannot be read is left out.
func disks(ctx context.Context, paths ...string) []wire.Disk {
	out := []wire.Disk{}
	seen := map[uint64]bool{}
	for _, p := range paths {
		if ctx.Err() != nil || len(out) == wire.MaxDisks {
			break
		}
		if p == "" {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil || seen[st.Dev] {
			continue
		}
		var fs unix.Statfs_t
		if err := unix.Statfs(p, &fs); err != nil {
			continue
		}
		seen[st.Dev] = true
		bs := uint64(fs.Bsize)
		out = append(out, wire.Disk{Path: p, TotalBytes: fs.Blocks * bs, FreeBytes: fs.Bavail * bs})
	}
	return out
}

// readCapped reads at most 1 MiB of a file: the files read here are small, and one that is
// not (a fixture gone wrong, a strange /etc) must not be read whole.
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("is a directory")}
	}
	return io.ReadAll(io.LimitReader(f, 1<<20))
}
