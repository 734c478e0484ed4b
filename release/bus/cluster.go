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
)

// A Member is one server of a cluster of stock nats-server processes: its name, the address its
// clients reach it at and the address the other servers reach its routes at (the same host, or
// one on a network of the servers' own).
type Member struct {
	Name      string
	Host      string
	Port      int
	RouteHost string
	RoutePort int
}

// ClientURL is the URL a client reaches the member by (always TLS).
func (m Member) ClientURL() string {
	return "tls://" + net.JoinHostPort(m.Host, strconv.Itoa(m.Port))
}

// memberForm is how a member is written on the command line.
const memberForm = "NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT (like s1=bus1.example:4222,bus1.example:6222)"

// ParseMember reads NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT (an IPv6 host in brackets).
func ParseMember(text string) (Member, error) {
	name, addrs, ok := strings.Cut(text, "=")
	client, route, ok2 := strings.Cut(addrs, ",")
	if !ok || !ok2 {
		return Member{}, fmt.Errorf("server %q is not %s", cut(text), memberForm)
	}
	m := Member{Name: name}
	var err error
	if m.Host, m.Port, err = hostPort(client); err != nil {
		return Member{}, fmt.Errorf("server %q: client address: %w", cut(text), err)
	}
	if m.RouteHost, m.RoutePort, err = hostPort(route); err != nil {
		return Member{}, fmt.Errorf("server %q: route address: %w", cut(text), err)
	}
	return m, m.check()
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
	for _, h := range []string{m.Host, m.RouteHost} {
		if h == "" || strings.ContainsAny(h, "\"\\ \t\n{}[]=,") {
			return fmt.Errorf("server %s: host %q is not a host name or an IP address", m.Name, cut(h))
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			return fmt.Errorf("server %s: host %s is every address; name the one the clients or the other servers reach it by", m.Name, h)
		}
	}
	if m.Port == m.RoutePort && m.Host == m.RouteHost {
		return fmt.Errorf("server %s: the client and the route address are both %s", m.Name, net.JoinHostPort(m.Host, strconv.Itoa(m.Port)))
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
	if len(c.Members) == 0 {
		return nil, errors.New("server configs: no servers; name each with --server " + memberForm)
	}
	if c.Name == "" {
		c.Name = ClusterName
	}
	if !memberName.MatchString(c.Name) {
		return nil, fmt.Errorf("server configs: cluster name %q: use letters, digits, - and _", cut(c.Name))
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("server configs: %w", err)
	}
	names := append([]string{}, c.TLSNames...)
	seen := map[string]bool{}
	addrs := map[string]string{}
	for _, m := range c.Members {
		if err := m.check(); err != nil {
			return nil, fmt.Errorf("server configs: %w", err)
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("server configs: two servers are named %s", m.Name)
		}
		seen[m.Name] = true
		for _, a := range []string{net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), net.JoinHostPort(m.RouteHost, strconv.Itoa(m.RoutePort))} {
			if other, ok := addrs[a]; ok {
				return nil, fmt.Errorf("server configs: servers %s and %s both listen on %s", other, m.Name, a)
			}
			addrs[a] = m.Name
		}
		names = append(names, m.Host, m.RouteHost)
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
	return paths, nil
}

// writeMember writes one member's directory: its TLS files, copied so the directory is all its
// machine needs, and its configuration.
func writeMember(dir string, c ClusterConfig, m Member, jwts map[string]string, store *trust.Store, tlsFiles [3]string) (string, error) {
	own := filepath.Join(dir, m.Name)
	for _, d := range []string{own, filepath.Join(own, trust.ResolverDir), filepath.Join(own, "jetstream")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
	}
	var copied [3]string
	for i, name := range []string{trust.ServerCertFile, trust.ServerKeyFile, trust.CAFile} {
		b, err := os.ReadFile(tlsFiles[i])
		if err != nil {
			return "", err
		}
		copied[i] = filepath.Join(own, name)
		if err := atomicfile.WriteFile(copied[i], b, 0o600); err != nil {
			return "", err
		}
	}
	var routes []string
	for _, o := range c.Members {
		if o.Name != m.Name {
			routes = append(routes, "nats-route://"+net.JoinHostPort(o.RouteHost, strconv.Itoa(o.RoutePort)))
		}
	}
	var b strings.Builder
	q := strconv.Quote // every string the configuration holds is a checked name, a path, a key or a JWT
	fmt.Fprintf(&b, "# Written by mesh-release init --server-config: server %s of the mesh's cluster %s.\n", m.Name, c.Name)
	fmt.Fprintf(&b, "# Run it as: nats-server -c %s\n", filepath.Join(own, ServerConfigFile))
	fmt.Fprintf(&b, "# Written again by the next init --server-config; edit the flags, not this file.\n\n")
	fmt.Fprintf(&b, "server_name: %s\nlisten: %s\n", q(m.Name), q(net.JoinHostPort(m.Host, strconv.Itoa(m.Port))))
	// For nats-server --signal (stop, reload, ldm) and for whoever restarts it.
	fmt.Fprintf(&b, "pid_file: %s\n\n", q(filepath.Join(own, PidFile)))
	tlsBlock := func(indent string, verify bool) {
		fmt.Fprintf(&b, "%stls {\n%s  cert_file: %s\n%s  key_file: %s\n%s  ca_file: %s\n", indent, indent, q(copied[0]), indent, q(copied[1]), indent, q(copied[2]))
		if verify {
			fmt.Fprintf(&b, "%s  verify: true\n", indent)
		}
		fmt.Fprintf(&b, "%s  timeout: %g\n%s}\n", indent, tlsTimeout.Seconds(), indent)
	}
	b.WriteString("# Every client uses TLS; the CA is the one `mesh-release` keeps in its data directory.\n")
	tlsBlock("", false)
	b.WriteString("\n# Operator mode: users are admitted by the operator's accounts; the full resolver keeps every\n")
	b.WriteString("# account JWT in accounts/ and takes updates (revocations) on $SYS.REQ.CLAIMS.UPDATE.\n")
	fmt.Fprintf(&b, "operator: %s\nsystem_account: %s\n", q(store.OperatorJWT()), q(store.SystemAccountPublicKey()))
	// interval: how often a server asks the others for the account JWTs it lacks. A server that
	// was down when a revocation was pushed learns it only then (nats-server asks first one
	// interval after it starts), so it is short: one small request per server per interval.
	fmt.Fprintf(&b, "resolver {\n  type: full\n  dir: %s\n  allow_delete: false\n  interval: %q\n  timeout: \"5s\"\n}\n", q(filepath.Join(own, trust.ResolverDir)), ResolverSyncInterval.String())
	b.WriteString("# The accounts as init wrote them; a newer JWT in accounts/ (a revocation) wins.\n")
	b.WriteString("resolver_preload {\n")
	keys := make([]string, 0, len(jwts))
	for k := range jwts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "  %s: %s\n", k, q(jwts[k]))
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %s\n}\n\n", q(filepath.Join(own, "jetstream")))
	b.WriteString("# Routes to every other server, over TLS, each server checking the other's certificate.\n")
	fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: %s\n  routes: [\n", q(c.Name), q(net.JoinHostPort(m.RouteHost, strconv.Itoa(m.RoutePort))))
	for _, r := range routes {
		fmt.Fprintf(&b, "    %s\n", q(r))
	}
	b.WriteString("  ]\n")
	tlsBlock("  ", true)
	b.WriteString("}\n")
	path := filepath.Join(own, ServerConfigFile)
	if err := atomicfile.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return "", err
	}
	return path, nil
}
