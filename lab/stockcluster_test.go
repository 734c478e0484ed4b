package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// pkgStockServer is the stock NATS server, built from the module go.mod pins (as the README's
// cluster example builds it).
const pkgStockServer = "github.com/nats-io/nats-server/v2"

// stockCluster is three stock nats-server processes on loopback configured from what
// `mesh-release init --server-config` wrote, the mesh's buckets and stream made on them by
// `mesh-release init` (each on 3 servers), and the release key: what the README's cluster
// example runs, as child processes of the test so that any one can be SIGKILLed, wiped and
// started again.
type stockCluster struct {
	tb      testing.TB
	Release *Release // the real mesh-release, with the admin credentials and CA in its Env
	Names   wire.Names
	Key     string // the release public key
	Conf    string // --server-config: a directory per server
	Data    string // --data: the trust store and the CA
	CA      string
	Admin   string // the admin user's credentials (the mesh account)
	System  string // the system user's credentials ($SYS requests: JSZ, CONNZ, HEALTHZ)

	bin     string
	servers []string // s1, s2, s3
	urls    map[string]string
	procs   map[string]*exec.Cmd
}

// startStockCluster builds and starts the cluster and makes the bus; it is stopped when the
// test ends (SIGTERM, then SIGKILL).
func startStockCluster(tb testing.TB, ctx context.Context, dir string) *stockCluster {
	tb.Helper()
	bin, err := bins.BuildX(ctx, pkgStockServer, "nats-server")
	if err != nil {
		tb.Fatal(err)
	}
	c := &stockCluster{tb: tb, bin: bin, Names: wire.NamesFor(""), Conf: filepath.Join(dir, "mesh-bus"), Data: filepath.Join(dir, "release-data"),
		urls: map[string]string{}, procs: map[string]*exec.Cmd{}}
	c.CA, c.Admin, c.System = filepath.Join(c.Data, "tls", "ca.pem"), filepath.Join(c.Data, "trust", "admin.creds"), filepath.Join(c.Data, "trust", "system.creds")
	tb.Cleanup(c.stop)
	ports := freePorts(tb, 6)
	args := []string{"init", "--server-config", c.Conf, "--data", c.Data}
	var urls []string
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("s%d", i+1)
		c.servers = append(c.servers, name)
		c.urls[name] = "tls://127.0.0.1:" + strconv.Itoa(ports[i])
		urls = append(urls, c.urls[name])
		args = append(args, "--server", fmt.Sprintf("%s=127.0.0.1:%d,127.0.0.1:%d", name, ports[i], ports[3+i]))
	}
	c.Release = &Release{Bin: build(tb, PkgRelease, ToolVersion), KeyDir: filepath.Join(dir, "keys"), Out: filepath.Join(dir, "releases"),
		NATS: strings.Join(urls, ","), Launcher: build(tb, PkgLauncher, ToolVersion),
		Env: []string{"MESH_NATS_URL=" + strings.Join(urls, ","), "MESH_NATS_CREDS=" + c.Admin, "MESH_NATS_CA=" + c.CA}}
	if c.Key, err = c.Release.Keygen(ctx); err != nil {
		tb.Fatal(err)
	}
	if out, err := c.Release.Run(ctx, args...); err != nil {
		tb.Fatalf("mesh-release init --server-config: %v\n%s", err, out)
	}
	for _, s := range c.servers {
		c.Start(s)
	}
	// The servers elect their JetStream meta leader within seconds; until then init's requests
	// go unanswered, so it is tried again.
	var out string
	waitFor(tb, ctx, "mesh-release init to make the bus on the cluster", func() bool {
		out, err = c.Release.Run(ctx, "init")
		return err == nil
	})
	if !strings.Contains(out, "each on 3 servers") {
		tb.Fatalf("init did not keep the streams on 3 servers:\n%s", out)
	}
	return c
}

// Servers are the servers' names, s1 first.
func (c *stockCluster) Servers() []string { return c.servers }

// URL is the client URL of server name.
func (c *stockCluster) URL(name string) string { return c.urls[name] }

// URLs are every server's client URL, starting with server first (so a client that does not
// shuffle them starts there) and then in order.
func (c *stockCluster) URLs(first int) []string {
	var out []string
	for i := range c.servers {
		out = append(out, c.urls[c.servers[(first+i)%len(c.servers)]])
	}
	return out
}

// Start starts server name from its configuration, its output kept in its directory.
func (c *stockCluster) Start(name string) {
	c.tb.Helper()
	dir := filepath.Join(c.Conf, name)
	log, err := os.OpenFile(filepath.Join(dir, "nats-server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(c.bin, "-c", filepath.Join(dir, bus.ServerConfigFile))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.tb.Fatalf("start nats-server %s: %v", name, err)
	}
	c.procs[name] = cmd
}

// Kill SIGKILLs server name (no chance to tell anyone) and waits until it has exited.
func (c *stockCluster) Kill(name string) {
	c.tb.Helper()
	cmd := c.procs[name]
	if cmd == nil {
		c.tb.Fatalf("nats-server %s is not running", name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.tb.Fatalf("kill nats-server %s: %v", name, err)
	}
	cmd.Wait()
	delete(c.procs, name)
}

// Wipe removes server name's data — its JetStream store and its account resolver's directory —
// as a machine replaced with an empty disk; its configuration and TLS files stay.
func (c *stockCluster) Wipe(name string) {
	c.tb.Helper()
	if c.procs[name] != nil {
		c.tb.Fatalf("wipe nats-server %s while it runs", name)
	}
	for _, d := range []string{"jetstream", "accounts"} {
		p := filepath.Join(c.Conf, name, d)
		if err := os.RemoveAll(p); err != nil {
			c.tb.Fatal(err)
		}
		if err := os.MkdirAll(p, 0o700); err != nil {
			c.tb.Fatal(err)
		}
	}
}

// Log is what server name has written.
func (c *stockCluster) Log(name string) string {
	b, _ := os.ReadFile(filepath.Join(c.Conf, name, "nats-server.log"))
	return string(b)
}

func (c *stockCluster) stop() {
	for _, cmd := range c.procs {
		cmd.Process.Signal(syscall.SIGTERM)
	}
	for name, cmd := range c.procs {
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		delete(c.procs, name)
	}
}

// Connect connects as the admin user to urls (every server when none), riding out the loss of
// any of them; closed when the test ends.
func (c *stockCluster) Connect(ctx context.Context, urls ...string) *bus.Conn {
	c.tb.Helper()
	if len(urls) == 0 {
		urls = c.URLs(0)
	}
	conn, err := bus.Connect(ctx, strings.Join(urls, ","), c.Admin, bus.WithCA(c.CA), bus.Lasting(nil))
	if err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(conn.Close)
	return conn
}

// ConnectOnly connects as the admin user to server name alone: no other server is tried, and
// none it tells of.
func (c *stockCluster) ConnectOnly(ctx context.Context, name string) (*bus.Conn, error) {
	nc, err := nats.Connect(c.urls[name], nats.UserCredentials(c.Admin), nats.RootCAs(c.CA), nats.DontRandomize(),
		nats.IgnoreDiscoveredServers(), nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &bus.Conn{NC: nc, JS: js}, nil
}

// sysReply is one server's answer to a $SYS.REQ.SERVER.PING.<what> request.
type sysReply[T any] struct {
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
	Data  T `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// ping asks every running server for its monitoring page what ($SYS.REQ.SERVER.PING.<what>,
// as the system user, the `/jsz`, `/connz`, `/healthz` a monitoring port would serve) and
// returns each server's answer by name, gathering answers for a second or until servers have.
func ping[T any](ctx context.Context, servers int, sys *nats.Conn, what string, opts any) (map[string]T, error) {
	body, _ := json.Marshal(opts)
	inbox := nats.NewInbox()
	sub, err := sys.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := sys.PublishRequest("$SYS.REQ.SERVER.PING."+what, inbox, body); err != nil {
		return nil, err
	}
	out := map[string]T{}
	deadline := time.Now().Add(time.Second)
	for len(out) < servers {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var r sysReply[T]
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return nil, fmt.Errorf("%s reply: %w", what, err)
		}
		if r.Error != nil {
			return nil, fmt.Errorf("%s from %s: %s", what, r.Server.Name, r.Error.Description)
		}
		out[r.Server.Name] = r.Data
	}
	return out, nil
}

// SysConn connects as the system user to every server; closed when the test ends.
func (c *stockCluster) SysConn() *nats.Conn {
	c.tb.Helper()
	nc, err := nats.Connect(strings.Join(c.URLs(0), ","), nats.UserCredentials(c.System), nats.RootCAs(c.CA),
		nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
	if err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(nc.Close)
	return nc
}

// MetaLeader is the server that the running servers say holds the JetStream meta leader ("" if
// they do not agree on one).
func (c *stockCluster) MetaLeader(ctx context.Context, sys *nats.Conn) (string, error) {
	jsz, err := ping[server.JSInfo](ctx, len(c.servers), sys, "JSZ", server.JSzOptions{})
	if err != nil {
		return "", err
	}
	leader := ""
	for _, info := range jsz {
		if info.Meta == nil || info.Meta.Leader == "" || leader != "" && info.Meta.Leader != leader {
			return "", nil
		}
		leader = info.Meta.Leader
	}
	return leader, nil
}

// metaReady reports whether servers servers answer and agree on a JetStream meta leader, and
// the leader sees every other peer online and current: then a stream kept on all of them can be
// placed (before, `init` may be told "no suitable peers for placement").
func metaReady(ctx context.Context, servers int, sys *nats.Conn) bool {
	jsz, err := ping[server.JSInfo](ctx, servers, sys, "JSZ", server.JSzOptions{})
	if err != nil || len(jsz) != servers {
		return false
	}
	leader := ""
	for _, info := range jsz {
		if info.Meta == nil || info.Meta.Leader == "" || leader != "" && info.Meta.Leader != leader {
			return false
		}
		leader = info.Meta.Leader
	}
	// The leader knows how current its followers are.
	meta := jsz[leader].Meta
	if meta == nil || len(meta.Replicas) != servers-1 {
		return false
	}
	for _, p := range meta.Replicas {
		if p.Offline || !p.Current {
			return false
		}
	}
	return true
}

// Healthy reports whether each of servers says it is healthy with JetStream current: its meta
// state caught up and every stream and consumer it holds a replica of current (`/healthz`).
func (c *stockCluster) Healthy(ctx context.Context, sys *nats.Conn, servers ...string) (bool, string) {
	hz, err := ping[server.HealthStatus](ctx, len(c.servers), sys, "HEALTHZ", server.HealthzOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, s := range servers {
		h, ok := hz[s]
		if !ok {
			return false, s + " did not answer"
		}
		if h.Status != "ok" {
			return false, fmt.Sprintf("%s: %s %s %v", s, h.Status, h.Error, h.Errors)
		}
	}
	return true, ""
}

// Clients is, for each running server, the names of the clients of account connected to it.
func (c *stockCluster) Clients(ctx context.Context, sys *nats.Conn, account string) (map[string][]string, error) {
	connz, err := ping[server.Connz](ctx, len(c.servers), sys, "CONNZ", server.ConnzEventOptions{ConnzOptions: server.ConnzOptions{Account: account, Limit: 1024}})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for s, z := range connz {
		out[s] = []string{}
		for _, ci := range z.Conns {
			out[s] = append(out[s], ci.Name)
		}
		slices.Sort(out[s])
	}
	return out, nil
}

// StepDown moves the leader of stream to server to (`nats stream cluster step-down
// --preferred`), retrying until it is there.
func (c *stockCluster) StepDown(ctx context.Context, conn *bus.Conn, stream, to string) error {
	body, _ := json.Marshal(server.JSApiLeaderStepdownRequest{Placement: &server.Placement{Preferred: to}})
	for {
		st, err := conn.JS.Stream(ctx, stream)
		if err == nil && st.CachedInfo().Cluster != nil && st.CachedInfo().Cluster.Leader == to {
			return nil
		}
		if err == nil {
			conn.NC.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, body, 2*time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("move the leader of %s to %s: %w (last: %v)", stream, to, ctx.Err(), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// StreamLeader is the server holding stream's leader.
func (c *stockCluster) StreamLeader(ctx context.Context, conn *bus.Conn, stream string) (string, error) {
	st, err := conn.JS.Stream(ctx, stream)
	if err != nil {
		return "", err
	}
	if st.CachedInfo().Cluster == nil {
		return "", errors.New(stream + " reports no cluster")
	}
	return st.CachedInfo().Cluster.Leader, nil
}

// Streams are the names of every stream of the mesh (init's and the enrolment service's).
func (c *stockCluster) Streams() []string {
	n := c.Names
	return []string{"KV_" + n.Declarations(), "KV_" + n.Targets(), "KV_" + n.Releases(), "KV_" + n.Withdrawals(),
		"KV_" + n.Rollouts(), "OBJ_" + n.Archives(), "OBJ_" + n.Blobs(), n.HeartbeatStream(), "KV_" + n.Enrolment(), "KV_" + n.Nodes()}
}
