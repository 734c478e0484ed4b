package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/release/trustroot"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// trustedBus is the bus `serve` runs in operator mode: the trust store and CA in data, TLS (the
// server's certificate file carries its CA, which enrolling nodes pin), the mesh's buckets, an
// admin connection.
type trustedBus struct {
	data, url, ca string
	admin         *bus.Conn
	srv           *bus.Server
	store         *trust.Store
}

func startTrustedBus(t testing.TB) *trustedBus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := &trustedBus{data: t.TempDir()}
	store, err := trust.Ensure(b.data)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := trust.EnsureTLS(b.data, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.ca = ca
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: b.data, Listen: "127.0.0.1:0", Auth: store, TLSCert: cert, TLSKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	b.srv, b.store = srv, store
	b.url = "tls://" + srv.Addr().String()
	if b.admin, err = bus.Connect(ctx, b.url, store.AdminCreds(), bus.WithCA(ca)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.admin.Close)
	if err := bus.Init(ctx, b.admin.JS, wire.NamesFor("")); err != nil {
		t.Fatal(err)
	}
	return b
}

// startEnrolService runs `enrol-service` until the test ends and waits until it answers.
func (b *trustedBus) startEnrolService(t testing.TB, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out meshtest.Buffer
	errc := make(chan error, 1)
	go func() {
		s := &stdio{in: strings.NewReader(""), out: &out, err: &out, getenv: func(string) string { return "" }}
		errc <- enrolServiceCmd(ctx, s, flagSetFor("enrol-service"), append([]string{"--data", b.data, "--nats", b.url}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("enrol-service: %v", err)
		}
	})
	meshtest.Eventually(t, "enrol-service answering", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("enrol-service: %v\n%s", err, out.String())
		default:
		}
		return strings.Contains(out.String(), "answering on mesh.enrol.node")
	})
}

// token runs `enrol-token` and returns the line it printed.
func (b *trustedBus) token(t testing.TB, args ...string) string {
	t.Helper()
	code, out, errOut := runMain(t, nil, append([]string{"enrol-token", "--data", b.data, "--nats", b.url}, args...)...)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, wire.TokenPrefix) {
		t.Fatalf("enrol-token: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	return strings.TrimSpace(out)
}

// goBuild builds pkg stamped with version into the test's temp dir.
func goBuild(t testing.TB, pkg, version string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version="+version, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// hostEnrol runs `mesh-host enrol` as the built binary.
func hostEnrol(t testing.TB, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(bin, append([]string{"enrol"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, o.String(), e.String()
}

func TestEnrolTokenAndNodeCommandsRefuseUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"enrol-token", "--node", "a.b"}, "--node: node id \"a.b\""},
		{[]string{"enrol-token", "--ttl", "1s"}, "--ttl 1s is not between 1m and 720h0m0s"},
		{[]string{"enrol-token", "extra"}, "unexpected argument"},
		{[]string{"node"}, "want revoke ID"},
		{[]string{"node", "forget", "x"}, "unknown node command \"forget\""},
		{[]string{"node", "revoke"}, "want revoke ID, one node id"},
		{[]string{"node", "revoke", "a.b"}, "node id \"a.b\""},
		{[]string{"node", "cut-over", "x"}, "cut-over takes no arguments"},
		{[]string{"node", "revoke", "x", "--force"}, "--dry-run and --force go with cut-over"},
	} {
		code, _, errOut := runMain(t, nil, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.err) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, errOut, tc.err)
		}
	}
	code, _, errOut := runMain(t, nil, "enrol-token", "--data", t.TempDir())
	if code != exitError || !strings.Contains(errOut, "no trust store in") {
		t.Errorf("enrol-token without a trust store: exit %d, stderr %q", code, errOut)
	}
}

// The whole path, between real processes: the release side makes a token, the built mesh-host
// enrols with it, the real launcher runs the host, and its heartbeat arrives under the node's own
// identity. The same token is then refused, a token whose pin is not the bus's CA is refused
// naming both fingerprints, and `node revoke` silences the node.
func TestEnrolWithTheBuiltHostThenHeartbeatThenRevoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-host and mesh-launcher")
	}
	b := startTrustedBus(t)
	pubFile := filepath.Join(t.TempDir(), "release.pub")
	os.WriteFile(pubFile, []byte(build.PublicKeyString(meshtest.ReleaseKey.Public)+"\n"), 0o644)
	b.startEnrolService(t, "--key-pub", pubFile)
	hostBin := goBuild(t, "github.com/novox/mesh-host/host/cmd/mesh-host", "v1.0.0")
	launcherBin := goBuild(t, "github.com/novox/mesh-host/launcher/cmd/mesh-launcher", "v0.0.0-test")

	root := t.TempDir()
	// As the package leaves a node: the seeded version installed, and a setting of the
	// operator's in host.json that enrolment must keep.
	if out, err := exec.Command(launcherBin, "install", "--root", root, hostBin).CombinedOutput(); err != nil {
		t.Fatalf("mesh-launcher install: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(root, "host.json"), []byte(`{"heartbeat_interval": "1s"}`), 0o600)
	sub, err := b.admin.NC.SubscribeSync(wire.NamesFor("").Heartbeat("web-01"))
	if err != nil {
		t.Fatal(err)
	}
	b.admin.NC.Flush()

	// A root of trust is published: the token pins it, and the node stores it on enrolling.
	roots := filepath.Join(t.TempDir(), "roots")
	mustRun(t, nil, "trust", "init", "--out", roots, "--releases-key", pubFile)
	busArgs := []string{"--nats", b.url, "--creds", b.store.AdminCreds(), "--ca", b.ca}
	mustRun(t, nil, append([]string{"trust", "publish", filepath.Join(roots, "root.1.json")}, busArgs...)...)
	r1, err := trustroot.ReadFile(filepath.Join(roots, "root.1.json"))
	if err != nil {
		t.Fatal(err)
	}

	token := b.token(t, "--node", "web-01", "--url", b.url)
	began := time.Now()
	code, out, errOut := hostEnrol(t, hostBin, "--root", root, token)
	enrolled := time.Since(began)
	if code != 0 || !strings.Contains(out, "enrolled node web-01") || !strings.Contains(out, "trusts root v1 ("+r1.Fingerprint()+"), the root the token pins") {
		t.Fatalf("mesh-host enrol: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if stored, err := trustroot.ReadFile(filepath.Join(root, "trust", "root.1.json")); err != nil || stored.Fingerprint() != r1.Fingerprint() {
		t.Fatalf("the node's stored root: %v, %v", stored.Fingerprint(), err)
	}
	launcher := exec.Command(launcherBin, "run", "--root", root)
	var logs meshtest.Buffer
	launcher.Stdout, launcher.Stderr = &logs, &logs
	launcher.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		launcher.Process.Signal(syscall.SIGTERM)
		launcher.Wait()
	}()
	m, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("no heartbeat from web-01 after enrolment: %v\nlauncher and host:\n%s", err, logs.String())
	}
	first := time.Since(began)
	var hb wire.Heartbeat
	if err := wire.DecodeReport(m.Data, &hb); err != nil || hb.Node != "web-01" {
		t.Fatalf("heartbeat %s: %v", m.Data, err)
	}
	if os.Getenv("MESH_TEST_SHOW_LOGS") != "" {
		defer func() { t.Logf("launcher and host:\n%s", logs.String()) }()
	}
	t.Logf("figure: token to enrolled %s (mesh-host enrol, a process); token to first heartbeat %s (enrol, then mesh-launcher run starting the host)",
		enrolled.Round(time.Millisecond), first.Round(time.Millisecond))

	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(root, "host.json"))
	json.Unmarshal(raw, &cfg)
	if cfg["heartbeat_interval"] != "1s" || cfg["node"] != "web-01" || fmt.Sprint(cfg["trusted_keys"]) != fmt.Sprint([]any{build.PublicKeyString(meshtest.ReleaseKey.Public)}) {
		t.Fatalf("host.json after enrolment:\n%s", raw)
	}

	t.Run("the same token again", func(t *testing.T) {
		code, _, errOut := hostEnrol(t, hostBin, "--root", t.TempDir(), token)
		if code != 1 || !strings.Contains(errOut, "refused (409)") || !strings.Contains(errOut, "was already used") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
	})
	t.Run("a token pinning another CA", func(t *testing.T) {
		p, _ := wire.ParseToken(b.token(t))
		real := p.CASHA256
		p.CASHA256 = strings.Repeat("ab", 32)
		forged, _ := wire.FormatToken(p)
		code, _, errOut := hostEnrol(t, hostBin, "--root", t.TempDir(), "--node", "web-02", forged)
		if code != 1 || !strings.Contains(errOut, "pins CA sha256 "+p.CASHA256) || !strings.Contains(errOut, real) {
			t.Fatalf("exit %d, stderr %q; want both %s and the bus's %s named", code, errOut, p.CASHA256, real)
		}
	})
	t.Run("a token pinning a root the bus does not hold", func(t *testing.T) {
		token := b.token(t, "--url", b.url)
		// The bus's root v1 replaced behind the release side's back (Publish never does).
		other := filepath.Join(t.TempDir(), "other")
		mustRun(t, nil, "trust", "init", "--out", other, "--releases-key", pubFile)
		forged, _ := os.ReadFile(filepath.Join(other, "root.1.json"))
		kv, err := b.admin.JS.KeyValue(context.Background(), wire.NamesFor("").Releases())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(context.Background(), wire.RootKey(1), forged); err != nil {
			t.Fatal(err)
		}
		defer kv.Put(context.Background(), wire.RootKey(1), r1.Marshal())
		dir := t.TempDir()
		code, _, errOut := hostEnrol(t, hostBin, "--root", dir, "--node", "web-03", token)
		if code != 1 || !strings.Contains(errOut, "the token pins root v1 ("+r1.Fingerprint()+"), and the bus's does not match") || !strings.Contains(errOut, "nothing was written") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "host.json")); err == nil {
			t.Fatal("host.json was written for a root that does not match")
		}
	})
	t.Run("node cut-over of a store made since decision 0022", func(t *testing.T) {
		code, out, errOut := runMain(t, nil, "node", "cut-over", "--data", b.data, "--nats", b.url)
		if code != 0 || !strings.Contains(out, "nothing to cut over") {
			t.Fatalf("node cut-over: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("node revoke", func(t *testing.T) {
		code, out, errOut := runMain(t, nil, "node", "revoke", "web-01", "--data", b.data, "--nats", b.url)
		if code != 0 || !strings.HasPrefix(out, "revoked node web-01 (key U") {
			t.Fatalf("node revoke: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		// What was in flight arrives; then the node is silent: its key is refused.
		time.Sleep(500 * time.Millisecond)
		for {
			if _, err := sub.NextMsg(10 * time.Millisecond); err != nil {
				break
			}
		}
		if m, err := sub.NextMsg(4 * time.Second); err == nil {
			t.Fatalf("a heartbeat arrived after the node was revoked: %s", m.Data)
		} else if err != nats.ErrTimeout {
			t.Fatal(err)
		}
		code, out, _ = runMain(t, nil, "node", "revoke", "web-01", "--data", b.data, "--nats", b.url)
		if code != 0 || !strings.Contains(out, "was already revoked") {
			t.Fatalf("revoking again: exit %d, %q", code, out)
		}
		code, _, errOut = runMain(t, nil, "node", "revoke", "nobody", "--data", b.data, "--nats", b.url)
		if code != 1 || !strings.Contains(errOut, "refused (404): no node nobody is enrolled") {
			t.Fatalf("revoking an unknown node: exit %d, %q", code, errOut)
		}
	})
}

// serve runs the enrolment service in its own process, on in-process connections, with the keys
// its flags name.
func TestServeRunsTheEnrolmentServiceInProcess(t *testing.T) {
	b := startTrustedBus(t)
	pubFile := filepath.Join(t.TempDir(), "release.pub")
	os.WriteFile(pubFile, []byte(build.PublicKeyString(meshtest.ReleaseKey.Public)+"\n"), 0o644)
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var f serveEnrolFlags
	f.register(fs)
	if err := fs.Parse([]string{"--key-pub", pubFile, "--target-key-pub", pubFile}); err != nil {
		t.Fatal(err)
	}
	keys, targetKeys, err := f.keys()
	if err != nil || len(keys) != 1 || len(targetKeys) != 1 {
		t.Fatalf("keys %v, target keys %v, %v", keys, targetKeys, err)
	}
	stop, err := serveEnrolment(context.Background(), b.srv, b.store, b.ca, wire.NamesFor(""), keys, targetKeys, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	code, _, errOut := runMain(t, nil, "node", "revoke", "nobody", "--data", b.data, "--nats", b.url)
	if code != 1 || !strings.Contains(errOut, "refused (404): no node nobody is enrolled") {
		t.Fatalf("the in-process service did not answer: exit %d, %q", code, errOut)
	}
	os.WriteFile(pubFile, []byte("not a key"), 0o644)
	if _, _, err := f.keys(); err == nil || !strings.Contains(err.Error(), "--key-pub "+pubFile) {
		t.Fatalf("a bad key file: %v", err)
	}
}

// The path an operator takes: `serve` (operator mode, its own TLS, the enrolment service in
// process, the release key given to nodes), `enrol-token` with what serve told to export, and
// the built `mesh-host enrol`; the node's own creds then reach the bus.
func TestServeEnrolsANodeWithTheBuiltHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-host")
	}
	data := t.TempDir()
	pubFile := filepath.Join(t.TempDir(), "release.pub")
	os.WriteFile(pubFile, []byte(build.PublicKeyString(meshtest.ReleaseKey.Public)+"\n"), 0o644)
	url, out, _, _ := runServe(t, "--data", data, "--listen", "127.0.0.1:0", "--key-pub", pubFile)
	if !strings.Contains(out.String(), "enrolment: answering `mesh-host enrol` on mesh.enrol.node") {
		t.Fatalf("serve does not say it answers enrolment:\n%s", out.String())
	}
	env := exported(out.String())
	code, tok, errOut := runMain(t, env, "enrol-token", "--data", data, "--node", "web-01", "--url", url)
	if code != 0 {
		t.Fatalf("enrol-token: exit %d, %s", code, errOut)
	}
	hostBin := goBuild(t, "github.com/novox/mesh-host/host/cmd/mesh-host", "v1.0.0")
	root := t.TempDir()
	code, o, e := hostEnrol(t, hostBin, "--root", root, strings.TrimSpace(tok))
	if code != 0 {
		t.Fatalf("mesh-host enrol: exit %d\n%s\n%s", code, o, e)
	}
	nc, err := nats.Connect(url, nats.UserCredentials(filepath.Join(root, "node.creds")), nats.RootCAs(filepath.Join(root, "ca.pem")),
		nats.CustomInboxPrefix(wire.NodeInboxPrefix("web-01")))
	if err != nil {
		t.Fatalf("the node's own creds: %v", err)
	}
	defer nc.Close()
	if err := nc.Publish(wire.NamesFor("").Heartbeat("web-01"), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil || nc.LastError() != nil {
		t.Fatalf("heartbeat as web-01: %v %v", err, nc.LastError())
	}
}
