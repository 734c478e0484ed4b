package systemd

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// One node boots with systemd as PID 1 under its own name and machine-id, reaches the bus at
// the lab's private address over the bridge — and only over it — loses it when cut off, gets it
// back when restored, and the teardown leaves no process, namespace or mount.
func TestOneNodeBootsReachesTheBusAndLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := Start(t, ctx)
	n, st, err := l.Boot(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; node1 booted in %s (%s%s)", l.Rootfs, n.Booted.Round(time.Millisecond), st.State, strings.Join(append([]string{""}, st.Failed...), " "))

	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(n.PID()) + "/comm"); strings.TrimSpace(string(comm)) != "systemd" {
		t.Errorf("the container's PID 1 (%d) is %q, want systemd", n.PID(), comm)
	}
	out, err := n.Systemctl(ctx, "is-system-running")
	if s := strings.TrimSpace(string(out)); s != "running" && s != "degraded" {
		t.Errorf("is-system-running = %q (%v), want running or degraded", s, err)
	}
	if out, err := n.Exec(ctx, "cat", "/etc/hostname", "/etc/machine-id"); err != nil {
		t.Error(err)
	} else if !regexp.MustCompile(`^node1\n[0-9a-f]{32}\n$`).Match(out) {
		t.Errorf("node identity = %q, want its own hostname and machine-id", out)
	}

	// NATS greets every client with an INFO line: reading it is reaching the bus.
	reach := []string{"timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/" + BridgeAddr + "/4222 && head -c 4 <&3"}
	if out, err := n.Exec(ctx, reach...); err != nil || string(out) != "INFO" {
		t.Fatalf("node1 reaching the bus at %s: %q, %v", l.BusURL, out, err)
	}
	// Some machines accept every outbound connection (an egress proxy), so "not reachable" is
	// "no bus greets us", not "connect fails".
	if greeting := greet(BridgeAddr + ":4222"); greeting == "INFO" {
		t.Errorf("the bus answers at the lab's bridge address in the machine's own network namespace")
	}
	if err := l.Cut(ctx, n); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Exec(ctx, reach...); err == nil {
		t.Errorf("node1 reached the bus while cut off: %q", out)
	}
	if err := l.Restore(ctx, n); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Exec(ctx, reach...); err != nil || string(out) != "INFO" {
		t.Errorf("node1 reaching the bus after its link came back: %q, %v", out, err)
	}

	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("teardown took %s", time.Since(start).Round(time.Millisecond))
	if err := l.CheckGone(); err != nil {
		t.Fatal(err)
	}
}

// greet connects to addr from this process's network namespace and returns the first four
// bytes the other end sends within a second, if any.
func greet(addr string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4)
	n, _ := io.ReadFull(c, buf)
	return string(buf[:n])
}

// A node that does not power off within the grace is killed — PID 1 first, which takes its pid
// namespace along — and the teardown still leaves nothing, and says it had to kill.
func TestANodeThatWillNotStopIsKilledAndLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := Start(t, ctx)
	if _, _, err := l.Boot(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	l.opts.StopGrace = time.Millisecond
	err := l.Close()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Close = %v, want it to say the node was killed", err)
	}
	if err := l.CheckGone(); err != nil {
		t.Fatal(err)
	}
}

// Nodes share the base but nothing else: each its own machine-id, and a file one writes is not
// seen by the other or left in the base. Both reach the bus over the one bridge.
func TestNodesShareTheBaseAndNothingElse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := Start(t, ctx)
	var nodes []*Node
	for _, name := range []string{"a", "b"} {
		n, _, err := l.Boot(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	if _, err := nodes[0].Exec(ctx, "sh", "-c", "echo mine > /etc/only-on-a"); err != nil {
		t.Fatal(err)
	}
	if out, err := nodes[1].Exec(ctx, "cat", "/etc/only-on-a"); err == nil {
		t.Errorf("node b sees node a's file: %q", out)
	}
	if _, err := os.Stat(l.Rootfs.Dir + "/etc/only-on-a"); err == nil {
		t.Errorf("node a's file reached the shared base")
	}
	ids := map[string]string{}
	for _, n := range nodes {
		id, err := n.Exec(ctx, "cat", "/etc/machine-id")
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := ids[string(id)]; ok {
			t.Errorf("nodes %s and %s share machine-id %s", other, n.Name, id)
		}
		ids[string(id)] = n.Name
		if out, err := n.Exec(ctx, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+BridgeAddr+"/4222 && head -c 4 <&3"); err != nil || string(out) != "INFO" {
			t.Errorf("node %s reaching the bus: %q, %v", n.Name, out, err)
		}
	}
}

// `systemctl reboot` inside a node makes systemd-nspawn exit (status 133) rather than boot
// again; the lab boots it again on the same layer and network namespace: a new PID 1, what the
// node wrote still there, the bus still reachable, both boots in console.log.
func TestARebootedNodeBootsAgainOnItsLayer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	l := Start(t, ctx)
	n, _, err := l.Boot(ctx, "reboot")
	if err != nil {
		t.Fatal(err)
	}
	old := n.PID()
	if _, err := n.Exec(ctx, "sh", "-c", "echo kept > /var/lib/before-reboot"); err != nil {
		t.Fatal(err)
	}
	st, err := n.Reboot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebooted: %s %s", st.State, strings.Join(st.Failed, " "))
	if n.PID() == old || n.Reboots() != 1 {
		t.Errorf("after the reboot PID 1 is %d (was %d), reboots %d: want a new PID 1 and one reboot", n.PID(), old, n.Reboots())
	}
	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(n.PID()) + "/comm"); strings.TrimSpace(string(comm)) != "systemd" {
		t.Errorf("the container's new PID 1 (%d) is %q, want systemd", n.PID(), comm)
	}
	if out, err := n.Exec(ctx, "cat", "/var/lib/before-reboot"); err != nil || string(out) != "kept\n" {
		t.Errorf("a file written before the reboot reads %q (%v) after it, want it kept on the node's layer", out, err)
	}
	if out, err := n.Exec(ctx, "timeout", "5", "bash", "-c", "exec 3<>/dev/tcp/"+BridgeAddr+"/4222 && head -c 4 <&3"); err != nil || string(out) != "INFO" {
		t.Errorf("reaching the bus after the reboot: %q, %v", out, err)
	}
	if c := n.Console(); strings.Count(c, "Welcome to") != 2 {
		t.Errorf("console.log does not hold both boots (it is appended to):\n%s", tail([]byte(c), 40))
	}
}

// A teardown that lands during a reboot — the container going down, the lab just having started
// nspawn again, the new PID 1 still booting — stops the node without having to kill it and
// leaves nothing; once teardown has begun the lab boots nothing again.
func TestTeardownDuringARebootLeavesNothing(t *testing.T) {
	moments := []struct {
		name string
		wait func(context.Context, *Node) error // returns at the moment to tear down
	}{
		{"going down", func(context.Context, *Node) error { return nil }},
		{"nspawn started again", func(ctx context.Context, n *Node) error { return waitReboots(ctx, n, 1) }},
		{"new PID 1 booting", func(ctx context.Context, n *Node) error {
			if err := waitReboots(ctx, n, 1); err != nil {
				return err
			}
			return n.findInit(ctx)
		}},
	}
	for _, m := range moments {
		t.Run(m.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			l := Start(t, ctx)
			n, _, err := l.Boot(ctx, "reboot")
			if err != nil {
				t.Fatal(err)
			}
			n.Systemctl(ctx, "reboot") // it may go down with the system: its error says nothing
			if err := m.wait(ctx, n); err != nil {
				t.Fatal(err)
			}
			reboots, start := n.Reboots(), time.Now()
			if err := l.Close(); err != nil {
				t.Errorf("teardown %s: %v", m.name, err)
			}
			t.Logf("teardown took %s (nspawn: %v)", time.Since(start).Round(time.Millisecond), n.exitErr)
			if err := l.CheckGone(); err != nil {
				t.Fatal(err)
			}
			if n.Reboots() != reboots {
				t.Errorf("the lab booted the node again after teardown began (reboots %d, then %d)", reboots, n.Reboots())
			}
		})
	}
}

// waitReboots waits until the lab has started n again after its reboots-th reboot.
func waitReboots(ctx context.Context, n *Node, reboots int) error {
	for n.Reboots() < reboots {
		select {
		case <-n.exited:
			return fmt.Errorf("node %s: systemd-nspawn exited (%v) instead of rebooting", n.Name, n.exitErr)
		case <-ctx.Done():
			return fmt.Errorf("node %s: not rebooted: %w\n%s", n.Name, ctx.Err(), tail([]byte(n.Console()), 30))
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}
