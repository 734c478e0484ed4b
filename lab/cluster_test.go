package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// pkgNATSNode runs one server of a NATS cluster (the scale benchmark's bus).
const pkgNATSNode = "./lab/fixtures/natsnode"

// natsServer is one server of a cluster, a child process, so its CPU and memory are its own.
type natsServer struct {
	Name string
	URL  string
	Cmd  *exec.Cmd
	Log  string // its stderr
}

// natsCluster is n servers routed to each other on loopback, JetStream on each.
type natsCluster struct {
	Servers []*natsServer
}

// startCluster starts n natsnode processes forming one cluster and returns once each accepts
// clients and JetStream answers; they are stopped when the test ends.
func startCluster(tb testing.TB, n int) *natsCluster {
	tb.Helper()
	bin := build(tb, pkgNATSNode, "v0.0.0-lab")
	return startServers(tb, n, func(name string, port, clusterPort int, routes []string, store string) *exec.Cmd {
		return exec.Command(bin, "--name", name, "--port", itoa(port), "--cluster-port", itoa(clusterPort),
			"--routes", strings.Join(routes, ","), "--store", store)
	})
}

// startBareStockCluster is startCluster with the stock nats-server binary (no auth, no TLS: the
// benchmarks' bus; stockcluster_test.go has the operator-mode one), built from the module
// go.mod pins, each server run as `nats-server -c FILE` from a configuration giving it its
// name, client and route ports on loopback, the other servers' routes and a JetStream store.
func startBareStockCluster(tb testing.TB, n int) *natsCluster {
	tb.Helper()
	bin, err := bins.BuildX(context.Background(), pkgStockServer, "nats-server")
	if err != nil {
		tb.Fatal(err)
	}
	return startServers(tb, n, func(name string, port, clusterPort int, routes []string, store string) *exec.Cmd {
		var rs []string
		for _, r := range routes {
			rs = append(rs, fmt.Sprintf("%q", "nats-route://"+r))
		}
		conf := fmt.Sprintf("server_name: %q\nlisten: \"127.0.0.1:%d\"\njetstream { store_dir: %q }\n"+
			"cluster { name: \"lab\", listen: \"127.0.0.1:%d\", routes: [%s] }\n", name, port, store, clusterPort, strings.Join(rs, ", "))
		file := store + ".conf"
		if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
			tb.Fatal(err)
		}
		return exec.Command(bin, "-c", file)
	})
}

// startServers starts n servers, each the command cmd gives for its name, client and route
// port, the other servers' route addresses and its store directory, and returns once each
// accepts clients; they are stopped when the test ends.
func startServers(tb testing.TB, n int, cmd func(name string, port, clusterPort int, routes []string, store string) *exec.Cmd) *natsCluster {
	tb.Helper()
	ports := freePorts(tb, 2*n)
	dir := tb.TempDir()
	c := &natsCluster{}
	tb.Cleanup(c.stop)
	for i := 0; i < n; i++ {
		var routes []string
		for j := 0; j < n; j++ {
			if j != i {
				routes = append(routes, fmt.Sprintf("127.0.0.1:%d", ports[n+j]))
			}
		}
		s := &natsServer{Name: fmt.Sprintf("s%d", i+1), URL: fmt.Sprintf("nats://127.0.0.1:%d", ports[i]), Log: filepath.Join(dir, fmt.Sprintf("s%d.log", i+1))}
		s.Cmd = cmd(s.Name, ports[i], ports[n+i], routes, filepath.Join(dir, s.Name))
		logf, err := os.Create(s.Log)
		if err != nil {
			tb.Fatal(err)
		}
		s.Cmd.Stdout, s.Cmd.Stderr = logf, logf
		if err := s.Cmd.Start(); err != nil {
			tb.Fatal(err)
		}
		logf.Close()
		c.Servers = append(c.Servers, s)
	}
	// A server accepts clients once it is ready (its JetStream meta group forms later, when
	// enough peers are up).
	for i, s := range c.Servers {
		deadline := time.Now().Add(60 * time.Second)
		for {
			conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[i]), time.Second)
			if err == nil {
				conn.Close()
				break
			}
			if time.Now().After(deadline) {
				log, _ := os.ReadFile(s.Log)
				tb.Fatalf("server %s did not accept clients within 60s:\n%s", s.Name, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// URL is every server's client URL, comma-separated, as --nats takes them.
func (c *natsCluster) URL() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.URL)
	}
	return strings.Join(urls, ",")
}

// stop asks each server to shut down and kills those that do not within 20s.
func (c *natsCluster) stop() {
	for _, s := range c.Servers {
		s.Cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range c.Servers {
		done := make(chan struct{})
		go func() { s.Cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.Cmd.Process.Kill()
			<-done
		}
	}
}

// initReplicated creates what bus.Init creates — the same buckets, object store and heartbeat
// stream with the same limits — with every stream replicated on replicas servers, retrying
// while the cluster elects its JetStream leaders. bus.Init then accepts them as they are.
// consumers > 0 lets the targets bucket hold that many consumers (KV watches): nats-server
// allows 1,000 per stream unless the stream says otherwise (JSDefaultMaxConsumersPerStream).
func initReplicated(ctx context.Context, js jetstream.JetStream, n wire.Names, replicas, consumers int) error {
	kvs := []jetstream.KeyValueConfig{
		{Bucket: n.Declarations(), History: 10, MaxValueSize: wire.DefaultMaxDeclarationBytes},
		{Bucket: n.Targets(), History: 10, MaxValueSize: bus.MaxTargetBytes},
		{Bucket: n.Releases(), History: 1, MaxValueSize: bus.MaxManifestBytes},
		{Bucket: n.Rollouts(), History: 5, MaxValueSize: bus.MaxRolloutBytes},
		{Bucket: n.Withdrawals(), History: 10, MaxValueSize: wire.MaxWithdrawalsBytes},
	}
	// Until the meta leader is elected a request may go unanswered: each try has its own bound.
	retry := func(what string, f func(context.Context) error) error {
		for {
			try, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(try)
			cancel()
			if err == nil || errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: %w (last: %w)", what, ctx.Err(), err)
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	for _, cfg := range kvs {
		cfg.MaxBytes, cfg.Storage, cfg.Replicas = -1, jetstream.FileStorage, replicas
		if err := retry("create KV "+cfg.Bucket, func(ctx context.Context) error { _, err := js.CreateKeyValue(ctx, cfg); return err }); err != nil {
			return err
		}
	}
	obj := jetstream.ObjectStoreConfig{Bucket: n.Archives(), MaxBytes: -1, Storage: jetstream.FileStorage, Replicas: replicas}
	if err := retry("create object store", func(ctx context.Context) error { _, err := js.CreateObjectStore(ctx, obj); return err }); err != nil {
		return err
	}
	sc := jetstream.StreamConfig{
		Name: n.HeartbeatStream(), Subjects: []string{n.HeartbeatWildcard()},
		MaxMsgsPerSubject: 1, MaxMsgSize: wire.MaxHeartbeatBytes, MaxAge: bus.HeartbeatMaxAge,
		MaxBytes: bus.HeartbeatMaxBytes, MaxMsgs: -1, Storage: jetstream.FileStorage,
		Discard: jetstream.DiscardOld, AllowDirect: true, Replicas: replicas,
	}
	if err := retry("create the heartbeat stream", func(ctx context.Context) error { _, err := js.CreateStream(ctx, sc); return err }); err != nil {
		return err
	}
	if consumers > 0 {
		st, err := js.Stream(ctx, "KV_"+n.Targets())
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		cfg.MaxConsumers = consumers
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("let %s hold %d consumers: %w", cfg.Name, consumers, err)
		}
	}
	return bus.Init(ctx, js, n)
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
