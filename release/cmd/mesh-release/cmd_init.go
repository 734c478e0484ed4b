package main

import (
	"context"
	"flag"
	"slices"
	"strings"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

const initAbout = `For a NATS you run yourself (serve does this for its own). The account the credentials
belong to needs JetStream. On a cluster every bucket, object store and stream is kept on 3
servers (--replicas says otherwise; a single server keeps 1). With --print-templates it connects
to nothing and prints what to set up in that NATS for the mesh: the account, and the permissions
of the release side's user, of each node's user and of an enrolment token's user
(docs/decisions/0011-trust-on-the-bus.md).

With --server-config DIR it connects to nothing and writes, for each --server, what a stock
nats-server needs to be a server of the mesh's cluster: DIR/NAME/nats-server.conf (the operator
and system account of --data's trust store, made there first if missing, the full account
resolver preloaded with the accounts, TLS from --data's CA, routes to the other servers over
TLS, JetStream) and its TLS files. Start each with nats-server -c DIR/NAME/nats-server.conf,
then run init again against them (docs/decisions/0023-a-cluster-of-stock-servers.md).

A site reaches the cluster through a leaf server: --leaf NAME=HOST:PORT writes DIR/NAME/ for a
stock nats-server at the site that its nodes connect to (enrol-token --url tls://HOST:PORT),
connected to the cluster at the servers' leaf addresses (a --server's third address) or at
--hub tls://HOST:PORT,…, with two users of its own (the nodes and the system account), the same
operator and its own full resolver, which takes revocations over that connection
(docs/decisions/0025-a-site-behind-a-leaf-server.md).`

// clusterReplicas is how many servers keep each stream on a cluster: any one may be lost.
const clusterReplicas = 3

func initCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	templates := fs.Bool("print-templates", false, "print the account and user permission templates for your own NATS, and do nothing else")
	replicas := fs.Int("replicas", 0, "how many servers keep each bucket, object store and stream (default 3 on a cluster, else 1)")
	serverConfig := fs.String("server-config", "", "write each --server's nats-server configuration under `DIR`/NAME/, and do nothing else")
	dataFlag := fs.String("data", "", "with --server-config: the `DIR` whose trust/ and tls/ the servers use, made if missing (default $"+envReleaseData+", else "+defaultDataDir+")")
	clusterName := fs.String("cluster-name", bus.ClusterName, "with --server-config: the cluster's `NAME`")
	var servers listFlag
	fs.Var(&servers, "server", "with --server-config: a server of the cluster, `NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT[,LEAF_HOST:LEAF_PORT]` (where clients reach it, where the other servers reach its routes, where sites' leaf servers reach it); repeat it for each server")
	var leaves listFlag
	fs.Var(&leaves, "leaf", "with --server-config: a site's leaf server, `NAME=HOST:PORT` (where the site's nodes reach it); repeatable")
	hub := fs.String("hub", "", "with --leaf: the cluster's leaf `URLs`, tls://HOST:PORT comma-separated (default: the --server leaf addresses)")
	var tlsNames namesFlag
	fs.Var(&tlsNames, "tls-name", "with --server-config: another `NAME` clients reach the servers by, for their certificate; repeatable")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	n := b.names()
	if *templates {
		s.printf("%s", trust.Templates(n))
		return nil
	}
	if *serverConfig == "" && (len(servers) > 0 || len(leaves) > 0 || *hub != "" || *dataFlag != "" || len(tlsNames) > 0 || *clusterName != bus.ClusterName) {
		return usagef("--server, --leaf, --hub, --data, --tls-name and --cluster-name go with --server-config")
	}
	if *hub != "" && len(leaves) == 0 {
		return usagef("--hub is where a --leaf connects; name the leaf with --leaf NAME=HOST:PORT")
	}
	if *serverConfig != "" && *replicas != 0 {
		return usagef("--replicas is for init against the running servers, not with --server-config")
	}
	if *serverConfig != "" {
		return writeServerConfigs(s, serverConfigArgs{dir: *serverConfig, data: *dataFlag, name: *clusterName,
			servers: servers, leaves: leaves, hub: *hub, tlsNames: tlsNames, names: n})
	}
	if *replicas < 0 || *replicas > 5 {
		return usagef("--replicas %d: a stream is kept on 1 to 5 servers", *replicas)
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	r := *replicas
	if r == 0 {
		r = 1
		// A server that is one of a cluster says the cluster's name (a lone server says none)
		// and the other servers' client URLs, which the connection adds to its own.
		if c.NC.ConnectedClusterName() != "" {
			r = min(clusterReplicas, max(1, len(c.NC.Servers())))
		}
	}
	if err := bus.InitReplicated(ctx, c.JS, n, r); err != nil {
		return err
	}
	s.printf("ready: KV %s, %s, %s, %s, %s; object stores %s, %s; stream %s on %s; each on %d %s\n",
		n.Declarations(), n.Targets(), n.Releases(), n.Withdrawals(), n.Rollouts(), n.Archives(), n.Blobs(), n.HeartbeatStream(), n.HeartbeatWildcard(),
		r, map[bool]string{true: "server", false: "servers"}[r == 1])
	s.printf("for your own NATS's accounts and users: mesh-release init --print-templates\n")
	return nil
}

// serverConfigArgs are init --server-config's flags.
type serverConfigArgs struct {
	dir, data, name string
	servers, leaves []string
	hub             string
	tlsNames        []string
	names           wire.Names
}

// writeServerConfigs is init --server-config: each server's configuration, and what to run next.
func writeServerConfigs(s *stdio, a serverConfigArgs) error {
	if len(a.servers) == 0 && len(a.leaves) == 0 {
		return usagef("--server-config needs each server of the cluster: --server NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT, repeated (or a site's leaf server: --leaf NAME=HOST:PORT)")
	}
	var members []bus.Member
	for _, v := range a.servers {
		m, err := bus.ParseMember(v)
		if err != nil {
			return usagef("--server: %v", err)
		}
		members = append(members, m)
	}
	var leaves []bus.Leaf
	for _, v := range a.leaves {
		l, err := bus.ParseLeaf(v)
		if err != nil {
			return usagef("--leaf: %v", err)
		}
		leaves = append(leaves, l)
	}
	var hub []string
	if a.hub != "" {
		var err error
		if hub, err = bus.ParseHubURLs(a.hub); err != nil {
			return usagef("--hub: %v", err)
		}
	}
	if len(leaves) > 0 && len(hub) == 0 && !slices.ContainsFunc(members, func(m bus.Member) bool { return m.LeafURL() != "" }) {
		return usagef("--leaf needs the hub's leaf URLs: give the cluster's servers a leaf address (--server NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT,LEAF_HOST:LEAF_PORT) or name them with --hub tls://HOST:PORT,…")
	}
	data := a.data
	if data == "" {
		data = serveDataDir(s.getenv)
	}
	store, err := trust.Ensure(data)
	if err != nil {
		return err
	}
	paths, err := bus.WriteServerConfigs(store, bus.ClusterConfig{Dir: a.dir, Name: a.name, Members: members, TLSNames: a.tlsNames,
		Leaves: leaves, HubURLs: hub, Names: a.names})
	if err != nil {
		return err
	}
	var urls []string
	for i, m := range members {
		s.printf("server %s: nats-server -c %s\n", m.Name, paths[i])
		urls = append(urls, m.ClientURL())
	}
	for i, l := range leaves {
		s.printf("leaf %s: nats-server -c %s   # its nodes: mesh-release enrol-token --url %s\n", l.Name, paths[len(members)+i], l.ClientURL())
	}
	if len(members) == 0 {
		s.printf("copy each leaf's directory to its site's machine at the same path and start it there\n")
		return nil
	}
	s.printf("copy each server's directory to its machine at the same path; once they run, in this shell:\n")
	s.printf("  export %s=%s\n  export %s=%s\n  export %s=%s\n", envNATSURL, strings.Join(urls, ","), envNATSCreds, store.AdminCreds(), envNATSCA, store.CAFile())
	r := min(clusterReplicas, len(members))
	s.printf("  mesh-release init   # every bucket and stream on %d %s\n", r, text.Plural(r, "server", "servers"))
	return nil
}

// listFlag is a repeatable flag whose values are kept whole (a --server's value holds a comma).
type listFlag []string

func (f *listFlag) String() string     { return strings.Join(*f, " ") }
func (f *listFlag) Set(v string) error { *f = append(*f, v); return nil }
