package systemd

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/lab"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// hostDefaultHeartbeat is the host's heartbeat interval when host.json sets none, as on a node
// enrolment alone configured (host/config).
const hostDefaultHeartbeat = 30 * time.Second

// enrolWorld is a lab whose bus is the real `mesh-release serve` built from this tree, in
// operator mode with TLS (its certificate naming the bridge address nodes dial), with its
// enrolment service, the release key nodes are told to trust (--key-pub) and that keeps targets
// signed (--key). The test is its admin: every command it runs carries admin.creds and the CA.
type enrolWorld struct {
	*world
	data  string  // serve's --data: trust/, tls/
	url   string  // the bus on this machine's loopback, tls://127.0.0.1:PORT
	creds string  // DATA/trust/admin.creds
	ca    string  // DATA/tls/ca.pem
	serve *served // the serve process
}

// TestEnrolledNode proves seed 0057 under real systemd: a node given the package and a token —
// nothing else, no host.json written by hand — enrols over TLS through the bus's enrolment
// service, runs and heartbeats as its own user in the nodes account, upgrades by a signed target
// (watching its keys and fetching the release through the nodes account's imports), and once
// revoked is refused by the bus while its unit keeps running.
func TestEnrolledNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	w := newEnrolWorld(t, ctx)
	n, _, err := w.lab.Boot(ctx, "enrolled")
	if err != nil {
		t.Fatal(err)
	}

	var token string
	ok := t.Run("package install with a token enrols the node, which runs confirmed and heartbeats over TLS", func(t *testing.T) {
		token = w.token(t, ctx, n.Name)
		deb := copyDeb(t, n, w.deb)
		start := time.Now() // the token's use: nothing else is done to the node
		out, err := n.Exec(ctx, "env", "MESH_ENROL_TOKEN="+token, "dpkg", "-i", deb)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("MESH_ENROL_TOKEN=… dpkg -i: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "enrolled node "+n.Name+" (key U") {
			t.Errorf("dpkg -i (postinst) does not say the node enrolled:\n%s", out)
		}
		want := "running " + packaged + " (confirmed)"
		p := waitShow(t, ctx, n, "STATUS= "+want, func(p map[string]string) bool { return p["StatusText"] == want })
		if p["ActiveState"] != "active" || p["SubState"] != "running" || p["NRestarts"] != "0" {
			t.Errorf("after dpkg -i: %v, want active (running) with no restarts", p)
		}
		confirmed := w.waitBeat(t, ctx, n, packaged+" running and confirmed", lab.RunningConfirmed(packaged))
		first, _ := w.beats.First(func(b lab.Beat) bool { return b.Node == n.Name })
		t.Logf("figure: enrolment, token to first heartbeat on the bus: %s (MESH_ENROL_TOKEN=… dpkg -i took %s; %s running confirmed on the bus after %s)",
			first.At.Sub(start).Round(time.Millisecond), took.Round(time.Millisecond), packaged, confirmed.At.Sub(start).Round(time.Millisecond))

		root := filepath.Join(n.Root(), "var/lib/mesh-host")
		for name, mode := range map[string]os.FileMode{"node.creds": 0o600, "host.json": 0o600, "ca.pem": 0} {
			fi, err := os.Stat(filepath.Join(root, name))
			if err != nil {
				t.Errorf("enrolment wrote no %s: %v", name, err)
			} else if mode != 0 && fi.Mode().Perm() != mode {
				t.Errorf("%s is %v, want %v", name, fi.Mode().Perm(), mode)
			}
		}
		if ca, err := os.ReadFile(filepath.Join(root, "ca.pem")); err != nil || !w.servesCA(t, ca) {
			t.Errorf("the node's ca.pem (%v) is not the bus's CA %s", err, w.ca)
		}
		var cfg struct {
			Node        string          `json:"node"`
			NATSURLs    []string        `json:"nats_urls"`
			NATSCreds   string          `json:"nats_creds"`
			NATSCA      string          `json:"nats_ca"`
			JSAPIPrefix string          `json:"js_api_prefix"`
			TrustedKeys []string        `json:"trusted_keys"`
			Heartbeat   json.RawMessage `json:"heartbeat_interval"`
		}
		b, err := os.ReadFile(filepath.Join(root, "host.json"))
		if err == nil {
			err = json.Unmarshal(b, &cfg)
		}
		if err != nil {
			t.Fatalf("host.json: %v\n%s", err, b)
		}
		if cfg.Node != n.Name || !slices.Equal(cfg.NATSURLs, []string{w.lab.BusURL}) || cfg.JSAPIPrefix != wire.NodeJSAPIPrefix ||
			cfg.NATSCreds != "/var/lib/mesh-host/node.creds" || cfg.NATSCA != "/var/lib/mesh-host/ca.pem" || !slices.Equal(cfg.TrustedKeys, []string{w.key}) {
			t.Errorf("host.json enrolment wrote:\n%s\nwant node %s, nats_urls [%s], js_api_prefix %s, the root's node.creds and ca.pem, trusted_keys [%s]",
				b, n.Name, w.lab.BusURL, wire.NodeJSAPIPrefix, w.key)
		}
		if cfg.Heartbeat != nil {
			t.Errorf("host.json sets heartbeat_interval %s; this test reads the node's silence at the default %s", cfg.Heartbeat, hostDefaultHeartbeat)
		}

		// The token is spent: the same token, presented again (to a root of its own, so nothing of
		// the node's is touched), is refused by the service as used.
		out, err = n.Exec(ctx, "/usr/share/mesh-host/mesh-host", "enrol", "--root", "/root/again", token)
		if err == nil || !regexp.MustCompile(`refused \(409\): token \S+ was already used at \S+ \(by node `+n.Name+`\)`).Match(out) {
			t.Errorf("a second enrolment with the token: %v\n%s\nwant it refused as used", err, out)
		}
		if _, err := os.Stat(filepath.Join(n.Root(), "root/again/node.creds")); err == nil {
			t.Errorf("the refused enrolment wrote credentials")
		}
	})
	if !ok {
		return
	}

	ok = t.Run("signed target upgrades the enrolled node by standing aside", func(t *testing.T) {
		before := show(t, ctx, n)
		bin, err := w.builder.Build(ctx, lab.PkgHost, "v1.1.0")
		if err != nil {
			t.Fatal(err)
		}
		dir, err := w.rel.Build(ctx, "v1.1.0", bin)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.admin(ctx, "publish", dir); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := w.admin(ctx, "target", n.Name, "v1.1.0", "--key", w.rel.KeyPath()); err != nil {
			t.Fatal(err)
		}
		// The new host's first heartbeat may leave before its link has read the target again
		// (it reads it from the bus at start), so wait for the one that names it.
		b := w.waitBeat(t, ctx, n, "v1.1.0 running and confirmed, target v1.1.0", func(b lab.Beat) bool {
			return lab.RunningConfirmed("v1.1.0")(b) && b.Target == "v1.1.0"
		})
		t.Logf("figure: signed target to v1.1.0 running confirmed on the bus, through the nodes account: %s", b.At.Sub(start).Round(time.Millisecond))
		after := waitShow(t, ctx, n, "STATUS= running v1.1.0 (confirmed)", func(p map[string]string) bool {
			return p["StatusText"] == "running v1.1.0 (confirmed)"
		})
		if after["NRestarts"] != "0" || after["MainPID"] != before["MainPID"] || after["ActiveState"] != "active" {
			t.Errorf("after the upgrade %v, want active, NRestarts=0 and MainPID %s as before", after, before["MainPID"])
		}
	})
	if !ok {
		return
	}

	t.Run("revoked node is refused by the bus and its unit keeps running", func(t *testing.T) {
		before := show(t, ctx, n)
		hosts := hostPIDs(t, ctx, n)
		// The journal's clock is this machine's: the container shares the kernel's.
		start := time.Now()
		out, err := w.admin(ctx, "node", "revoke", n.Name, "--data", w.data)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "revoked node "+n.Name+" (key U") {
			t.Errorf("node revoke said %q", out)
		}
		refused := w.waitRefused(t, ctx, n, start)
		t.Logf("figure: revocation to the node's journal saying the bus refused it: %s", refused.at.Sub(start).Round(time.Millisecond))

		// A heartbeat already on its way may still land; after that, nothing for two of the
		// node's heartbeat intervals.
		time.Sleep(time.Second)
		from := w.beats.Len()
		quiet := 2*hostDefaultHeartbeat + 5*time.Second
		time.Sleep(quiet)
		for _, b := range w.beats.All()[from:] {
			if b.Node == n.Name {
				t.Errorf("a heartbeat of the revoked node reached the bus: %s", lab.Describe(b.Heartbeat))
			}
		}
		p := show(t, ctx, n)
		if p["ActiveState"] != "active" || p["NRestarts"] != "0" || p["MainPID"] != before["MainPID"] || p["StatusText"] != "running v1.1.0 (confirmed)" {
			t.Errorf("%s after the revocation: %v, want the unit active, never restarted, MainPID %s, still running v1.1.0 confirmed", quiet, p, before["MainPID"])
		}
		if now := hostPIDs(t, ctx, n); len(hosts) != 1 || len(now) != 1 || now[0] != hosts[0] {
			t.Errorf("hosts %+v before the revocation, %+v after: want the same one host", hosts, now)
		}
		// And it goes on asking, refused each time, never connected.
		var link []string
		for _, e := range w.journalSince(t, ctx, n, start) {
			if strings.Contains(e.text, `msg="link: connected"`) || strings.Contains(e.text, `msg="link: reconnected"`) {
				t.Errorf("the revoked node connected to the bus again: %s", e.text)
			}
			if strings.Contains(e.text, `msg="link: `) {
				link = append(link, e.text)
			}
		}
		t.Logf("the node's link since the revocation:\n%s", strings.Join(link, "\n"))
	})
}

// newEnrolWorld builds the .deb and mesh-release from this tree, makes the release key, runs
// `mesh-release serve` in operator mode on loopback, starts the lab relaying its bridge to it,
// and records heartbeats as the admin.
func newEnrolWorld(t *testing.T, ctx context.Context) *enrolWorld {
	t.Helper()
	RequireLab(t, ctx) // before serve: a skipped suite starts nothing
	dir := t.TempDir()
	b, err := lab.NewBuilder(ctx, ".", filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	w := &enrolWorld{world: &world{builder: b, deb: buildDeb(t, ctx, b.Src, packaged, filepath.Join(dir, "deb"))}}
	releaseBin, err := b.Build(ctx, lab.PkgRelease, lab.ToolVersion)
	if err != nil {
		t.Fatal(err)
	}
	w.rel = &lab.Release{Bin: releaseBin, KeyDir: filepath.Join(dir, "keys"), Out: filepath.Join(dir, "releases")}
	if w.key, err = w.rel.Keygen(ctx); err != nil {
		t.Fatal(err)
	}

	w.data = filepath.Join(dir, "serve")
	w.serve = startServe(t, releaseBin, "serve", "--data", w.data, "--listen", "127.0.0.1:0", "--tls-name", BridgeAddr,
		"--key-pub", filepath.Join(w.rel.KeyDir, "release.pub"), "--key", w.rel.KeyPath())
	line, err := w.serve.waitLine(ctx, 30*time.Second, "enrolment: answering")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mesh-release serve: %s", line)
	m := regexp.MustCompile(`serving the mesh bus on (\S+) `).FindStringSubmatch(w.serve.output())
	if m == nil {
		t.Fatalf("mesh-release serve did not say where it serves:\n%s", w.serve.output())
	}
	u, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	w.url = "tls://" + u.Host
	w.creds = filepath.Join(w.data, "trust", "admin.creds")
	w.ca = filepath.Join(w.data, "tls", "ca.pem")
	w.rel.NATS = w.url
	if !strings.Contains(w.serve.output(), BridgeAddr) {
		t.Errorf("serve's certificate does not name %s, the address nodes dial:\n%s", BridgeAddr, w.serve.output())
	}

	w.lab = StartWith(t, ctx, Options{Bus: w.url})
	if w.lab.BusURL != "tls://"+BridgeAddr+":4222" {
		t.Fatalf("the lab's bus URL is %s, want tls://%s:4222", w.lab.BusURL, BridgeAddr)
	}
	conn, err := bus.Connect(ctx, w.url, w.creds, bus.WithCA(w.ca))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if w.beats, err = lab.RecordHeartbeats(conn.NC, wire.NamesFor("")); err != nil {
		t.Fatal(err)
	}
	return w
}

// admin runs a mesh-release command against the bus as its admin, over TLS.
func (w *enrolWorld) admin(ctx context.Context, args ...string) (string, error) {
	return w.rel.Run(ctx, append(args, "--nats", w.url, "--creds", w.creds, "--ca", w.ca)...)
}

// token makes a one-time enrolment token for node, naming the bus as nodes reach it.
func (w *enrolWorld) token(t *testing.T, ctx context.Context, node string) string {
	t.Helper()
	out, err := w.admin(ctx, "enrol-token", "--data", w.data, "--node", node, "--url", w.lab.BusURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") { // stdout and stderr together
		if strings.HasPrefix(line, "mesh-enrol-1.") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("mesh-release enrol-token printed no token:\n%s", out)
	return ""
}

// servesCA reports whether pem is the CA serve made.
func (w *enrolWorld) servesCA(t *testing.T, pem []byte) bool {
	t.Helper()
	want, err := os.ReadFile(w.ca)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(pem)) == strings.TrimSpace(string(want))
}

// journalSince is what n's host logged since start (`journalctl -t mesh-host`).
func (w *enrolWorld) journalSince(t *testing.T, ctx context.Context, n *Node, start time.Time) []logEntry {
	t.Helper()
	var out []logEntry
	for _, e := range hostJournal(t, ctx, n) {
		if !e.at.Before(start) {
			out = append(out, e)
		}
	}
	return out
}

// waitRefused waits up to a minute for n's host to log, since start, that the bus refused it
// because its user was revoked (the server says so in the error it sends before closing).
func (w *enrolWorld) waitRefused(t *testing.T, ctx context.Context, n *Node, start time.Time) logEntry {
	t.Helper()
	refusal := regexp.MustCompile(`the server refused this node: its user was revoked`)
	deadline := time.Now().Add(time.Minute)
	for {
		for _, e := range w.journalSince(t, ctx, n, start) {
			if refusal.MatchString(e.text) {
				t.Logf("the node's journal: %s", e.text)
				return e
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var lines []string
			for _, e := range w.journalSince(t, ctx, n, start) {
				lines = append(lines, e.text)
			}
			t.Fatalf("the node's journal does not say the bus refused it within a minute of the revocation:\n%s\n%s", strings.Join(lines, "\n"), diagnose(n))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// copyDeb puts deb in n's /root (not /tmp: the node's systemd mounts a tmpfs over it) and
// returns its path there.
func copyDeb(t *testing.T, n *Node, deb string) string {
	t.Helper()
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(n.Root(), "root", filepath.Base(deb)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return "/root/" + filepath.Base(deb)
}

// served is a `mesh-release serve` the test runs: its output kept, stopped by pid when the test
// ends — and sent SIGTERM by the kernel should this process die first (Pdeathsig), as the lab's
// nodes are.
type served struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu    sync.Mutex
	lines []string
	part  string
}

func (s *served) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := s.part + string(p)
	lines := strings.Split(text, "\n")
	s.part = lines[len(lines)-1]
	s.lines = append(s.lines, lines[:len(lines)-1]...)
	return len(p), nil
}

func (s *served) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(append(append([]string(nil), s.lines...), s.part), "\n")
}

// startServe starts bin with args and stops it when the test ends, failing the test if it
// outlives that.
func startServe(t *testing.T, bin string, args ...string) *served {
	t.Helper()
	s := &served{done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s, s
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start mesh-release %s: %v", strings.Join(args, " "), err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			select {
			case <-s.done:
			case <-time.After(10 * time.Second):
				t.Errorf("mesh-release serve (pid %d) survived SIGKILL", s.cmd.Process.Pid)
				return
			}
			t.Errorf("mesh-release serve did not stop within 15s of SIGTERM; killed")
		}
		if t.Failed() {
			t.Logf("mesh-release serve said:\n%s", s.output())
		}
	})
	return s
}

// waitLine waits for a line of output containing text and returns it.
func (s *served) waitLine(ctx context.Context, timeout time.Duration, text string) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, line := range strings.Split(s.output(), "\n") {
			if strings.Contains(line, text) {
				return line, nil
			}
		}
		select {
		case <-s.done:
			return "", fmt.Errorf("mesh-release serve exited (%v) before saying %q:\n%s", s.cmd.ProcessState, text, s.output())
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("mesh-release serve did not say %q within %s:\n%s", text, timeout, s.output())
		}
	}
}
