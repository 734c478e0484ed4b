package bus

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

func TestParseMemberReadsALeafAddressWhenGiven(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Member
		err      string
	}{
		{"a leaf address", "s1=bus1.example:4222,bus1.example:6222,bus1.example:7422", Member{"s1", "bus1.example", 4222, "bus1.example", 6222, "bus1.example", 7422}, ""},
		{"none", "s1=bus1.example:4222,bus1.example:6222", Member{"s1", "bus1.example", 4222, "bus1.example", 6222, "", 0}, ""},
		{"a fourth address", "s1=a:1,a:2,a:3,a:4", Member{}, "NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT[,LEAF_HOST:LEAF_PORT]"},
		{"the leaf on the route address", "s1=a:4222,a:6222,a:6222", Member{}, "the route and the leaf address are both a:6222"},
		{"a leaf address on every address", "s1=a:4222,a:6222,0.0.0.0:7422", Member{}, "every address"},
		{"a leaf port out of range", "s1=a:4222,a:6222,a:0", Member{}, "leaf address"},
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

func TestParseLeafAndHubURLsRefuseWhatCannotBeWritten(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
	}{
		{"no name", "leaf1.example:4222", "NAME=HOST:PORT"},
		{"a name that is no directory name", "../x=leaf1.example:4222", "letters, digits"},
		{"no port", "site1=leaf1.example", "HOST:PORT"},
		{"every address", "site1=0.0.0.0:4222", "every address"},
	} {
		t.Run("leaf: "+tc.name, func(t *testing.T) {
			if l, err := ParseLeaf(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ParseLeaf(%q) = %+v, %v; want an error saying %q", tc.in, l, err, tc.err)
			}
		})
	}
	for _, tc := range []struct {
		name, in, err string
	}{
		{"plaintext", "nats://bus1.example:7422", "tls://HOST:PORT"},
		{"credentials in the URL", "tls://u:p@bus1.example:7422", "tls://HOST:PORT"},
		{"no port", "tls://bus1.example", "missing port"},
		{"nothing", " , ", "no hub URL"},
	} {
		t.Run("hub: "+tc.name, func(t *testing.T) {
			if u, err := ParseHubURLs(tc.in); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("ParseHubURLs(%q) = %q, %v; want an error saying %q", tc.in, u, err, tc.err)
			}
		})
	}
	got, err := ParseHubURLs("bus1.example:7422, tls://bus2.example:7422")
	if want := []string{"tls://bus1.example:7422", "tls://bus2.example:7422"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ParseHubURLs = %q, %v; want %q", got, err, want)
	}
}

// What init --server-config --leaf writes is read by the stock server's own parser as a site's
// leaf server: operator mode with the hub's operator and its own full resolver, no JetStream,
// two remotes to the hub's leaf URLs over TLS checked against the CA, one binding the nodes
// account and one the system account, each with credentials of its own account allowed what
// the trust store says. The hub's servers take leaf connections on their leaf address, without
// advertising it, and both map the nodes account to the empty JetStream domain.
func TestLeafConfigIsWhatTheStockServerReadsAsASiteLeaf(t *testing.T) {
	data, dir := t.TempDir(), t.TempDir()
	store, err := trust.Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	names := wire.NamesFor("")
	members := []Member{
		{"s1", "127.0.0.1", 14222, "127.0.0.1", 16222, "127.0.0.1", 17422},
		{"s2", "127.0.0.1", 14223, "127.0.0.1", 16223, "127.0.0.1", 17423},
	}
	paths, err := WriteServerConfigs(store, ClusterConfig{Dir: dir, Members: members, Leaves: []Leaf{{"site1", "127.0.0.1", 15222}}, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 || paths[2] != filepath.Join(dir, "site1", ServerConfigFile) {
		t.Fatalf("paths %q, want the two servers' then the leaf's", paths)
	}
	for i, m := range members {
		opts, err := server.ProcessConfigFile(paths[i])
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		opts.AccountResolver.Close()
		if opts.LeafNode.Host != m.LeafHost || opts.LeafNode.Port != m.LeafPort || opts.LeafNode.TLSConfig == nil || !opts.LeafNode.NoAdvertise {
			t.Errorf("%s takes leaf servers on %s:%d (TLS %v, no advertise %v)", m.Name, opts.LeafNode.Host, opts.LeafNode.Port, opts.LeafNode.TLSConfig != nil, opts.LeafNode.NoAdvertise)
		}
		if d, ok := opts.JsAccDefaultDomain[store.NodesAccountPublicKey()]; !ok || d != "" {
			t.Errorf("%s does not map the nodes account to the empty domain: %v", m.Name, opts.JsAccDefaultDomain)
		}
	}
	opts, err := server.ProcessConfigFile(paths[2])
	if err != nil {
		t.Fatalf("the stock server cannot read the leaf's configuration: %v", err)
	}
	if _, ok := opts.AccountResolver.(*server.DirAccResolver); !ok {
		t.Errorf("leaf: account resolver %T, want the full (directory) resolver", opts.AccountResolver)
	}
	opts.AccountResolver.Close()
	if opts.ServerName != "site1" || opts.Port != 15222 || opts.TLSConfig == nil || opts.JetStream {
		t.Errorf("leaf: %s on %d, TLS %v, JetStream %v", opts.ServerName, opts.Port, opts.TLSConfig != nil, opts.JetStream)
	}
	if len(opts.TrustedOperators) != 1 || opts.TrustedOperators[0].Subject != store.OperatorPublicKey() || opts.SystemAccount != store.SystemAccountPublicKey() {
		t.Errorf("leaf: not in operator mode with the trust store's operator and system account")
	}
	if d, ok := opts.JsAccDefaultDomain[store.NodesAccountPublicKey()]; !ok || d != "" {
		t.Errorf("leaf does not map the nodes account to the empty domain: %v", opts.JsAccDefaultDomain)
	}
	wantPerms := map[string]jwt.Permissions{
		store.NodesAccountPublicKey():  trust.LeafNodesPermissions(names),
		store.SystemAccountPublicKey(): trust.LeafSystemPermissions(),
	}
	if len(opts.LeafNode.Remotes) != 2 {
		t.Fatalf("leaf: %d remotes, want 2", len(opts.LeafNode.Remotes))
	}
	for _, r := range opts.LeafNode.Remotes {
		var urls []string
		for _, u := range r.URLs {
			urls = append(urls, u.String())
		}
		if !slices.Equal(urls, []string{"tls://127.0.0.1:17422", "tls://127.0.0.1:17423"}) || r.TLSConfig == nil || r.TLSConfig.RootCAs == nil {
			t.Errorf("remote for %s: %q, TLS %v", r.LocalAccount, urls, r.TLSConfig != nil)
		}
		want, ok := wantPerms[r.LocalAccount]
		if !ok {
			t.Errorf("a remote binds account %s", r.LocalAccount)
			continue
		}
		delete(wantPerms, r.LocalAccount)
		text, err := os.ReadFile(r.Credentials)
		if err != nil {
			t.Fatal(err)
		}
		token, err := jwt.ParseDecoratedJWT(text)
		if err != nil {
			t.Fatal(err)
		}
		uc, err := jwt.DecodeUserClaims(token)
		if err != nil {
			t.Fatal(err)
		}
		issuer := uc.Issuer
		if uc.IssuerAccount != "" {
			issuer = uc.IssuerAccount
		}
		if issuer != r.LocalAccount || !slices.Equal(uc.Permissions.Pub.Allow, want.Pub.Allow) || !slices.Equal(uc.Permissions.Sub.Allow, want.Sub.Allow) {
			t.Errorf("remote for %s: a user of %s allowed %+v", r.LocalAccount, issuer, uc.Permissions)
		}
	}
}

// A leaf needs the hub's leaf URLs; a leaf and a server may not share a name or an address.
func TestLeafConfigsRefuseALeafThatCannotConnect(t *testing.T) {
	store, err := trust.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s1 := Member{"s1", "127.0.0.1", 14222, "127.0.0.1", 16222, "", 0}
	site := Leaf{"site1", "127.0.0.1", 15222}
	for _, tc := range []struct {
		name    string
		members []Member
		leaves  []Leaf
		hub     []string
		want    string
	}{
		{"no hub URL and no server with a leaf address", []Member{s1}, []Leaf{site}, nil, "needs the hub's leaf URLs"},
		{"a leaf named as a server", []Member{s1}, []Leaf{{"s1", "127.0.0.1", 15222}}, []string{"tls://127.0.0.1:17422"}, "two servers are named s1"},
		{"a leaf on a server's address", []Member{s1}, []Leaf{{"site1", "127.0.0.1", 14222}}, []string{"tls://127.0.0.1:17422"}, "both listen on 127.0.0.1:14222"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := WriteServerConfigs(store, ClusterConfig{Dir: dir, Members: tc.members, Leaves: tc.leaves, HubURLs: tc.hub})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused configuration left %d entries in %s", len(entries), dir)
			}
		})
	}
}

// Written again, a leaf keeps the users it connects as: writing must not make new ones each time.
func TestLeafConfigWrittenAgainKeepsItsUsers(t *testing.T) {
	store, err := trust.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := ClusterConfig{Dir: dir, Leaves: []Leaf{{"site1", "127.0.0.1", 15222}}, HubURLs: []string{"tls://127.0.0.1:17422"}, Names: wire.NamesFor("")}
	read := func() string {
		t.Helper()
		if _, err := WriteServerConfigs(store, cfg); err != nil {
			t.Fatal(err)
		}
		var s string
		for _, f := range []string{LeafNodesCredsFile, LeafSystemCredsFile} {
			b, err := os.ReadFile(filepath.Join(dir, "site1", f))
			if err != nil {
				t.Fatal(err)
			}
			s += string(b)
		}
		return s
	}
	if first, again := read(), read(); first != again {
		t.Errorf("writing again made new users for the leaf")
	}
}

// One server is a server on its own: no cluster block, which without routes would stop its
// JetStream from starting ("JetStream cluster requires configured routes").
func TestServerConfigOfOneServerHasNoClusterBlock(t *testing.T) {
	store, err := trust.Ensure(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	paths, err := WriteServerConfigs(store, ClusterConfig{Dir: t.TempDir(), Members: []Member{{"s1", "127.0.0.1", 14222, "127.0.0.1", 16222, "", 0}}})
	if err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	opts.AccountResolver.Close()
	if opts.Cluster.Port != 0 || !opts.JetStream {
		t.Errorf("one server: cluster port %d, JetStream %v; want no cluster, JetStream", opts.Cluster.Port, opts.JetStream)
	}
}
