package lab

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// linkedNode starts a bus, subscribes to node "lab"'s heartbeats and starts its launcher with
// v1.0.0 linked to the bus.
func linkedNode(t *testing.T, env ...string) (*Node, <-chan wire.Heartbeat) {
	t.Helper()
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("lab")
	n := newNode(t, append([]string{"MESH_HOST_NATS_URL=" + b.URL()}, env...)...)
	place(t, n, "v1.0.0", PkgHost)
	start(t, n)
	return n, hbs
}

// 7. With the link up, a newer version placed in versions/ makes the host heartbeat that it is
// standing aside, then exit 0 after its reconcile; the launcher starts the new one, which
// heartbeats its own version.
func TestStandingAsideIsHeartbeatAndNewVersionHeartbeatsItself(t *testing.T) {
	t.Parallel()
	n, hbs := linkedNode(t)
	meshtest.WaitHeartbeat(t, hbs, "v1.0.0 running and confirmed", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.0.0" && hb.KnownGood == "v1.0.0" && hb.State == wire.StateRunning
	})
	place(t, n, "v1.1.0", PkgHost)
	aside := meshtest.WaitHeartbeat(t, hbs, "standing aside", func(hb wire.Heartbeat) bool { return hb.State == wire.StateStandingAside })
	if aside.Running != "v1.0.0" || aside.StandingAsideFor != "v1.1.0" {
		t.Errorf("standing-aside heartbeat: running %q for %q, want v1.0.0 for v1.1.0", aside.Running, aside.StandingAsideFor)
	}
	meshtest.WaitHeartbeat(t, hbs, "v1.1.0 heartbeating itself", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.State == wire.StateRunning && hb.KnownGood == "v1.1.0"
	})
	if got := startsOf(t, n.Root, "v1.0.0"); len(got) != 1 || got[0] != "stood-aside" {
		t.Errorf("v1.0.0 ended %v, want it to have stood aside (exit 0 while Choose named v1.1.0)", got)
	}
}

// 5. The host holds one outbound connection and has no listening socket: every socket among
// its file descriptors is looked up in /proc/<pid>/net/* and none is listening.
func TestHostHasNoListeningSocket(t *testing.T) {
	t.Parallel()
	n, hbs := linkedNode(t)
	meshtest.WaitHeartbeat(t, hbs, "the host linked", func(hb wire.Heartbeat) bool { return hb.Running == "v1.0.0" })
	rep, _, err := n.Status(meshtest.Context(t, 10*time.Second))
	if err != nil || rep.Running == nil {
		t.Fatalf("status: %+v %v", rep.Running, err)
	}
	pid := rep.Running.PID
	inodes := socketInodes(t, pid)
	if len(inodes) == 0 {
		t.Fatalf("host pid %d has no sockets at all; the link should be one", pid)
	}
	established := 0
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6", "raw", "raw6"} {
		for _, row := range procNet(t, pid, table) {
			if !inodes[row.inode] {
				continue
			}
			switch {
			case strings.HasPrefix(table, "tcp") && row.state == "0A":
				t.Errorf("the host listens on %s %s", table, row.local)
			case strings.HasPrefix(table, "tcp") && row.state == "01":
				established++
			case !strings.HasPrefix(table, "tcp"):
				t.Errorf("the host has a %s socket %s", table, row.local)
			}
		}
	}
	for _, row := range procNet(t, pid, "unix") {
		if inodes[row.inode] && row.state == "listening" {
			t.Errorf("the host listens on a unix socket %s", row.local)
		}
	}
	if established != 1 {
		t.Errorf("the host has %d established TCP connections, want exactly one: the link", established)
	}
}

func socketInodes(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	return out
}

type netRow struct{ local, state, inode string }

// procNet parses /proc/<pid>/net/<table> (the host's network namespace).
func procNet(t *testing.T, pid int, table string) []netRow {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", table))
	if err != nil {
		return nil // table absent (no IPv6, …)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var rows []netRow
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if table == "unix" {
			// Num RefCount Protocol Flags Type St Inode [Path]; flag 0x10000 = accepting connections.
			if len(f) < 7 {
				continue
			}
			flags, _ := strconv.ParseUint(f[3], 16, 64)
			state := ""
			if flags&0x10000 != 0 {
				state = "listening"
			}
			path := ""
			if len(f) > 7 {
				path = f[7]
			}
			rows = append(rows, netRow{local: path, state: state, inode: f[6]})
			continue
		}
		if len(f) < 10 {
			continue
		}
		rows = append(rows, netRow{local: f[1], state: f[3], inode: f[9]})
	}
	return rows
}
