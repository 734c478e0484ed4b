package bus

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/novox/mesh-host/release/trust"
)

func TestParseMemberReadsNameClientAndRouteAddresses(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Member
		err      string
	}{
		{"host names", "s1=bus1.example:4222,bus1.example:6222", Member{"s1", "bus1.example", 4222, "bus1.example", 6222, "", 0}, ""},
		{"routes on the servers' own network", "s2=bus2.example:4222,10.0.0.2:6222", Member{"s2", "bus2.example", 4222, "10.0.0.2", 6222, "", 0}, ""},
		{"IPv6 in brackets", "s3=[::1]:4222,[::1]:6222", Member{"s3", "::1", 4222, "::1", 6222, "", 0}, ""},
		{"no name", "bus1.example:4222,bus1.example:6222", Member{}, "NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT"},
		{"no route address", "s1=bus1.example:4222", Member{}, "NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT"},
		{"a port out of range", "s1=bus1.example:70000,bus1.example:6222", Member{}, "not a port number"},
		{"a name that is no directory name", "../s1=bus1.example:4222,bus1.example:6222", Member{}, "letters, digits"},
		{"every address", "s1=0.0.0.0:4222,bus1.example:6222", Member{}, "every address"},
		{"one address for both", "s1=bus1.example:4222,bus1.example:4222", Member{}, "both"},
		{"a host that would break the configuration", "s1=a\"b:4222,bus1.example:6222", Member{}, "not a host name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMember(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseMember(%q) = %+v, %v; want an error saying %q", tc.in, m, err, tc.err)
				}
				return
			}
			if err != nil || m != tc.want {
				t.Fatalf("ParseMember(%q) = %+v, %v; want %+v", tc.in, m, err, tc.want)
			}
		})
	}
}

// What init --server-config writes is read by the stock server's own parser as a server of the
// mesh: its name and addresses, operator mode with the trust store's operator and system
// account and a full resolver, TLS for clients, routes to the other two checked against the CA,
// JetStream in its own directory.
func TestServerConfigsAreWhatTheStockServerReadsAsAMeshServer(t *testing.T) {
	data, dir := t.TempDir(), t.TempDir()
	store, err := trust.Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	members := []Member{
		{"s1", "127.0.0.1", 14222, "127.0.0.1", 16222, "", 0},
		{"s2", "127.0.0.1", 14223, "127.0.0.1", 16223, "", 0},
		{"s3", "bus3.example", 4222, "10.0.0.3", 6222, "", 0},
	}
	paths, err := WriteServerConfigs(store, ClusterConfig{Dir: dir, Members: members})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("paths %q, want 3", paths)
	}
	for i, m := range members {
		own := filepath.Join(dir, m.Name)
		if paths[i] != filepath.Join(own, ServerConfigFile) {
			t.Errorf("%s's configuration is %s, want it in %s", m.Name, paths[i], own)
		}
		opts, err := server.ProcessConfigFile(paths[i])
		if err != nil {
			t.Fatalf("the stock server cannot read %s's configuration: %v", m.Name, err)
		}
		if opts.ServerName != m.Name || opts.Host != m.Host || opts.Port != m.Port {
			t.Errorf("%s: server %s on %s:%d", m.Name, opts.ServerName, opts.Host, opts.Port)
		}
		if len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Subject != store.OperatorPublicKey() || opts.SystemAccount != store.SystemAccountPublicKey() {
			t.Errorf("%s: not in operator mode with the trust store's operator and system account", m.Name)
		}
		if _, ok := opts.AccountResolver.(*server.DirAccResolver); !ok {
			t.Errorf("%s: account resolver %T, want the full (directory) resolver", m.Name, opts.AccountResolver)
		}
		if opts.AccountResolver != nil {
			opts.AccountResolver.Close()
		}
		if opts.TLSConfig == nil || !opts.JetStream || opts.StoreDir != filepath.Join(own, "jetstream") {
			t.Errorf("%s: TLS %v, JetStream %v in %s", m.Name, opts.TLSConfig != nil, opts.JetStream, opts.StoreDir)
		}
		if opts.Cluster.Name != ClusterName || opts.Cluster.Host != m.RouteHost || opts.Cluster.Port != m.RoutePort || opts.Cluster.TLSConfig == nil {
			t.Errorf("%s: cluster %s on %s:%d, TLS %v", m.Name, opts.Cluster.Name, opts.Cluster.Host, opts.Cluster.Port, opts.Cluster.TLSConfig != nil)
		}
		var routes []string
		for _, r := range opts.Routes {
			routes = append(routes, r.Host)
		}
		var want []string
		for _, o := range members {
			if o.Name != m.Name {
				want = append(want, o.RouteHost+":"+strconv.Itoa(o.RoutePort))
			}
		}
		if !slices.Equal(routes, want) {
			t.Errorf("%s routes to %q, want %q", m.Name, routes, want)
		}
	}
	// The certificate names every host, client and route, and serves routes (client auth).
	if _, _, _, err := trust.EnsureTLS(data, nil); err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(paths[0])
	if !strings.Contains(string(text), "verify: true") {
		t.Errorf("the routes do not check each other's certificate:\n%s", text)
	}
}

// Writing again (a server added, a name for the certificate) replaces the configurations and
// keeps what a running server stores: its accounts/ (where a revocation lives) and jetstream/.
func TestServerConfigsWrittenAgainKeepEachServersAccountsAndStore(t *testing.T) {
	data, dir := t.TempDir(), t.TempDir()
	store, err := trust.Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ClusterConfig{Dir: dir, Members: []Member{{"s1", "127.0.0.1", 14222, "127.0.0.1", 16222, "", 0}}}
	if _, err := WriteServerConfigs(store, cfg); err != nil {
		t.Fatal(err)
	}
	kept := map[string]string{
		filepath.Join(dir, "s1", trust.ResolverDir, "A.jwt"): "a revocation",
		filepath.Join(dir, "s1", "jetstream", "meta.inf"):    "a stream",
	}
	for p, v := range kept {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Members = append(cfg.Members, Member{"s2", "127.0.0.1", 14223, "127.0.0.1", 16223, "", 0})
	if _, err := WriteServerConfigs(store, cfg); err != nil {
		t.Fatal(err)
	}
	for p, v := range kept {
		if b, err := os.ReadFile(p); err != nil || string(b) != v {
			t.Errorf("%s after writing again: %q, %v", p, b, err)
		}
	}
	text, _ := os.ReadFile(filepath.Join(dir, "s1", ServerConfigFile))
	if !strings.Contains(string(text), "nats-route://127.0.0.1:16223") {
		t.Errorf("s1 does not route to the server added:\n%s", text)
	}
}

func TestServerConfigsRefuseAClusterThatCannotRun(t *testing.T) {
	store, err := trust.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s1 := Member{"s1", "127.0.0.1", 14222, "127.0.0.1", 16222, "", 0}
	for _, tc := range []struct {
		name    string
		members []Member
		want    string
	}{
		{"no server", nil, "no servers"},
		{"two of one name", []Member{s1, {"s1", "127.0.0.1", 14223, "127.0.0.1", 16223, "", 0}}, "two servers are named s1"},
		{"two on one address", []Member{s1, {"s2", "127.0.0.1", 14222, "127.0.0.1", 16223, "", 0}}, "both listen on 127.0.0.1:14222"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteServerConfigs(store, ClusterConfig{Dir: dir, Members: tc.members})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused cluster left %d entries in %s", len(entries), dir)
			}
		})
	}
}
