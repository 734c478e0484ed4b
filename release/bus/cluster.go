package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// A Member is one server of a cluster of stock nats-server processes: its name, the address its
// clients reach it at and the address the other servers reach its routes at (the same host, or
// one on a network of the servers' own), and, when sites connect to it through leaf servers,
// the address those reach it at (LeafPort 0: none).
type Member struct {
	Name      string
	Host      string
	Port      int
	RouteHost string
	RoutePort int
	LeafHost  string
	LeafPort  int
}

// ClientURL is the URL a client reaches the member by (always TLS).
func (m Member) ClientURL() string {
	return "tls://" + net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
}

// memberForm is how a member is written on the command line.
const memberForm = "NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT[,LEAF_HOST:LEAF_PORT] (like s1=bus1.example:4222,bus1.example:6222)"

// ParseMember reads NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT, and a third address where leaf servers
// reach it, LEAF_HOST:LEAF_PORT, when it has one (an IPv6 host in brackets).
func ParseMember(text string) (Member, error) {
	name, addrs, ok := strings.Cut(text, "=")
	parts := strings.Split(addrs, ",")
	if !ok || len(parts) < 2 || len(parts) > 3 {
		return Member{}, fmt.Errorf("server %q is not %s", cut(text), memberForm)
	}
	m := Member{Name: name}
	var err error
	if m.Host, m.Port, err = hostPort(parts[0]); err != nil {
		return Member{}, fmt.Errorf("server %q: client address: %w", cut(text), err)
	}
	if m.RouteHost, m.RoutePort, err = hostPort(parts[1]); err != nil {
		return Member{}, fmt.Errorf("server %q: route address: %w", cut(text), err)
	}
	if len(parts) == 3 {
		if m.LeafHost, m.LeafPort, err = hostPort(parts[2]); err != nil {
			return Member{}, fmt.Errorf("server %q: leaf address: %w", cut(text), err)
		}
	}
	return m, m.check()
}

// LeafURL is the URL a leaf server reaches the member by (always TLS), or "" when it takes none.
func (m Member) LeafURL() string {
	if m.LeafPort == 0 {
		return ""
	}
	return "tls://" + net.JoinHostPort(m.LeafHost, strconv.Itoa(m.LeafPort))
}

func hostPort(addr string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not HOST:PORT: %w", cut(addr), err)
	}
	p, err := port(portText)
	return host, p, err
}

func port(text string) (int, error) {
	p, err := strconv.Atoi(text)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("%q is not a port number (1–65535)", cut(text))
	}
	return p, nil
}

// cut bounds a text from the command line before it is put in an error.
func cut(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// memberName is what a server name may be: it names a directory and appears in the servers'
// logs and `nats server list`.
var memberName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

func (m Member) check() error {
	if !memberName.MatchString(m.Name) {
		return fmt.Errorf("server name %q: use 1–64 letters, digits, - and _ (it names the server's directory)", cut(m.Name))
	}
	hosts := []string{m.Host, m.RouteHost}
	if m.LeafPort != 0 {
		hosts = append(hosts, m.LeafHost)
	}
	for _, h := range hosts {
		if err := checkHost(h); err != nil {
			return fmt.Errorf("server %s: %w", m.Name, err)
		}
	}
	addrs := map[string]string{}
	for _, a := range m.addresses() {
		if other, ok := addrs[a[1]]; ok {
			return fmt.Errorf("server %s: the %s and the %s address are both %s", m.Name, other, a[0], a[1])
		}
		addrs[a[1]] = a[0]
	}
	return nil
}

// addresses are what the member listens on: {what, HOST:PORT}.
func (m Member) addresses() [][2]string {
	out := [][2]string{
		{"client", net.JoinHostPort(m.Host, strconv.Itoa(m.Port))},
		{"route", net.JoinHostPort(m.RouteHost, strconv.Itoa(m.RoutePort))},
	}
	if m.LeafPort != 0 {
		out = append(out, [2]string{"leaf", net.JoinHostPort(m.LeafHost, strconv.Itoa(m.LeafPort))})
	}
	return out
}

// checkHost checks a host a configuration names: one it can hold unquoted, and a single address.
func checkHost(h string) error {
	if h == "" || strings.ContainsAny(h, "\"\\ \t\n{}[]=,") {
		return fmt.Errorf("host %q is not a host name or an IP address", cut(h))
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("host %s is every address; name the one the clients or the other servers reach it by", h)
	}
	return nil
}

// ClusterConfig is what WriteServerConfigs writes: a configuration for each member.
type ClusterConfig struct {
	// Dir gets a directory per member, Dir/<name>/, holding its nats-server.conf, its TLS
	// files and, once it runs, its account resolver (accounts/) and JetStream store
	// (jetstream/). The configuration names them by absolute path: copy the directory to the
	// same path on the member's machine.
	Dir string
	// Name is the cluster's name (default ClusterName).
	Name    string
	Members []Member
	// TLSNames are more names the servers' certificate is for, besides each member's host.
	TLSNames []string
	// Leaves are the leaf servers of sites (docs/decisions/0025): each gets Dir/<name>/ as a
	// member does, its configuration connecting it to HubURLs (the members' leaf URLs when
	// empty) with users Names' permissions bound.
	Leaves  []Leaf
	HubURLs []string
	Names   wire.Names
}

// ResolverSyncInterval is how often each server's full resolver asks the others for account
// JWTs newer than its own: the longest a server that was down when a revocation was pushed
// admits the revoked user after it returns.
const ResolverSyncInterval = 5 * time.Second

// ClusterName is a cluster's name unless told otherwise.
const ClusterName = "mesh"

// ServerConfigFile is each member's configuration in its directory, and PidFile where the running
// server writes its process id.
const (
	ServerConfigFile = "nats-server.conf"
	PidFile          = "nats-server.pid"
)

// WriteServerConfigs writes, for each member of a cluster of stock nats-server processes, the
// configuration that makes it a server of the mesh's bus (nats-server -c Dir/<name>/nats-server.conf):
// the operator of store, its system account, the full account resolver (every server keeps
// every account JWT in its own directory and takes updates on $SYS.REQ.CLAIMS.UPDATE, which
// the servers pass on to each other) preloaded with the system, mesh and nodes accounts, TLS
// for clients with the certificate the data directory's CA issues (trust.EnsureTLS, for every
// member's host), routes to every other member over TLS where each server checks the other's
// certificate against the CA, and JetStream. It returns the configurations' paths. Writing
// again replaces the configurations and TLS files (the certificate then covers new members) and
// leaves each member's accounts and store alone.
func WriteServerConfigs(store *trust.Store, c ClusterConfig) ([]string, error) {
	if c.Dir == "" {
		return nil, errors.New("server configs: no directory; pass --server-config DIR")
	}
	if len(c.Members) == 0 && len(c.Leaves) == 0 {
		return nil, errors.New("server configs: no servers; name each with --server " + memberForm + ", or a site's leaf server with --leaf " + leafForm)
	}
	c = c.withDefaults()
	if !memberName.MatchString(c.Name) {
		return nil, fmt.Errorf("server configs: cluster name %q: use letters, digits, - and _", cut(c.Name))
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	names, err := c.checkServers()
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	hub, err := c.hubURLs()
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	certFile, keyFile, caFile, err := trust.EnsureTLS(store.DataDir(), names)
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	jwts, err := store.AccountJWTs()
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	var paths []string
	for _, m := range c.Members {
		p, err := writeMember(dir, c, m, jwts, store, [3]string{certFile, keyFile, caFile})
		if err != nil {
			return nil, fmt.Errorf("server configs: server %s: %w", m.Name, err)
		}
		paths = append(paths, p)
	}
	for _, l := range c.Leaves {
		p, err := writeLeaf(dir, c, l, hub, jwts, store, [3]string{certFile, keyFile, caFile})
		if err != nil {
			return nil, fmt.Errorf("server configs: leaf %s: %w", l.Name, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// checkServers checks each member and leaf, and that no two share a name or a listen address.
// It returns the names the servers' TLS certificate must hold: TLSNames and every host given.
func (c ClusterConfig) checkServers() (names []string, err error) {
	names = append([]string{}, c.TLSNames...)
	seen := map[string]bool{}
	addrs := map[string]string{}
	claim := func(name string, listen ...string) error {
		if seen[name] {
			return fmt.Errorf("two servers are named %s", name)
		}
		seen[name] = true
		for _, a := range listen {
			if other, ok := addrs[a]; ok {
				return fmt.Errorf("servers %s and %s both listen on %s", other, name, a)
			}
			addrs[a] = name
		}
		return nil
	}
	for _, m := range c.Members {
		if err := m.check(); err != nil {
			return nil, err
		}
		var listen []string
		for _, a := range m.addresses() {
			listen = append(listen, a[1])
		}
		if err := claim(m.Name, listen...); err != nil {
			return nil, err
		}
		names = append(names, m.Host, m.RouteHost)
		if m.LeafPort != 0 {
			names = append(names, m.LeafHost)
		}
	}
	for _, l := range c.Leaves {
		if err := l.check(); err != nil {
			return nil, err
		}
		if err := claim(l.Name, net.JoinHostPort(l.Host, strconv.Itoa(l.Port))); err != nil {
			return nil, err
		}
		names = append(names, l.Host)
	}
	return names, nil
}

// writeMember writes one member's directory: its TLS files, copied so the directory is all its
// machine needs, and its configuration.
func writeMember(dir string, c ClusterConfig, m Member, jwts map[string]string, store *trust.Store, tlsFiles [3]string) (string, error) {
	own := filepath.Join(dir, m.Name)
	w, err := newServerConfig(own, tlsFiles, "jetstream")
	if err != nil {
		return "", err
	}
	var routes []string
	for _, o := range c.Members {
		if o.Name != m.Name {
			routes = append(routes, "nats-route://"+net.JoinHostPort(o.RouteHost, strconv.Itoa(o.RoutePort)))
		}
	}
	b, q := &w.b, strconv.Quote
	w.head(fmt.Sprintf("server %s of the mesh's cluster %s", m.Name, c.Name), m.Name, net.JoinHostPort(m.Host, strconv.Itoa(m.Port)))
	w.trust(store, jwts)
	fmt.Fprintf(b, "jetstream {\n  store_dir: %s\n}\n\n", q(filepath.Join(own, "jetstream")))
	if len(routes) == 0 {
		// A cluster block without routes stops nats-server's JetStream from starting ("JetStream
		// cluster requires configured routes"): one server is a server on its own.
		b.WriteString("# The cluster's only server: no routes (its route address is kept for when more are added).\n")
	} else {
		b.WriteString("# Routes to every other server, over TLS, each server checking the other's certificate.\n")
		fmt.Fprintf(b, "cluster {\n  name: %s\n  listen: %s\n  routes: [\n", q(c.Name), q(net.JoinHostPort(m.RouteHost, strconv.Itoa(m.RoutePort))))
		for _, r := range routes {
			fmt.Fprintf(b, "    %s\n", q(r))
		}
		b.WriteString("  ]\n")
		w.tlsBlock("  ", true)
		b.WriteString("}\n")
	}
	if m.LeafPort != 0 {
		b.WriteString("\n# Sites' leaf servers connect here, over TLS, as users of the nodes and the system account\n")
		b.WriteString("# (docs/decisions/0025); their users' permissions bound what crosses.\n")
		// no_advertise: a leaf uses the hub URLs its own configuration names, never addresses the
		// hub tells it (which may be ones the site cannot reach, or bypass what it must go through).
		fmt.Fprintf(b, "leafnodes {\n  listen: %s\n  no_advertise: true\n", q(net.JoinHostPort(m.LeafHost, strconv.Itoa(m.LeafPort))))
		w.tlsBlock("  ", false)
		b.WriteString("}\n")
		w.keyWritesCross(store)
	}
	return w.write()
}

// keyWritesCross lets the key writes the nodes account imports ($KV.…) cross a leaf connection.
// nats-server denies $JS.API.>, $KV.> and $OBJ.> on every leaf connection of an account other
// than the system account, on both sides, unless default_js_domain maps the account to the
// empty domain: a node follows its keys by a core subscription on their $KV subjects
// (docs/decisions/0022), so without it a node behind a leaf never hears of a write. The nodes
// account has no JetStream, so the mapping adds no domain; its API calls go by the imported
// prefix, which the deny does not name (docs/decisions/0025).
func (w *serverConfig) keyWritesCross(store *trust.Store) {
	w.b.WriteString("\n# Key writes ($KV.…, imported by the nodes account) cross the leaf connection (docs/decisions/0025).\n")
	fmt.Fprintf(&w.b, "default_js_domain: {\n  %s: \"\"\n}\n", store.NodesAccountPublicKey())
}

// serverConfig is one server's configuration as it is written, in its own directory.
type serverConfig struct {
	own    string
	copied [3]string // its copies of the certificate, key and CA
	b      strings.Builder
}

// newServerConfig makes the server's directory (own, its accounts/ and dirs), and copies the
// TLS files into it, so the directory is all its machine needs.
func newServerConfig(own string, tlsFiles [3]string, dirs ...string) (*serverConfig, error) {
	for _, d := range append([]string{own, filepath.Join(own, trust.ResolverDir)}, dirs...) {
		if !filepath.IsAbs(d) {
			d = filepath.Join(own, d)
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	w := &serverConfig{own: own}
	for i, name := range []string{trust.ServerCertFile, trust.ServerKeyFile, trust.CAFile} {
		b, err := os.ReadFile(tlsFiles[i])
		if err != nil {
			return nil, err
		}
		w.copied[i] = filepath.Join(own, name)
		if err := atomicfile.WriteFile(w.copied[i], b, 0o600); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// q quotes every string a configuration holds: a checked name, a path, a key or a JWT.
var q = strconv.Quote

// head writes what the server is, its name, client address, pid file and client TLS.
func (w *serverConfig) head(what, name, listen string) {
	b := &w.b
	fmt.Fprintf(b, "# Written by mesh-release init --server-config: %s.\n", what)
	fmt.Fprintf(b, "# Run it as: nats-server -c %s\n", filepath.Join(w.own, ServerConfigFile))
	fmt.Fprintf(b, "# Written again by the next init --server-config; edit the flags, not this file.\n\n")
	fmt.Fprintf(b, "server_name: %s\nlisten: %s\n", q(name), q(listen))
	// For nats-server --signal (stop, reload, ldm) and for whoever restarts it.
	fmt.Fprintf(b, "pid_file: %s\n\n", q(filepath.Join(w.own, PidFile)))
	b.WriteString("# Every client uses TLS; the CA is the one `mesh-release` keeps in its data directory.\n")
	w.tlsBlock("", false)
}

// tlsBlock writes a tls block with the server's copies; verify asks the other side for a
// certificate of the CA.
func (w *serverConfig) tlsBlock(indent string, verify bool) {
	b := &w.b
	fmt.Fprintf(b, "%stls {\n%s  cert_file: %s\n%s  key_file: %s\n%s  ca_file: %s\n", indent, indent, q(w.copied[0]), indent, q(w.copied[1]), indent, q(w.copied[2]))
	if verify {
		fmt.Fprintf(b, "%s  verify: true\n", indent)
	}
	fmt.Fprintf(b, "%s  timeout: %g\n%s}\n", indent, tlsTimeout.Seconds(), indent)
}

// trust writes operator mode: the operator, the system account, and the full resolver in the
// server's accounts/ preloaded with jwts.
func (w *serverConfig) trust(store *trust.Store, jwts map[string]string) {
	b := &w.b
	b.WriteString("\n# Operator mode: users are admitted by the operator's accounts; the full resolver keeps every\n")
	b.WriteString("# account JWT in accounts/ and takes updates (revocations) on $SYS.REQ.CLAIMS.UPDATE.\n")
	fmt.Fprintf(b, "operator: %s\nsystem_account: %s\n", q(store.OperatorJWT()), q(store.SystemAccountPublicKey()))
	// interval: how often a server asks the others for the account JWTs it lacks. A server that
	// was down when a revocation was pushed learns it only then (nats-server asks first one
	// interval after it starts), so it is short: one small request per server per interval.
	fmt.Fprintf(b, "resolver {\n  type: full\n  dir: %s\n  allow_delete: false\n  interval: %q\n  timeout: \"5s\"\n}\n", q(filepath.Join(w.own, trust.ResolverDir)), ResolverSyncInterval.String())
	b.WriteString("# The accounts as init wrote them; a newer JWT in accounts/ (a revocation) wins.\n")
	b.WriteString("resolver_preload {\n")
	keys := make([]string, 0, len(jwts))
	for k := range jwts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(b, "  %s: %s\n", k, q(jwts[k]))
	}
	b.WriteString("}\n\n")
}

// write writes the configuration as own/ServerConfigFile and returns its path.
func (w *serverConfig) write() (string, error) {
	path := filepath.Join(w.own, ServerConfigFile)
	if err := atomicfile.WriteFile(path, []byte(w.b.String()), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// withDefaults returns c with every zero field at its default (decision 0041).
func (c ClusterConfig) withDefaults() ClusterConfig {
	if c.Name == "" {
		c.Name = ClusterName
	}
	return c
}
