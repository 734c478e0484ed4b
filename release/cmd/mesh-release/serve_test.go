package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// runServe runs serve with args until the test ends (or stop is called) and returns its client
// URL, and what it printed and logged so far.
func runServe(t *testing.T, args ...string) (url string, out, errOut *meshtest.Buffer, stop func()) {
	t.Helper()
	return runServeWith(t, serveExtras(), args...)
}

// runServeWith is runServe with what serve runs beside the bus given.
func runServeWith(t *testing.T, extras []serveExtra, args ...string) (url string, out, errOut *meshtest.Buffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut = &meshtest.Buffer{}, &meshtest.Buffer{}
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serveWith(ctx, &stdio{out: out, err: errOut, getenv: func(string) string { return "" }}, flagSetFor("serve"), args, func(u string) { ready <- u }, extras)
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(stop)
	select {
	case url = <-ready:
	case err := <-done:
		stopped = true
		t.Fatalf("serve: %v (stderr %s)", err, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve was not ready within 30s")
	}
	return url, out, errOut, stop
}

// exported reads the `export NAME=VALUE` lines serve printed.
func exported(out string) map[string]string {
	env := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  export (\w+)=(\S+)$`).FindAllStringSubmatch(out, -1) {
		env[m[1]] = m[2]
	}
	return env
}

// The decision: serve runs the bus in operator mode with TLS unless told otherwise, and says
// where the release side's credentials and the CA are, as lines a shell takes. With them a
// command works; without credentials, or without the CA, it is refused and says why. A restart
// on the same data keeps them working.
func TestServeRequiresCredentialsAndTLSByDefaultAndSaysWhereTheyAre(t *testing.T) {
	data := t.TempDir()
	url, out, _, stop := runServe(t, "--data", data, "--listen", "127.0.0.1:0")
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("serve's URL is %s, want tls://", url)
	}
	env := exported(out.String())
	want := map[string]string{
		envNATSURL:   url,
		envNATSCreds: filepath.Join(data, "trust", "admin.creds"),
		envNATSCA:    filepath.Join(data, "tls", "ca.pem"),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("serve says export %s=%q, want %q; it printed:\n%s", k, env[k], v, out.String())
		}
	}
	if code, o, e := runMain(t, env, "init"); code != 0 || !strings.HasPrefix(o, "ready:") {
		t.Fatalf("init with serve's environment: exit %d, %q, %q", code, o, e)
	}
	if code, o, e := runMain(t, nil, "init", "--nats", url, "--creds", want[envNATSCreds], "--ca", want[envNATSCA]); code != 0 {
		t.Fatalf("init with --nats, --creds, --ca: exit %d, %q, %q", code, o, e)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no credentials", map[string]string{envNATSURL: url, envNATSCA: want[envNATSCA]}, "Authorization Violation"},
		{"no CA", map[string]string{envNATSURL: url, envNATSCreds: want[envNATSCreds]}, "x509: certificate signed by unknown authority"},
	} {
		if code, _, e := runMain(t, tc.env, "init"); code != 1 || !strings.Contains(strings.ToLower(e), strings.ToLower(tc.want)) || strings.Count(e, "\n") != 1 {
			t.Errorf("init with %s: exit %d, stderr %q; want exit 1 and one line saying %q", tc.name, code, e, tc.want)
		}
	}

	stop()
	url2, out2, _, _ := runServe(t, "--data", data, "--listen", strings.TrimPrefix(url, "tls://"))
	if env2 := exported(out2.String()); env2[envNATSCreds] != env[envNATSCreds] || env2[envNATSCA] != env[envNATSCA] || url2 != url {
		t.Errorf("after a restart serve says %v, before %v", env2, env)
	}
	if code, o, e := runMain(t, env, "init"); code != 0 {
		t.Fatalf("init with the same environment after a restart: exit %d, %q, %q", code, o, e)
	}
}

// --insecure-no-auth serves as before: no credentials, no TLS, and a warning that says so.
func TestServeInsecureNoAuthWarnsAndNeedsNoCredentials(t *testing.T) {
	data := t.TempDir()
	url, out, errOut, _ := runServe(t, "--data", data, "--listen", "127.0.0.1:0", "--insecure-no-auth")
	if !strings.HasPrefix(url, "nats://") || strings.Contains(out.String(), "export") {
		t.Errorf("serve --insecure-no-auth: url %s, printed:\n%s", url, out.String())
	}
	if logged := errOut.String(); !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, "without authentication or TLS") || strings.Count(logged, "\n") != 1 {
		t.Errorf("serve --insecure-no-auth logged:\n%s\nwant one warning", logged)
	}
	if code, o, e := runMain(t, map[string]string{envNATSURL: url}, "init"); code != 0 {
		t.Fatalf("init: exit %d, %q, %q", code, o, e)
	}
	for _, dir := range []string{"trust", "tls"} {
		if _, err := os.Stat(filepath.Join(data, dir)); err == nil {
			t.Errorf("serve --insecure-no-auth made %s", dir)
		}
	}
}

// --tls-name adds names to the certificate serve makes; --tls-cert and --tls-key replace it.
func TestServeTLSFlags(t *testing.T) {
	data := t.TempDir()
	_, out, _, stop := runServe(t, "--data", data, "--listen", "127.0.0.1:0", "--tls-name", "bus.example,10.9.8.7", "--tls-name", "other.example")
	if !strings.Contains(out.String(), "names localhost, 127.0.0.1, ::1, bus.example, 10.9.8.7, other.example (") {
		t.Errorf("serve printed:\n%s", out.String())
	}
	stop()
	// Another bus's certificate, given: the clients trust the CA that signed it.
	own := t.TempDir()
	_, out, _, _ = runServe(t, "--data", own, "--listen", "127.0.0.1:0",
		"--tls-cert", filepath.Join(data, "tls", "server.pem"), "--tls-key", filepath.Join(data, "tls", "server.key"))
	env := exported(out.String())
	if _, ok := env[envNATSCA]; ok || !strings.Contains(out.String(), "clients trust the CA that signed it") {
		t.Errorf("serve with --tls-cert printed:\n%s", out.String())
	}
	env[envNATSCA] = filepath.Join(data, "tls", "ca.pem")
	if code, o, e := runMain(t, env, "init"); code != 0 {
		t.Fatalf("init against the given certificate: exit %d, %q, %q", code, o, e)
	}
	for _, args := range [][]string{
		{"--tls-cert", "x.pem"},
		{"--tls-key", "x.key"},
		{"--tls-cert", "x.pem", "--tls-key", "x.key", "--tls-name", "a"},
		{"--insecure-no-auth", "--tls-name", "a"},
	} {
		if code, _, e := runMain(t, nil, append([]string{"serve", "--data", t.TempDir()}, args...)...); code != 2 {
			t.Errorf("serve %q: exit %d, %q; want a usage error", args, code, e)
		}
	}
}

// init --print-templates gives an operator with their own NATS the account and permissions to
// set up, and needs no bus to do it.
func TestInitPrintsTheTemplatesWithoutABus(t *testing.T) {
	code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, "init", "--print-templates", "--prefix", "fleet")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, s := range []string{"fleet.node.<node>.heartbeat", "_INBOX.node.<node>.>", "$JS.mesh.API.DIRECT.GET.KV_fleet_declarations.$KV.fleet_declarations.<node>", "$KV.fleet_declarations.<node>", "fleet.enrol.node", "JetStream",
		"$JS.API.DIRECT.GET.>", "$KV.>", "mesh-nodes", "_INBOX.node.>"} {
		if !strings.Contains(out, s) {
			t.Errorf("the templates lack %s:\n%s", s, out)
		}
	}
	// A node creates no consumer (docs/security.md): the templates give none.
	for _, s := range []string{"CONSUMER.CREATE", "$JS.FC"} {
		if strings.Contains(out, s) {
			t.Errorf("the templates give a node %s:\n%s", s, out)
		}
	}
}

// What another command's file adds to serve gets its flag parsed, and starts once the bus is
// ready, with the server and its identities: an admin connection in-process works.
func TestServeRunsWhatOtherCommandsAddToIt(t *testing.T) {
	started := make(chan string, 1)
	extra := serveExtra(func(fs *flag.FlagSet) func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
		greeting := fs.String("greeting", "", "")
		return func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
			if store == nil {
				return errors.New("no identities")
			}
			c, err := srv.Connect(ctx, store.AdminCreds())
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := c.JS.KeyValue(ctx, n.Declarations()); err != nil {
				return err
			}
			started <- *greeting
			return nil
		}
	})
	runServeWith(t, append(serveExtras(), extra), "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--greeting", "hello")
	select {
	case g := <-started:
		if g != "hello" {
			t.Errorf("the extra's flag was %q", g)
		}
	default:
		t.Fatal("serve was ready before the extra started")
	}
}

// serve --key keeps the targets its key signed from expiring; a key it cannot use stops serve
// before it serves, naming the flag, and a --target-ttl out of range is a usage error.
func TestServeWithAKeySaysItReSignsAndRefusesAKeyItCannotUse(t *testing.T) {
	keys := t.TempDir()
	if code, _, e := runMain(t, nil, "keygen", "--out", keys); code != 0 {
		t.Fatalf("keygen: %s", e)
	}
	_, out, _, _ := runServe(t, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--insecure-no-auth", "--key", filepath.Join(keys, "release.key"))
	if !strings.Contains(out.String(), "targets: re-signing those key") {
		t.Errorf("serve --key printed:\n%s", out.String())
	}
	code, _, e := runMain(t, nil, "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--insecure-no-auth", "--key", filepath.Join(keys, "missing.key"))
	if code != 1 || !strings.Contains(e, "--key") {
		t.Errorf("serve with a missing key: exit %d, %q", code, e)
	}
	if code, _, e := runMain(t, nil, "serve", "--data", t.TempDir(), "--insecure-no-auth", "--key", filepath.Join(keys, "release.key"), "--target-ttl", "1s"); code != 2 {
		t.Errorf("serve --target-ttl 1s: exit %d, %q; want a usage error", code, e)
	}
}
