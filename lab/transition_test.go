package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// beforeNoConsumers is the last commit of main before nodes stopped creating consumers
// (decision 0022): its mesh-release and mesh-host are the release side and the host a fleet ran
// before upgrading.
const beforeNoConsumers = "d112008bba08eb508e42d5377eedef2ac71d6341"

// buildAt is pkg built as version from commit rev; the test is skipped when the checkout has no
// history to build it from (failed under CI).
func buildAt(t *testing.T, rev, pkg, version string) string {
	t.Helper()
	p, err := bins.BuildAt(context.Background(), rev, pkg, version)
	if errors.Is(err, ErrNoHistory) {
		meshtest.SkipUnlessCI(t, "builds %s from commit %s, which this checkout does not hold (a shallow clone? .ci/run deepens one): %v", pkg, rev, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// released is a `mesh-release serve` process in operator mode on a fixed port.
type released struct {
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

func startReleased(t *testing.T, bin, data string, port int, args ...string) *released {
	t.Helper()
	r := &released{out: &lockedBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin, append([]string{"serve", "--data", data, "--listen", "127.0.0.1:" + strconv.Itoa(port)}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() { r.stop(t) })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(r.out.String(), "enrolment") || !strings.Contains(r.out.String(), "serving the mesh bus on") {
		select {
		case <-r.done:
			t.Fatalf("mesh-release serve exited:\n%s", r.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mesh-release serve did not start its bus and enrolment service:\n%s", r.out.String())
		}
	}
	return r
}

func (r *released) stop(t *testing.T) {
	select {
	case <-r.done:
		return
	default:
	}
	r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
		t.Errorf("mesh-release serve did not stop within 20s:\n%s", r.out.String())
	}
}

// run runs bin with args and returns its stdout, failing the test unless it exits 0.
func runOK(t *testing.T, bin string, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, bin, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\n%s%s", filepath.Base(bin), strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func runCmd(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", filepath.Base(bin), err)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

// beats counts the heartbeats each node published, as the admin sees them.
type beats struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (b *beats) since(node string, t time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last[node].After(t)
}

// watchBeats subscribes, as the admin of data's trust store, to every heartbeat on url.
func watchBeats(t *testing.T, ctx context.Context, url, data string) *beats {
	t.Helper()
	admin, err := bus.Connect(ctx, url, filepath.Join(data, trust.Dir, trust.AdminCredsFile), bus.WithCA(filepath.Join(data, trust.TLSDir, "ca.pem")),
		bus.Lasting(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	b := &beats{last: map[string]time.Time{}}
	names := wire.NamesFor("")
	if _, err := admin.NC.Subscribe(names.HeartbeatWildcard(), func(m *nats.Msg) {
		node := strings.TrimSuffix(strings.TrimPrefix(m.Subject, names.Prefix+".node."), ".heartbeat")
		b.mu.Lock()
		b.last[node] = time.Now()
		b.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

func waitLogged(t *testing.T, ctx context.Context, what string, ok func() bool, log func() string) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within the test's time\n%s", what, log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func credsIssuer(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "node.creds"))
	if err != nil {
		t.Fatal(err)
	}
	text, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(text)
	if err != nil {
		t.Fatal(err)
	}
	return uc.Issuer
}

// TestNodesEnrolledBeforeNoConsumersRenewTheirUsersAndTheCutOverEndsTheTransition runs the
// upgrade of decision 0024 with real processes: a release side and two hosts from before
// decision 0022, enrolled with it; the release side upgraded (the transition starts); one host
// upgraded, which renews its user by itself; then `node cut-over`, refused while the other has
// not renewed, and with --force: the old host is refused from then on, the upgraded one goes on.
func TestNodesEnrolledBeforeNoConsumersRenewTheirUsersAndTheCutOverEndsTheTransition(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-release and mesh-host from an earlier commit")
	}
	oldRelease := buildAt(t, beforeNoConsumers, PkgRelease, "v0.9.0-lab")
	oldHost := buildAt(t, beforeNoConsumers, PkgHost, "v1.0.0")
	newRelease := build(t, PkgRelease, "v0.10.0-lab")
	newHost := build(t, PkgHost, "v1.1.0")
	ctx := meshtest.Context(t, 4*time.Minute)

	data := t.TempDir()
	port := freePorts(t, 1)[0]
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	serve := startReleased(t, oldRelease, data, port)
	seen := watchBeats(t, ctx, url, data)

	nodes := map[string]*Node{}
	for _, name := range []string{"node-a", "node-b"} {
		out := runOK(t, oldRelease, "enrol-token", "--data", data, "--nats", url, "--node", name, "--url", url)
		token := ""
		for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
			if f := strings.Fields(sc.Text()); len(f) == 1 && strings.HasPrefix(f[0], wire.TokenPrefix) {
				token = f[0]
			}
		}
		if token == "" {
			t.Fatalf("enrol-token printed no token:\n%s", out)
		}
		n := &Node{Name: name, Root: t.TempDir(), Launcher: build(t, PkgLauncher, "v0.0.0-lab"),
			Env: []string{"MESH_HOST_HEARTBEAT_INTERVAL=500ms", "MESH_HOST_RECONCILE_INTERVAL=1s"}}
		runOK(t, oldHost, "enrol", "--root", n.Root, "--node", name, token)
		if err := n.PlaceVersion("v1.0.0", oldHost); err != nil {
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
				t.Logf("%s:\n%s", name, n.Log())
			}
		})
		nodes[name] = n
	}
	start := time.Now()
	for name, n := range nodes {
		waitLogged(t, ctx, name+" heartbeats through the release side from before", func() bool { return seen.since(name, start) }, n.Log)
	}
	oldSigner := credsIssuer(t, nodes["node-a"].Root)

	// The release side is upgraded: the transition starts, and the old hosts go on.
	serve.stop(t)
	serve = startReleased(t, newRelease, data, port)
	store, err := trust.Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	if !store.InTransition() || store.LegacySigningPublicKey() != oldSigner {
		t.Fatalf("the upgraded release side: in transition %v, first signing key %s, want true, %s", store.InTransition(), store.LegacySigningPublicKey(), oldSigner)
	}
	upgraded := time.Now()
	for name, n := range nodes {
		waitLogged(t, ctx, name+" (a host from before) heartbeats through the upgraded release side", func() bool { return seen.since(name, upgraded) }, n.Log)
	}

	// node-a runs the new host: it renews its user by itself.
	a := nodes["node-a"]
	if _, err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.PlaceVersion("v1.1.0", newHost); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, ctx, "node-a's user signed again with the second key", func() bool { return credsIssuer(t, a.Root) == store.NodesSigningPublicKey() },
		func() string { return a.Log() + serve.out.String() })
	renewed := time.Now()
	waitLogged(t, ctx, "node-a heartbeats with its renewed user", func() bool { return seen.since("node-a", renewed) }, a.Log)

	// The cut-over waits for node-b, which still runs the host from before.
	out := runOK(t, newRelease, "node", "cut-over", "--dry-run", "--data", data, "--nats", url)
	if !strings.Contains(out, "1 node renewed, 1 not yet: node-b") {
		t.Errorf("node cut-over --dry-run:\n%s", out)
	}
	if code, _, errOut := runCmd(t, newRelease, "node", "cut-over", "--data", data, "--nats", url); code != 1 || !strings.Contains(errOut, "1 node has not renewed") {
		t.Errorf("node cut-over with node-b not renewed: exit %d, %s", code, errOut)
	}
	runOK(t, newRelease, "node", "cut-over", "--force", "--data", data, "--nats", url)
	cut := time.Now()
	waitLogged(t, ctx, "node-a heartbeats after the cut-over", func() bool { return seen.since("node-a", cut) }, a.Log)
	time.Sleep(2 * time.Second) // four of node-b's heartbeat intervals
	if seen.since("node-b", cut.Add(500*time.Millisecond)) {
		t.Errorf("node-b, holding its user from before, heartbeats after a forced cut-over")
	}
	if code, out, _ := runCmd(t, newRelease, "node", "cut-over", "--data", data, "--nats", url); code != 0 || !strings.Contains(out, "nothing to cut over") {
		t.Errorf("node cut-over again: exit %d, %s", code, out)
	}
}
