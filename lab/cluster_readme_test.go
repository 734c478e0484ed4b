package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/enrol"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// docs/cluster.md, "A cluster of three stock NATS servers", run as written from a copy of this
// checkout: the stock nats-server built from the module go.mod pins, three of them on loopback
// configured from what `mesh-release init --server-config` wrote, then init, two enrolment
// services of which one is SIGKILLed, an enrolment through the other with one of the three
// servers down (its token then refused a second time) and a publish against them. Every stream is then kept on 3 servers, what the enrolment service
// created later too; the node's credentials are admitted by each server, and after `node revoke`
// refused by each — also by one restarted after the revocation, and by one that was down when it
// was made and started after.
func TestREADMEClusterOfStockServersWorksAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the stock nats-server and runs three")
	}
	// The first block builds (make build, the stock server): a cold build's time is the
	// machine's, so it runs under go test's -timeout alone, and the budget starts after it.
	ctx := t.Context()
	readme, err := os.ReadFile(filepath.Join(bins.Src, "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := markedBlocks(string(readme), "cluster")
	for _, name := range []string{"servers", "use", "enrol", "revoke"} {
		if _, ok := blocks[name]; !ok {
			t.Fatalf("docs/cluster.md has no <!-- cluster: %s --> block", name)
		}
	}

	work := t.TempDir()
	src := filepath.Join(work, "checkout")
	copyCheckout(t, bins.Src, src)
	conf, data, root := filepath.Join(work, "mesh-bus"), filepath.Join(work, "release-data"), filepath.Join(work, "root")
	ports := freePorts(t, 6)
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	subst := []walkSubst{
		{substPath, "/etc/mesh-bus", conf},
		{substPath, "/var/lib/mesh-release", data},
		{substPath, "/var/lib/mesh-host", root},
	}
	for i := 0; i < 3; i++ {
		subst = append(subst,
			walkSubst{substAddress, fmt.Sprintf("bus%d.example:4222", i+1), addr(i)},
			walkSubst{substAddress, fmt.Sprintf("bus%d.example:6222", i+1), addr(3 + i)})
	}
	for _, s := range subst {
		if why := s.outOfBounds(work); why != "" {
			t.Fatalf("substitution %q → %q: %s", s.old, s.new, why)
		}
	}
	var want []string
	for _, s := range subst {
		want = append(want, s.old)
	}
	if listed := markedSubstitutions(t, string(readme), "<!-- cluster: substitutions -->"); !slices.Equal(sorted(listed), sorted(want)) {
		t.Fatalf("docs/cluster.md lists the substitutions %q; the test makes %q: say each one there, and no other", listed, want)
	}
	used := make([]bool, len(subst))
	replace := func(block string) string {
		for i, s := range subst {
			if strings.Contains(block, s.old) {
				used[i] = true
				block = strings.ReplaceAll(block, s.old, s.new)
			}
		}
		return block
	}
	sh := startShell(t, src, root)
	run := func(what, script string) string {
		t.Helper()
		out, err := sh.run(ctx, replace(script))
		if err != nil {
			t.Fatalf("README block %q: %v\n%s", what, err, out)
		}
		return out
	}

	out := run("servers", blocks["servers"])
	ctx = meshtest.Context(t, 4*time.Minute)
	for i := 1; i <= 3; i++ {
		if !strings.Contains(out, fmt.Sprintf("server s%d: nats-server -c %s", i, filepath.Join(conf, fmt.Sprintf("s%d", i), bus.ServerConfigFile))) {
			t.Errorf("init --server-config does not say how to start s%d:\n%s", i, out)
		}
	}
	ca, admin := filepath.Join(data, "tls", "ca.pem"), filepath.Join(data, "trust", "admin.creds")
	urls := []string{"tls://" + addr(0), "tls://" + addr(1), "tls://" + addr(2)}
	// As a person would look (`nats server report jetstream`): every server answers, and the
	// cluster has elected its JetStream meta leader.
	var c *bus.Conn
	waitFor(t, ctx, "the three servers to form a cluster with a JetStream meta leader", func() bool {
		if c == nil {
			if c, err = bus.Connect(ctx, strings.Join(urls, ","), admin, bus.WithCA(ca)); err != nil {
				return false
			}
		}
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := c.JS.AccountInfo(actx)
		return err == nil && len(c.NC.Servers()) == 3
	})
	defer c.Close()
	// And each server sees the other two (as `nats server report jetstream` lists them): a
	// stream kept on all three can then be placed.
	sys, err := nats.Connect(strings.Join(urls, ","), nats.UserCredentials(filepath.Join(data, "trust", "system.creds")), nats.RootCAs(ca))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	waitFor(t, ctx, "every server to see the other two in the JetStream meta group", func() bool { return metaReady(ctx, 3, sys) })

	out = run("use", blocks["use"])
	if !strings.Contains(out, "each on 3 servers") {
		t.Errorf("init does not say it kept the streams on 3 servers:\n%s", out)
	}
	// As a person would read their lines "enrolment service … answering": both answer a ping.
	waitFor(t, ctx, "both enrolment services to answer", func() bool { return pings(t, c.NC) == 2 })
	// One of them is killed: enrolment goes on through the other.
	services := groupProcesses(sh.cmd.Process.Pid, "enrol-service")
	if len(services) != 2 {
		t.Fatalf("the shell runs %d enrolment services (pids %v), want the README's 2", len(services), services)
	}
	if err := syscall.Kill(services[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the killed enrolment service to be gone", func() bool { return exited(services[0]) && pings(t, c.NC) == 1 })
	// s1, the first server the token names, is down: the node enrols through another, the
	// token is spent and the release published on the two left (issue 20 §3.3).
	s1 := stopServer(t, ctx, conf, "s1")
	run("enrol", blocks["enrol"])
	// The token is spent: used again, on another root, it is refused.
	again := run("the token again", fmt.Sprintf("if mesh-host enrol --root %s \"$TOKEN\"; then echo ENROLLED-TWICE; else echo REFUSED; fi\n", filepath.Join(work, "root2")))
	if !strings.Contains(again, "REFUSED") {
		t.Errorf("the spent token enrolled a second node:\n%s", again)
	}
	n := wire.NamesFor("")
	// Init's streams, and the enrolment service's buckets, created after init.
	streams := []string{"KV_" + n.Declarations(), "KV_" + n.Targets(), "KV_" + n.Releases(), "KV_" + n.Withdrawals(),
		"KV_" + n.Rollouts(), "OBJ_" + n.Archives(), "OBJ_" + n.Blobs(), n.HeartbeatStream(), "KV_" + n.Enrolment(), "KV_" + n.Nodes()}
	for _, stream := range streams {
		st, err := c.JS.Stream(ctx, stream)
		if err != nil {
			t.Errorf("stream %s: %v", stream, err)
			continue
		}
		if info := st.CachedInfo(); info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s is kept on %d servers (cluster %+v), want 3", stream, info.Config.Replicas, info.Cluster)
		}
	}
	kv, err := c.JS.KeyValue(ctx, n.Releases())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "v1.1.0"); err != nil {
		t.Errorf("the published release is not on the cluster: %v", err)
	}

	nodeCreds := filepath.Join(root, "node.creds")
	run("start s1 again", s1)
	waitFor(t, ctx, "s1 to accept clients again", func() bool { return connectAs(ctx, urls[0], admin, ca) == nil })
	// Caught up before s3 is stopped: with s1 behind and s3 down a stream has no quorum.
	waitFor(t, ctx, "s1 to catch up on every stream", func() bool { return replicasCurrent(ctx, c, streams) })
	for i, u := range urls {
		if err := connectAs(ctx, u, nodeCreds, ca); err != nil {
			t.Fatalf("server s%d does not admit the enrolled node: %v", i+1, err)
		}
	}

	// s3 is down when the revocation is made: it must learn it from the others when it returns.
	s3 := stopServer(t, ctx, conf, "s3")
	run("revoke", blocks["revoke"])
	refused := func(i int) {
		t.Helper()
		waitFor(t, ctx, fmt.Sprintf("server s%d to refuse the revoked node", i+1), func() bool {
			err := connectAs(ctx, urls[i], nodeCreds, ca)
			return err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
		})
	}
	refused(0)
	refused(1)
	run("start s3 again", s3)
	refused(2)

	// Restarted after the revocation, s1 still refuses: it keeps the newer account JWT in its
	// accounts/ directory over the one its configuration preloads.
	s1 = stopServer(t, ctx, conf, "s1")
	run("start s1 again", s1)
	waitFor(t, ctx, "s1 to accept clients again", func() bool { return connectAs(ctx, urls[0], admin, ca) == nil })
	if err := connectAs(ctx, urls[0], nodeCreds, ca); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Errorf("s1, restarted after the revocation, admits the revoked node (err %v)", err)
	}

	for i, s := range subst {
		if !used[i] {
			t.Errorf("the README no longer says %q: update this test's replacements with it", s.old)
		}
	}
}

// replicasCurrent reports whether each of streams has a leader and every replica online and
// current, as the stream's leader says.
func replicasCurrent(ctx context.Context, c *bus.Conn, streams []string) bool {
	for _, name := range streams {
		st, err := c.JS.Stream(ctx, name)
		if err != nil {
			return false
		}
		cl := st.CachedInfo().Cluster
		if cl == nil || cl.Leader == "" {
			return false
		}
		for _, r := range cl.Replicas {
			if r.Offline || !r.Current {
				return false
			}
		}
	}
	return true
}

// pings is how many enrolment services answer a micro ping within a second.
func pings(t *testing.T, nc *nats.Conn) int {
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest("$SRV.PING."+enrol.ServiceName, inbox, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := sub.NextMsg(time.Second); err != nil {
			return n
		}
		n++
	}
}

// groupProcesses are the processes of process group pgid (the README's shell and what it
// started) whose command line holds word, oldest first.
func groupProcesses(pgid int, word string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid || exited(pid) {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), word) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// connectAs connects to the one server at url with creds, trusting ca, and closes at once.
func connectAs(ctx context.Context, url, creds, ca string) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.RootCAs(ca), nats.NoReconnect(), nats.DontRandomize(),
		nats.Timeout(time.Until(deadline(cctx))), nats.MaxReconnects(0), nats.IgnoreDiscoveredServers())
	if err != nil {
		return err
	}
	// The server may close a revoked user's connection just after admitting it: a round trip says.
	err = nc.FlushWithContext(cctx)
	nc.Close()
	if err == nil {
		if e := nc.LastError(); e != nil {
			err = e
		}
	}
	return err
}

func deadline(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// stopServer stops the README's server name (SIGTERM to the pid its configuration writes), waits
// until it has exited, and returns the README's command that starts it again.
func stopServer(t *testing.T, ctx context.Context, conf, name string) (start string) {
	t.Helper()
	dir := filepath.Join(conf, name)
	b, err := os.ReadFile(filepath.Join(dir, bus.PidFile))
	if err != nil {
		t.Fatalf("server %s's pid file: %v", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("server %s's pid file holds %q", name, b)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop server %s (pid %d): %v", name, pid, err)
	}
	waitFor(t, ctx, "server "+name+" to exit", func() bool { return exited(pid) })
	// Its address is free once it has exited; the same command, in the same shell, starts it.
	return fmt.Sprintf("nats-server -c %s &\n", filepath.Join(dir, bus.ServerConfigFile))
}

// exited reports whether pid is gone or a zombie (the shell that started it has not reaped it).
func exited(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) STATE …: comm may hold spaces and parentheses, so the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// markedBlocks returns the README's shell blocks marked <!-- KIND: NAME -->.
func markedBlocks(readme, kind string) map[string]string {
	re := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(kind) + ": (\\w+) -->\\s*```sh\\n(.*?)```")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(readme, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// markedSubstitutions is every `old` the list after marker names: each item's back-quoted texts
// before its arrow.
func markedSubstitutions(t *testing.T, readme, marker string) []string {
	t.Helper()
	_, list, ok := strings.Cut(readme, marker)
	if !ok {
		t.Fatalf("the README has no %s list", marker)
	}
	list = strings.TrimLeft(list, "\n")
	if end := strings.Index(list, "\n\n"); end >= 0 {
		list = list[:end]
	}
	quoted := regexp.MustCompile("`([^`]+)`")
	var out []string
	for _, line := range strings.Split(list, "\n") {
		before, _, ok := strings.Cut(line, "→")
		if !ok || !strings.HasPrefix(line, "- ") {
			continue
		}
		for _, m := range quoted.FindAllStringSubmatch(before, -1) {
			out = append(out, m[1])
		}
	}
	return out
}
