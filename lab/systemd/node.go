package systemd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Node is one booted container: systemd as PID 1 on its own writable layer over the lab's base,
// in its own network namespace.
type Node struct {
	Name string
	Addr string // its address on the lab bridge

	lab     *Lab
	dir     string // upper/, work/, root/ (the mounted overlay), console.log
	ns      string // its network namespace
	port    string // its veth's end on the bridge
	mounted bool
	exited  chan struct{} // closed when nspawn has exited for good and been waited for
	exitErr error         // how it exited; read only once exited is closed
	Booted  time.Duration

	// The watcher goroutine replaces nspawn when the container reboots, while tests and
	// teardown read these: all under mu.
	mu       sync.Mutex
	nspawn   *exec.Cmd // the systemd-nspawn running now
	stopping bool      // teardown began: an nspawn that exits is not started again
	reboots  int       // times nspawn was started again after a reboot inside the container
	init     int       // the container's PID 1, as this machine numbers it; 0 until found
	pidNS    string    // the container's pid namespace, e.g. "pid:[4026532291]"
}

// Root is the node's filesystem as this machine sees it (the merged overlay).
func (n *Node) Root() string { return filepath.Join(n.dir, "root") }

// Console is what the container printed: systemd's boot messages, nspawn's errors.
func (n *Node) Console() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "console.log"))
	return string(b)
}

// PID is the container's systemd, numbered as this machine sees it; 0 from a reboot until
// WaitRunning has found the new one.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.init
}

// Reboots is how many times the container rebooted and the lab started it again.
func (n *Node) Reboots() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reboots
}

// current is the systemd-nspawn running now.
func (n *Node) current() *exec.Cmd {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nspawn
}

// layer gives the node its own writable layer over the base: an overlay mount when the kernel
// has one, else a full copy (slower, and measured so the lab says so).
func (n *Node) layer(base string) (copied bool, err error) {
	upper, work, root := filepath.Join(n.dir, "upper"), filepath.Join(n.dir, "work"), n.Root()
	for _, d := range []string{filepath.Join(upper, "etc"), work, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return false, fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	opts := "lowerdir=" + base + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err == nil {
		n.mounted = true
		return false, nil
	} else if !errors.Is(err, unix.ENODEV) && !errors.Is(err, unix.EINVAL) {
		return false, fmt.Errorf("node %s: mounting its overlay (%s): %w", n.Name, opts, err)
	}
	out, err := exec.Command("cp", "-a", "--reflink=auto", base+"/.", root).CombinedOutput()
	if err != nil {
		return true, fmt.Errorf("node %s: copying the base (no overlayfs): %w\n%s", n.Name, err, out)
	}
	return true, nil
}

// identify writes the node's own machine-id and hostname into its layer.
func (n *Node) identify() error {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return err
	}
	files := map[string]string{
		"etc/machine-id": hex.EncodeToString(id) + "\n",
		"etc/hostname":   n.Name + "\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(n.Root(), name), []byte(body), 0o444); err != nil {
			return fmt.Errorf("node %s: %s: %w", n.Name, name, err)
		}
	}
	return nil
}

// rebootStatus is what systemd-nspawn exits with when the container rebooted: it does not boot
// it again itself (systemd-nspawn@.service does, with RestartForceExitStatus=133), so the lab
// does.
const rebootStatus = 133

// start runs systemd-nspawn as a child, and again each time the container reboots, until
// teardown; n.exited is closed only when it exits for good.
func (n *Node) start() error {
	cmd, err := n.spawn(os.O_TRUNC)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.nspawn = cmd
	n.mu.Unlock()
	n.exited = make(chan struct{})
	go n.watch(cmd)
	return nil
}

// spawn starts one systemd-nspawn on the node's layer and network namespace, its output
// appended to console.log (emptied first when flag is os.O_TRUNC). It runs in its own process
// group (a terminal's ^C reaches the lab's handler, which stops nodes in order, not nspawn
// directly), and gets SIGTERM — which nspawn turns into a clean poweroff of the container — if
// this process dies without tearing down.
func (n *Node) spawn(flag int) (*exec.Cmd, error) {
	console, err := os.OpenFile(filepath.Join(n.dir, "console.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|flag, 0o644)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	defer console.Close()
	cmd := exec.Command("systemd-nspawn",
		"--quiet",
		"-D", n.Root(),
		"--boot",
		"--register=no",
		"--keep-unit",
		"-M", n.Name,
		"--console=read-only",
		"--network-namespace-path=/run/netns/"+n.ns,
	)
	cmd.Stdout, cmd.Stderr = console, console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("node %s: starting systemd-nspawn: %w", n.Name, err)
	}
	return cmd, nil
}

// watch waits for nspawn and, when the container rebooted and teardown has not begun, starts
// it again. Checking stopping and starting the next nspawn under one lock means teardown
// either sees the new nspawn (and stops it) or the watcher sees teardown (and starts nothing).
func (n *Node) watch(cmd *exec.Cmd) {
	for {
		err := cmd.Wait()
		n.mu.Lock()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == rebootStatus && !n.stopping {
			next, serr := n.spawn(0)
			if serr == nil {
				n.nspawn, cmd = next, next
				n.reboots++
				// The old PID 1 and its namespace are gone, and their numbers may be reused:
				// forget them until findInit sees the new ones.
				n.init, n.pidNS = 0, ""
				reboots := n.reboots
				n.mu.Unlock()
				n.lab.opts.Logf("node %s rebooted; systemd-nspawn started again (reboot %d)", n.Name, reboots)
				continue
			}
			err = fmt.Errorf("the container rebooted and starting it again failed: %w", serr)
		}
		n.exitErr = err
		n.mu.Unlock()
		close(n.exited)
		return
	}
}

// findInit waits for the container's PID 1 to appear under nspawn and records it. After a
// reboot inside the container the lab starts a new nspawn, which starts a new one; call it
// again (WaitRunning does).
func (n *Node) findInit(ctx context.Context) error {
	for {
		if n.recordInit(n.current()) {
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("node %s: systemd-nspawn exited (%v) before the container started:\n%s", n.Name, n.exitErr, tail([]byte(n.Console()), 30))
		case <-ctx.Done():
			return fmt.Errorf("node %s: no container init under systemd-nspawn %d: %w", n.Name, n.current().Process.Pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// recordInit looks for the container's PID 1 under nspawn and, when it is there, records it
// and its pid namespace — unless nspawn was replaced meanwhile (a reboot).
func (n *Node) recordInit(nspawn *exec.Cmd) bool {
	pid, ok := containerInit(nspawn.Process.Pid)
	if !ok {
		return false
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nspawn != nspawn {
		return false
	}
	n.init, n.pidNS = pid, ns
	return true
}

// containerInit finds, among the descendants of pid, a process that is PID 1 of its own pid
// namespace ("NSpid: <ours> 1").
func containerInit(parent int) (int, bool) {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	nspid := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PPid:"); ok {
				pp, _ := strconv.Atoi(strings.TrimSpace(v))
				children[pp] = append(children[pp], pid)
			} else if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
				nspid[pid] = strings.TrimSpace(v)
			}
		}
	}
	queue := []int{parent}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if f := strings.Fields(nspid[c]); len(f) >= 2 && f[len(f)-1] == "1" {
				return c, true
			}
			queue = append(queue, c)
		}
	}
	return 0, false
}

// Exec runs a command inside the node — all its namespaces, as its root — and returns its
// combined output.
func (n *Node) Exec(ctx context.Context, args ...string) ([]byte, error) {
	init := n.PID()
	if init == 0 {
		return nil, fmt.Errorf("node %s: not running (or rebooting: WaitRunning finds its new PID 1)", n.Name)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(init), "-a"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("node %s: %s: %w\n%s", n.Name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// Systemctl runs systemctl inside the node.
func (n *Node) Systemctl(ctx context.Context, args ...string) ([]byte, error) {
	return n.Exec(ctx, append([]string{"systemctl"}, args...)...)
}

// SystemState is what `systemctl is-system-running` said once boot finished, and the units that
// failed when it is "degraded".
type SystemState struct {
	State  string
	Failed []string
}

// WaitRunning waits for the node's boot to finish (`systemctl is-system-running --wait`) and
// says how it ended: "running", or "degraded" with the failed units named. Any other end is an
// error. It first finds the container's PID 1 again, so it also serves after a reboot.
func (n *Node) WaitRunning(ctx context.Context) (SystemState, error) {
	if err := n.findInit(ctx); err != nil {
		return SystemState{}, err
	}
	for {
		out, _ := n.Systemctl(ctx, "is-system-running", "--wait")
		state := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(state, '\n'); i >= 0 {
			state = state[i+1:]
		}
		switch state {
		case "running":
			return SystemState{State: state}, nil
		case "degraded":
			failed, err := n.Systemctl(ctx, "list-units", "--failed", "--no-legend", "--plain")
			if err != nil {
				return SystemState{State: state}, err
			}
			s := SystemState{State: state}
			for _, line := range strings.Split(strings.TrimSpace(string(failed)), "\n") {
				if f := strings.Fields(line); len(f) > 0 {
					s.Failed = append(s.Failed, f[0])
				}
			}
			return s, nil
		case "stopping", "maintenance":
			return SystemState{State: state}, fmt.Errorf("node %s: system is %s:\n%s", n.Name, state, tail([]byte(n.Console()), 30))
		}
		// Not up far enough to answer yet ("offline" until /run/systemd/system exists, nothing
		// at all until nsenter finds the namespaces): try again.
		select {
		case <-n.exited:
			return SystemState{}, fmt.Errorf("node %s: systemd-nspawn exited (%v) during boot:\n%s", n.Name, n.exitErr, tail([]byte(n.Console()), 30))
		case <-ctx.Done():
			return SystemState{State: state}, fmt.Errorf("node %s: boot did not finish (last said %q): %w\n%s", n.Name, state, ctx.Err(), tail([]byte(n.Console()), 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Reboot runs `systemctl reboot` inside the node — with flags, such as -ff (reboot(2) at once,
// nothing stopped) — and waits until the lab has started it again and its boot has finished, as
// WaitRunning says; PID is then the new PID 1.
func (n *Node) Reboot(ctx context.Context, flags ...string) (SystemState, error) {
	if n.PID() == 0 {
		return SystemState{}, fmt.Errorf("node %s: not running (or already rebooting), so not rebooted", n.Name)
	}
	before := n.Reboots()
	n.Systemctl(ctx, append([]string{"reboot"}, flags...)...) // the nsenter'd systemctl may go down with the system: its error says nothing
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for n.Reboots() == before {
		select {
		case <-n.exited:
			return SystemState{}, fmt.Errorf("node %s: systemd-nspawn exited (%v) instead of rebooting:\n%s", n.Name, n.exitErr, tail([]byte(n.Console()), 30))
		case <-ctx.Done():
			return SystemState{}, fmt.Errorf("node %s: did not go down for the reboot: %w\n%s", n.Name, ctx.Err(), tail([]byte(n.Console()), 30))
		case <-time.After(50 * time.Millisecond):
		}
	}
	return n.WaitRunning(ctx)
}

// stop powers the container off through nspawn (SIGTERM), and kills it — PID 1 first, which
// takes its whole pid namespace along, then nspawn — if it has not gone within grace. From
// here on a reboot inside the container ends the node instead of booting it again.
func (n *Node) stop(grace time.Duration) error {
	n.mu.Lock()
	n.stopping = true
	cmd := n.nspawn
	n.mu.Unlock()
	if cmd == nil || n.exited == nil {
		return nil
	}
	select {
	case <-n.exited:
		return nil
	default:
	}
	// The container running now may have booted since anyone last looked (a reboot): record
	// its namespace, so CheckGone and the wait below look at the right one.
	n.recordInit(cmd)
	cmd.Process.Signal(syscall.SIGTERM)
	// nspawn passes the poweroff on to the container's systemd once, and a systemd still early
	// in its boot has no handler for it yet and so never sees it: ask it again, directly.
	again := time.NewTicker(250 * time.Millisecond)
	defer again.Stop()
	for killAt := time.After(grace); ; {
		select {
		case <-n.exited:
			return nil
		case <-again.C:
			if n.recordInit(cmd) {
				syscall.Kill(n.PID(), sigHalt)
			}
			continue
		case <-killAt:
		}
		break
	}
	n.recordInit(cmd)
	if init := n.PID(); init != 0 {
		syscall.Kill(init, syscall.SIGKILL)
	}
	cmd.Process.Kill()
	select {
	case <-n.exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("node %s: systemd-nspawn %d survived SIGKILL", n.Name, cmd.Process.Pid)
	}
	// The kernel empties a pid namespace whose PID 1 died, but not at once: wait for it, so
	// what comes next (unmounting, CheckGone) does not race the dying.
	ns := n.pidNamespace()
	for deadline := time.Now().Add(10 * time.Second); len(inPidNS(ns)) > 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: processes %v outlived their PID 1", n.Name, inPidNS(ns))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("node %s: did not power off within %s; killed", n.Name, grace)
}

// sigHalt is SIGRTMIN+3 as glibc numbers it (SIGRTMIN is 34 there), which systemd as a
// container's PID 1 takes as "halt" and nspawn sends it on SIGTERM.
const sigHalt = syscall.Signal(34 + 3)

// pidNamespace is the pid namespace of the container last seen running.
func (n *Node) pidNamespace() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pidNS
}

// inPidNS lists the processes in the pid namespace ns ("pid:[…]"), as "pid (comm)".
func inPidNS(ns string) []string {
	if ns == "" {
		return nil
	}
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && l == ns {
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			found = append(found, e.Name()+" ("+strings.TrimSpace(string(comm))+")")
		}
	}
	return found
}

// unmount removes the node's overlay; a busy one is detached so teardown always finishes.
func (n *Node) unmount() error {
	if !n.mounted {
		return nil
	}
	if err := unix.Unmount(n.Root(), 0); err != nil {
		if err2 := unix.Unmount(n.Root(), unix.MNT_DETACH); err2 != nil {
			return fmt.Errorf("node %s: unmounting %s: %w", n.Name, n.Root(), err2)
		}
	}
	n.mounted = false
	return nil
}
