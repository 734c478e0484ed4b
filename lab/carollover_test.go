package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Issue 29 §5, with real processes: `mesh-release serve` (operator mode, TLS) and three
// enrolled nodes. The bus's CA rolls over with the real `mesh-release bus ca add|status|switch|
// drop`: every node reports the new CA beside the old one before the server's certificate
// changes, then the new one alone; no node loses its link at any step (one "link: connected",
// no "link: lost", no link failure in a heartbeat), and each reconnects to the restarted server,
// whose certificate only the new CA verifies, nothing done on a node.
func TestABusCARollsOverWithEveryNodeConnectedThroughout(t *testing.T) {
	t.Parallel()
	began := time.Now()
	defer func() { t.Logf("scenario took %s", time.Since(began).Round(100*time.Millisecond)) }()
	release := build(t, PkgRelease, ToolVersion)
	host := build(t, PkgHost, "v1.0.0")
	launcherBin := build(t, PkgLauncher, ToolVersion)
	ctx := meshtest.Context(t, 5*time.Minute)
	data, keys := t.TempDir(), t.TempDir()
	rel := &Release{Bin: release, KeyDir: keys}
	if _, err := rel.Keygen(ctx); err != nil {
		t.Fatal(err)
	}
	port := freePorts(t, 1)[0]
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	serveArgs := []string{"--key-pub", filepath.Join(keys, "release.pub")}
	serve := startReleased(t, release, data, port, serveArgs...)
	beats := func() *HeartbeatLog {
		t.Helper()
		admin, err := bus.Connect(ctx, url, filepath.Join(data, trust.Dir, trust.AdminCredsFile),
			bus.WithCA(filepath.Join(data, trust.TLSDir, "ca.pem")), bus.Lasting(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(admin.Close)
		l, err := RecordHeartbeats(admin.NC, wire.NamesFor(""))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	seen := beats()
	names := []string{"node-1", "node-2", "node-3"}
	var nodes []*Node
	for _, name := range names {
		n := &Node{Name: name, Root: t.TempDir(), Launcher: launcherBin,
			Env: []string{"MESH_HOST_HEARTBEAT_INTERVAL=500ms", "MESH_HOST_RECONCILE_INTERVAL=1s"}}
		runOK(t, host, "enrol", "--root", n.Root, enrolToken(t, release, data, url, name))
		if err := n.PlaceVersion("v1.0.0", host); err != nil {
			t.Fatal(err)
		}
		start(t, n)
		t.Cleanup(func() {
			c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n.Stop(c)
			if t.Failed() {
				t.Logf("%s:\n%s", n.Name, n.Log())
			}
		})
		nodes = append(nodes, n)
	}
	cas, err := trust.ReadCAs(data)
	if err != nil {
		t.Fatal(err)
	}
	oldCA := wire.CAFingerprint(cas.Current)
	holding := func(l *HeartbeatLog, what string, fps ...string) {
		t.Helper()
		if err := l.WaitAll(ctx, names, what, func(b Beat) bool { return slices.Equal(b.BusCAs, fps) }); err != nil {
			t.Fatal(err)
		}
	}
	holding(seen, "the serve's CA", oldCA)
	busCmd := func(args ...string) string {
		t.Helper()
		out := runOK(t, release, append(append([]string{"bus", "ca"}, args...), "--data", data, "--nats", url)...)
		t.Logf("mesh-release bus ca %s:\n%s", strings.Join(args, " "), out)
		return out
	}

	busCmd("add", "--key", rel.KeyPath())
	if cas, err = trust.ReadCAs(data); err != nil || cas.Next == nil {
		t.Fatalf("after bus ca add: %+v, %v", cas, err)
	}
	newCA := wire.CAFingerprint(cas.Next)
	holding(seen, "both CAs", oldCA, newCA)
	if out := busCmd("status"); !strings.Contains(out, fmt.Sprintf("every node heard (3) holds CA %s", newCA)) {
		t.Errorf("bus ca status does not say every node holds the new CA:\n%s", out)
	}
	if out := busCmd("switch"); !strings.Contains(out, "the servers' CA is now "+newCA) {
		t.Errorf("bus ca switch does not say the servers' CA is the new one:\n%s", out)
	}
	// The running server presents the new CA's certificate: a client trusting it alone connects.
	fresh := beats()
	busCmd("drop", "--key", rel.KeyPath())
	// serve keeps every connection through the switch, so each node's session still holds the
	// old CA's certificate: the node takes the drop because a new connection to its server
	// verifies with the new CA alone, while it stays connected.
	holding(fresh, "the new CA alone", newCA)
	for _, n := range nodes {
		if log := n.Log(); strings.Count(log, `msg="link: connected"`) != 1 || strings.Contains(log, "link: lost") {
			t.Errorf("%s's link did not stay up through the rollover: %d connects, lost: %v", n.Name,
				strings.Count(log, `msg="link: connected"`), strings.Contains(log, "link: lost"))
		}
		for _, b := range append(seen.Of(n.Name), fresh.Of(n.Name)...) {
			if b.Link != nil && b.Link.At.After(began) {
				t.Errorf("%s heartbeat a link failure during the rollover: %+v", n.Name, *b.Link)
				break
			}
		}
	}

	// A restart of the server: every node reconnects, trusting the new CA alone.
	serve.stop(t)
	restarted := time.Now()
	startReleased(t, release, data, port, serveArgs...)
	after := beats()
	if err := after.WaitAll(ctx, names, "a heartbeat after the server restarted, the new CA alone", func(b Beat) bool {
		return b.SentAt.After(restarted) && slices.Equal(b.BusCAs, []string{newCA})
	}); err != nil {
		t.Fatal(err)
	}
}
