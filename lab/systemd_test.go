package lab

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire/meshtest"
)

// The launcher speaks sd_notify when NOTIFY_SOCKET is set: READY=1, readable STATUS= lines,
// WATCHDOG=1 relayed at half of WATCHDOG_USEC. The host, its child, never gets the socket.
// The socket is a unix datagram socket in the test's temp dir: systemd's side of the protocol.
func TestLauncherNotifiesSystemdAndKeepsSocketFromHost(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(got)
				return
			}
			got <- string(buf[:n])
		}
	}()

	n := newNode(t, "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000")
	place(t, n, "v1.0.0", PkgHost)
	start(t, n)
	want := map[string]bool{"READY=1": false, "STATUS=running v1.0.0 (confirmed)": false, "WATCHDOG=1": false}
	deadline := time.After(30 * time.Second)
	for missing := len(want); missing > 0; {
		select {
		case msg := <-got:
			if seen, ok := want[msg]; ok && !seen {
				want[msg] = true
				missing--
			}
		case <-deadline:
			t.Fatalf("notifications not seen: %v\n%s", want, n.Log())
		}
	}
	rep, err := n.WaitStatus(ctx, "v1.0.0 running", runningConfirmed("v1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(rep.Running.PID), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "WATCHDOG_USEC=") {
			t.Errorf("the host was given %s; only the launcher may notify systemd", kv)
		}
	}
}
