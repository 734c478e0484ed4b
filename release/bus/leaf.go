package bus

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/release/trust"
)

// A Leaf is a site's leaf server (docs/decisions/0025): a stock nats-server at the site that its
// nodes connect to, itself connected to the cluster (the hub) as a leaf node. Its name and the
// address the site's nodes reach it at.
type Leaf struct {
	Name string
	Host string
	Port int
}

// ClientURL is the URL the site's nodes reach the leaf by (always TLS): what their host.json
// names (`mesh-release enrol-token --url`).
func (l Leaf) ClientURL() string {
	return "tls://" + net.JoinHostPort(l.Host, strconv.Itoa(l.Port))
}

// leafForm is how a leaf is written on the command line.
const leafForm = "NAME=HOST:PORT (like site1=leaf1.example:4222)"

// ParseLeaf reads NAME=HOST:PORT (an IPv6 host in brackets).
func ParseLeaf(text string) (Leaf, error) {
	name, addr, ok := strings.Cut(text, "=")
	if !ok {
		return Leaf{}, fmt.Errorf("leaf %q is not %s", cut(text), leafForm)
	}
	l := Leaf{Name: name}
	var err error
	if l.Host, l.Port, err = hostPort(addr); err != nil {
		return Leaf{}, fmt.Errorf("leaf %q: %w", cut(text), err)
	}
	return l, l.check()
}

func (l Leaf) check() error {
	if !memberName.MatchString(l.Name) {
		return fmt.Errorf("leaf name %q: use 1–64 letters, digits, - and _ (it names the server's directory)", cut(l.Name))
	}
	if err := checkHost(l.Host); err != nil {
		return fmt.Errorf("leaf %s: %w", l.Name, err)
	}
	return nil
}

// ParseHubURLs reads the hub's leaf URLs as --hub gives them, comma-separated: tls://HOST:PORT
// (a bare HOST:PORT is taken as tls://; nothing but TLS is written).
func ParseHubURLs(text string) ([]string, error) {
	var out []string
	for _, u := range strings.Split(text, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "tls://" + u
		}
		p, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("hub URL %q: %w", cut(u), err)
		}
		if p.Scheme != "tls" || p.User != nil || (p.Path != "" && p.Path != "/") || p.RawQuery != "" {
			return nil, fmt.Errorf("hub URL %q: write tls://HOST:PORT, the address a server of the cluster takes leaf servers at (its --server's third address)", cut(u))
		}
		host, portText, err := net.SplitHostPort(p.Host)
		if err != nil {
			return nil, fmt.Errorf("hub URL %q: %w", cut(u), err)
		}
		if _, err := port(portText); err != nil {
			return nil, fmt.Errorf("hub URL %q: %w", cut(u), err)
		}
		if err := checkHost(host); err != nil {
			return nil, fmt.Errorf("hub URL %q: %w", cut(u), err)
		}
		out = append(out, "tls://"+net.JoinHostPort(host, portText))
	}
	if len(out) == 0 {
		return nil, errors.New("no hub URL; write tls://HOST:PORT, comma-separated")
	}
	return out, nil
}

// hubURLs are the URLs the leaves connect to: HubURLs, or else every member's leaf URL.
func (c ClusterConfig) hubURLs() ([]string, error) {
	if len(c.Leaves) == 0 {
		return nil, nil
	}
	if len(c.HubURLs) > 0 {
		return c.HubURLs, nil
	}
	var out []string
	for _, m := range c.Members {
		if u := m.LeafURL(); u != "" {
			out = append(out, u)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("a leaf needs the hub's leaf URLs: give the cluster's servers a leaf address (--server NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT,LEAF_HOST:LEAF_PORT) or name them with --hub tls://HOST:PORT,…")
	}
	return out, nil
}

// The credentials a leaf's directory holds, one per account it binds on the hub.
const (
	LeafNodesCredsFile  = "leaf-nodes.creds"
	LeafSystemCredsFile = "leaf-system.creds"
)

// writeLeaf writes one leaf's directory: its TLS files, the two users it connects to the hub as
// (kept when already there: writing again must not multiply users), and its configuration. It
// is in operator mode with the hub's operator and a full resolver of its own, preloaded as the
// hub's are and kept up to date over its system-account connection, so it admits and refuses
// the site's nodes itself, also while cut off from the hub. It runs no JetStream: the streams
// are the hub's, reached through the nodes account's imports.
func writeLeaf(dir string, c ClusterConfig, l Leaf, hub []string, jwts map[string]string, store *trust.Store, tlsFiles [3]string) (string, error) {
	own := filepath.Join(dir, l.Name)
	w, err := newServerConfig(own, tlsFiles)
	if err != nil {
		return "", err
	}
	nodesCreds, systemCreds := filepath.Join(own, LeafNodesCredsFile), filepath.Join(own, LeafSystemCredsFile)
	if !exists(nodesCreds) || !exists(systemCreds) {
		nodes, system, err := store.LeafCreds(c.Names, l.Name)
		if err != nil {
			return "", err
		}
		if err := atomicfile.WriteFile(nodesCreds, nodes, 0o600); err != nil {
			return "", err
		}
		if err := atomicfile.WriteFile(systemCreds, system, 0o600); err != nil {
			return "", err
		}
	}
	b := &w.b
	w.head(fmt.Sprintf("leaf server of site %s, connected to the mesh's cluster as a leaf node", l.Name), l.Name, net.JoinHostPort(l.Host, strconv.Itoa(l.Port)))
	w.trust(store, jwts)
	b.WriteString("# No JetStream: the streams are the hub's. Two connections to the hub: the nodes account\n")
	b.WriteString("# (the site's nodes' heartbeats, keys, archives and enrolment) and the system account (the\n")
	b.WriteString("# account JWTs this server's resolver keeps: revocations), each checking the hub's certificate.\n")
	b.WriteString("leafnodes {\n  reconnect: \"1s\"\n  remotes: [\n")
	for _, r := range []struct{ account, creds string }{
		{store.NodesAccountPublicKey(), nodesCreds},
		{store.SystemAccountPublicKey(), systemCreds},
	} {
		b.WriteString("    {\n      urls: [")
		for i, u := range hub {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(q(u))
		}
		fmt.Fprintf(b, "]\n      account: %s\n      credentials: %s\n", q(r.account), q(r.creds))
		fmt.Fprintf(b, "      tls {\n        ca_file: %s\n        timeout: %g\n      }\n    }\n", q(w.copied[2]), tlsTimeout.Seconds())
	}
	b.WriteString("  ]\n}\n")
	w.keyWritesCross(store)
	return w.write()
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
