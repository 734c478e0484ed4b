package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A site behind a leaf server (issue 20, 3.4; docs/decisions/0025), with real processes: a hub
// of one stock nats-server (one keeps the test lean; the leaf's configuration names the hub's
// servers the same way for three) and a site's stock leaf server, both configured by
// `mesh-release init --server-config … --leaf`, the leaf's line to the hub through a TCP proxy
// the test cuts. Two nodes (a real mesh-launcher and mesh-host each) enrol through the leaf and
// connect only to it. A target makes them fetch v1.1.0's archive through the leaf and run it,
// and a declaration reaches them; the hub sees their heartbeats. With the line cut, they keep
// running and reconciling from their own stores (a file deleted by hand is put back) while the
// hub stores a new declaration; once the line is back, their heartbeats reach the hub again,
// the declaration stored meanwhile reaches them, and so does one stored after. Finally one node
// is revoked on the hub, and the leaf refuses it; the other is revoked while the line is cut
// again, and the leaf refuses it once the line is back.
func TestASiteBehindALeafServerFollowsTheHubAndReconcilesWhileCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stock nats-server and runs a hub, a leaf server and two nodes")
	}
	ctx := meshtest.Context(t, 4*time.Minute)
	natsBin := stockNATSServer(t)
	hostV1, hostV2 := build(t, PkgHost, "v1.0.0"), build(t, PkgHost, "v1.1.0")
	rel := &Release{Bin: build(t, PkgRelease, "v0.0.0-lab"), KeyDir: t.TempDir(), Out: t.TempDir()}
	if _, err := rel.Keygen(ctx); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	conf, data := filepath.Join(work, "mesh-bus"), filepath.Join(work, "release-data")
	ports := freePorts(t, 5)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	hubURL, hubLeaf, line, leafURL := "tls://"+addr(0), addr(2), addr(3), "tls://"+addr(4)
	proxy := startLinkProxy(t, line, hubLeaf)

	out, err := rel.Run(ctx, "init", "--server-config", conf, "--data", data,
		"--server", fmt.Sprintf("s1=%s,%s,%s", addr(0), addr(1), hubLeaf),
		"--leaf", "site1="+addr(4), "--hub", "tls://"+line)
	if err != nil {
		t.Fatal(err)
	}
	if want := "leaf site1: nats-server -c " + filepath.Join(conf, "site1", bus.ServerConfigFile); !strings.Contains(out, want) {
		t.Errorf("init --server-config does not say %q:\n%s", want, out)
	}
	startStockServer(t, natsBin, filepath.Join(conf, "s1", bus.ServerConfigFile))
	leaf := startStockServer(t, natsBin, filepath.Join(conf, "site1", bus.ServerConfigFile))

	ca, admin := filepath.Join(data, "tls", "ca.pem"), filepath.Join(data, "trust", "admin.creds")
	t.Setenv("MESH_NATS_URL", hubURL)
	t.Setenv("MESH_NATS_CREDS", admin)
	t.Setenv("MESH_NATS_CA", ca)
	rel.NATS = hubURL
	var c *bus.Conn
	waitFor(t, ctx, "the hub's JetStream to answer", func() bool {
		if c == nil {
			if c, err = bus.Connect(ctx, hubURL, admin, bus.WithCA(ca)); err != nil {
				return false
			}
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := c.JS.AccountInfo(actx)
		return err == nil
	})
	defer c.Close()
	if _, err := rel.Run(ctx, "init"); err != nil {
		t.Fatal(err)
	}
	names := wire.NamesFor("")
	hbs, err := RecordHeartbeats(c.NC, names)
	if err != nil {
		t.Fatal(err)
	}
	defer hbs.Stop()

	svc := exec.Command(rel.Bin, "enrol-service", "--data", data, "--key-pub", filepath.Join(rel.KeyDir, "release.pub"))
	svcLog := &lockedBuffer{}
	svc.Stdout, svc.Stderr = svcLog, svcLog
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Process.Kill(); svc.Wait() })
	waitFor(t, ctx, "the enrolment service to answer", func() bool { return pings(t, c.NC) == 1 })

	// Each node enrols through the leaf (the token names the leaf's URL, and so does the
	// host.json enrolment writes) and runs v1.0.0.
	ids := []string{"site-01", "site-02"}
	srv := t.TempDir()
	nodes := map[string]*Node{}
	launcherBin := build(t, PkgLauncher, "v0.0.0-lab")
	for _, id := range ids {
		token, err := rel.Run(ctx, "enrol-token", "--data", data, "--node", id, "--url", leafURL)
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(work, id)
		if b, err := exec.CommandContext(ctx, hostV1, "enrol", "--root", root, firstLine(token)).CombinedOutput(); err != nil {
			t.Fatalf("enrol %s through the leaf: %v\n%s", id, err, b)
		}
		var hj struct {
			URLs []string `json:"nats_urls"`
		}
		b, _ := os.ReadFile(filepath.Join(root, "host.json"))
		if err := json.Unmarshal(b, &hj); err != nil || len(hj.URLs) != 1 || hj.URLs[0] != leafURL {
			t.Fatalf("%s's host.json names %q (%v), want only the leaf %s", id, hj.URLs, err, leafURL)
		}
		n := &Node{Name: id, Root: root, Launcher: launcherBin,
			Env: []string{"MESH_HOST_RECONCILE_INTERVAL=200ms", "MESH_HOST_HEARTBEAT_INTERVAL=500ms"}}
		t.Cleanup(func() {
			if n.PID() == 0 {
				return
			}
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			n.Stop(sctx)
			if t.Failed() {
				t.Logf("launcher log of %s:\n%s", n.Name, n.Log())
			}
		})
		place(t, n, "v1.0.0", PkgHost)
		start(t, n)
		nodes[id] = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(leaf.Log)
			t.Logf("leaf server's log:\n%s", log)
		}
	})
	// beat waits for a heartbeat of id, seen on the hub after the first after of its beats, that ok accepts.
	beat := func(id, what string, after int, ok func(Beat) bool) {
		t.Helper()
		waitFor(t, ctx, id+": "+what, func() bool {
			for _, b := range hbs.Of(id)[min(after, len(hbs.Of(id))):] {
				if ok(b) {
					return true
				}
			}
			return false
		})
	}
	for _, id := range ids {
		beat(id, "a heartbeat through the leaf, running v1.0.0", 0, func(b Beat) bool { return b.Running == "v1.0.0" })
	}

	// A target: each node fetches the archive through the leaf (direct gets of its chunks),
	// stages it and runs it.
	if err := rel.Ship(ctx, "v1.1.0", hostV2); err != nil {
		t.Fatal(err)
	}
	if err := rel.Target(ctx, "v1.1.0", ids...); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		beat(id, "running v1.1.0", 0, func(b Beat) bool { return b.Running == "v1.1.0" })
		if nodes[id].Staged("v1.1.0") != 1 {
			t.Errorf("%s staged v1.1.0 %d times, want once", id, nodes[id].Staged("v1.1.0"))
		}
	}

	declare := func(id, content string) uint64 {
		t.Helper()
		dir := filepath.Join(srv, id)
		doc := wire.Declaration{Version: wire.DeclarationVersion, Node: id, Resources: []wire.Resource{
			{Type: wire.KindDirectory, ID: dir, Spec: json.RawMessage(`{"mode": "0755"}`)},
			{Type: wire.KindFile, ID: filepath.Join(dir, "motd"), Spec: json.RawMessage(fmt.Sprintf(`{"content": %q, "mode": "0644"}`, content))},
		}}
		file := filepath.Join(t.TempDir(), "decl.json")
		if err := os.WriteFile(file, doc.Marshal(), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := rel.Run(ctx, "declare", id, file, "--nats", hubURL)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`revision (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("declare says %q, no revision", out)
		}
		rev, _ := strconv.ParseUint(m[1], 10, 64)
		return rev
	}
	motd := func(id string) string {
		b, _ := os.ReadFile(filepath.Join(srv, id, "motd"))
		return string(b)
	}
	applied := func(id string, rev uint64, content string) {
		t.Helper()
		waitFor(t, ctx, fmt.Sprintf("%s to apply declaration revision %d", id, rev), func() bool { return motd(id) == content })
		beat(id, fmt.Sprintf("a heartbeat saying revision %d applied", rev), 0, func(b Beat) bool {
			return b.DeclarationRevision == rev && b.LastReconcile != nil && b.LastReconcile.OK
		})
	}
	for _, id := range ids {
		applied(id, declare(id, "one\n"), "one\n")
	}

	// The line is cut: the hub stores a declaration the site cannot hear of.
	proxy.Cut()
	cutAt := map[string]int{}
	for _, id := range ids {
		cutAt[id] = len(hbs.Of(id))
	}
	during := map[string]uint64{}
	for _, id := range ids {
		during[id] = declare(id, "two\n")
	}
	// The nodes keep reconciling from their stores: a file deleted by hand is put back, as the
	// declaration they hold says.
	for _, id := range ids {
		if err := os.Remove(filepath.Join(srv, id, "motd")); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitFor(t, ctx, id+" to put back its deleted file while cut off", func() bool { return motd(id) == "one\n" })
		if !nodes[id].Alive() {
			t.Fatalf("%s's launcher exited while the site was cut off", id)
		}
	}
	// What the hub saw meanwhile is at most what was in flight when the line went.
	for _, id := range ids {
		if n := len(hbs.Of(id)) - cutAt[id]; n > 1 {
			t.Errorf("%s: %d heartbeats reached the hub while the line was cut", id, n)
		}
	}

	// The line is back: heartbeats reach the hub, the declaration stored meanwhile reaches the
	// nodes, and so does the next.
	before := proxy.Accepted()
	proxy.Restore()
	waitFor(t, ctx, "the leaf to connect to the hub again", func() bool { return proxy.Accepted() >= before+2 })
	for _, id := range ids {
		beat(id, "a heartbeat on the hub after the line came back", len(hbs.Of(id)), func(Beat) bool { return true })
	}
	for _, id := range ids {
		applied(id, during[id], "two\n")
	}
	for _, id := range ids {
		applied(id, declare(id, "three\n"), "three\n")
	}

	// A revocation on the hub is pushed to the leaf's resolver: the leaf refuses the node.
	creds := func(id string) string { return filepath.Join(work, id, "node.creds") }
	refused := func(id string) bool {
		err := connectAs(ctx, leafURL, creds(id), ca)
		return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
	}
	if _, err := rel.Run(ctx, "node", "revoke", ids[1], "--data", data); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the leaf to refuse the revoked node", func() bool { return refused(ids[1]) })
	if err := connectAs(ctx, leafURL, creds(ids[0]), ca); err != nil {
		t.Errorf("the leaf refuses %s, not revoked: %v", ids[0], err)
	}
	// One revoked while the line is cut: the leaf learns it from the hub when the line returns
	// (its resolver asks for newer account JWTs every 5 s).
	proxy.Cut()
	if _, err := rel.Run(ctx, "node", "revoke", ids[0], "--data", data); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()
	waitFor(t, ctx, "the leaf to refuse the node revoked while its line was cut", func() bool { return refused(ids[0]) })
}

// firstLine is a command's output up to its first newline (enrol-token prints the token first).
func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(line)
}
