package lab

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// enrolToken is a token for node from `mesh-release enrol-token`.
func enrolToken(t *testing.T, release, data, url, node string) string {
	t.Helper()
	out := runOK(t, release, "enrol-token", "--data", data, "--nats", url, "--node", node, "--url", url)
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		if f := strings.Fields(sc.Text()); len(f) == 1 && strings.HasPrefix(f[0], wire.TokenPrefix) {
			return f[0]
		}
	}
	t.Fatalf("enrol-token printed no token:\n%s", out)
	return ""
}

// A root enrolled as web-01, its host running, is enrolled as web-02 with real processes:
// refused without --replace, naming both nodes, the files left as they were; with --replace the
// files are web-02's, and the running host — after its server restarts, so it reconnects — still
// heartbeats as web-01 with the credentials it started with.
func TestEnrollingARunningHostsRootAsAnotherNodeIsRefusedAndTheHostKeepsItsCredentials(t *testing.T) {
	release := build(t, PkgRelease, "v0.10.0-lab")
	host := build(t, PkgHost, "v1.0.0")
	launcher := build(t, PkgLauncher, "v0.0.0-lab")
	ctx := meshtest.Context(t, 4*time.Minute)

	data := t.TempDir()
	port := freePorts(t, 1)[0]
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	serve := startReleased(t, release, data, port)
	seen := watchBeats(t, ctx, url, data)

	n := &Node{Name: "web-01", Root: t.TempDir(), Launcher: launcher,
		Env: []string{"MESH_HOST_HEARTBEAT_INTERVAL=500ms", "MESH_HOST_RECONCILE_INTERVAL=1s"}}
	runOK(t, host, "enrol", "--root", n.Root, enrolToken(t, release, data, url, "web-01"))
	if err := n.PlaceVersion("v1.0.0", host); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n.Stop(c)
		if t.Failed() {
			t.Logf("web-01:\n%s", n.Log())
		}
	})
	start := time.Now()
	waitLogged(t, ctx, "web-01 heartbeats", func() bool { return seen.since("web-01", start) }, n.Log)

	files := func() string {
		var b strings.Builder
		for _, f := range []string{"host.json", "node.creds"} {
			data, err := os.ReadFile(filepath.Join(n.Root, f))
			if err != nil {
				t.Fatal(err)
			}
			b.Write(data)
		}
		return b.String()
	}
	before := files()
	token := enrolToken(t, release, data, url, "web-02")
	code, out, errOut := runCmd(t, host, "enrol", "--root", n.Root, token)
	want := "mesh-host enrol: the root " + n.Root + " is enrolled as node web-01, and the token is for node web-02"
	if code != 1 || !strings.HasPrefix(errOut, want) || !strings.Contains(errOut, "--replace") {
		t.Fatalf("mesh-host enrol --root <web-01's root> <web-02's token>: exit %d\n%s%s\nwant exit 1, %q… naming --replace", code, out, errOut, want)
	}
	if files() != before {
		t.Fatal("the refused enrolment changed host.json or node.creds")
	}

	// With --replace the root is web-02's; the host running there is still web-01 until it is
	// restarted, whatever its connection does meanwhile.
	runOK(t, host, "enrol", "--root", n.Root, "--replace", token)
	if files() == before {
		t.Fatal("mesh-host enrol --replace wrote nothing")
	}
	serve.stop(t)
	startReleased(t, release, data, port)
	restarted := time.Now()
	waitLogged(t, ctx, "web-01 heartbeats after its server restarted", func() bool { return seen.since("web-01", restarted) },
		func() string { return n.Log() })
	if strings.Contains(n.Log(), "Permissions Violation") {
		t.Errorf("the running host was refused on its subjects:\n%s", n.Log())
	}
}
