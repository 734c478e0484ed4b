package enrol

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// pki is a test CA and a server certificate it signed.
type pki struct {
	caDER  []byte
	caPEM  string
	leaf   tls.Certificate
	caKey  *ecdsa.PrivateKey
	caCert *x509.Certificate
	pinned string
}

func newPKI(t testing.TB, names ...string) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	sum := sha256.Sum256(der)
	p := &pki{caDER: der, caPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), caKey: key, caCert: ca,
		pinned: hex.EncodeToString(sum[:])}
	p.leaf = p.serverCert(t, names...)
	return p
}

// serverCert is a certificate for names (DNS names or IPs) signed by the CA, the CA after it in
// the chain as the mesh's server presents it.
func (p *pki) serverCert(t testing.TB, names ...string) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "mesh bus"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der, p.caDER}, PrivateKey: key}
}

// startTLSBus runs a NATS server requiring TLS with cert and returns its port.
func startTLSBus(t testing.TB, cert tls.Certificate) int {
	t.Helper()
	return meshtest.StartServer(t, server.Options{TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		TLSTimeout: 5})
}

// account signs the token user and the node users of these tests.
var account = func() nkeys.KeyPair { kp, _ := nkeys.CreateAccount(); return kp }()

func tokenFor(t testing.TB, port int, pin, node string) string {
	t.Helper()
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	seed, _ := u.Seed()
	c := jwt.NewUserClaims(pub)
	c.Expires = time.Now().Add(time.Hour).Unix()
	j, err := c.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := jwt.FormatUserConfig(j, seed)
	var id [16]byte
	var secret [32]byte
	rand.Read(id[:])
	rand.Read(secret[:])
	tok, err := wire.FormatToken(wire.EnrolToken{URLs: []string{fmt.Sprintf("tls://127.0.0.1:%d", port)}, CASHA256: pin, Prefix: "mesh", Node: node,
		ID: wire.NewTokenID(id), Secret: wire.NewTokenSecret(secret), Expires: time.Now().Add(time.Hour).UTC().Truncate(time.Second), Creds: string(creds)})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// service answers enrolment requests on the bus at port as answer says; it counts them.
func service(t testing.TB, p *pki, port int, answer func(req wire.EnrolRequest, m *nats.Msg)) *atomic.Int32 {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)
	nc, err := nats.Connect(fmt.Sprintf("tls://127.0.0.1:%d", port), nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int32
	if _, err := nc.Subscribe(wire.NamesFor("").EnrolSubject(), func(m *nats.Msg) {
		n.Add(1)
		req, err := wire.ParseEnrolRequest(m.Data)
		if err != nil {
			t.Errorf("the node sent a bad request: %v", err)
			return
		}
		if !strings.HasPrefix(m.Reply, wire.TokenInboxPrefix("")) {
			t.Errorf("the node's inbox %q is not under the token user's prefix", m.Reply)
		}
		answer(req, m)
	}); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	return &n
}

// sign answers as the real service does: a JWT for the node's key, the CA, the URLs.
func sign(p *pki, port int, keys ...string) func(req wire.EnrolRequest, m *nats.Msg) {
	return func(req wire.EnrolRequest, m *nats.Msg) {
		c := jwt.NewUserClaims(req.PublicKey)
		c.Name = req.Node
		j, _ := c.Encode(account)
		b, _ := json.Marshal(wire.EnrolReply{JWT: j, CAPEM: p.caPEM, URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}, Prefix: "mesh",
			TrustedKeys: keys, TrustedTargetKeys: []string{}})
		m.Respond(b)
	}
}

func refuseWith(code, reason string) func(req wire.EnrolRequest, m *nats.Msg) {
	return func(_ wire.EnrolRequest, m *nats.Msg) {
		m.RespondMsg(&nats.Msg{Header: nats.Header{"Nats-Service-Error-Code": {code}, "Nats-Service-Error": {reason}}})
	}
}

func TestEnrolWritesCredsCAAndMergesHostJSON(t *testing.T) {
	p := newPKI(t, "127.0.0.1", "localhost")
	port := startTLSBus(t, p.leaf)
	key := "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	n := service(t, p, port, sign(p, port, key))
	root := t.TempDir()
	// What an operator (or the package) put there before stays.
	if err := os.WriteFile(filepath.Join(root, ConfigFile), []byte(`{"heartbeat_interval":"5s","insecure_plaintext":false,"node":"old"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, "web-01"), Root: root, Node: "web-01"})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 1 {
		t.Fatalf("%d requests reached the service, want 1", n.Load())
	}
	creds, err := os.ReadFile(res.Creds)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	j, _ := jwt.ParseDecoratedJWT(creds)
	claims, _ := jwt.DecodeUserClaims(j)
	if pub, _ := kp.PublicKey(); pub != res.PublicKey || claims.Subject != pub {
		t.Fatalf("creds hold key %s and a JWT for %s; the node enrolled %s", pub, claims.Subject, res.PublicKey)
	}
	for path, want := range map[string]os.FileMode{res.Creds: 0o600, res.Config: 0o600, res.CA: 0o644} {
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != want {
			t.Fatalf("%s: mode %v (%v), want %v", path, st.Mode().Perm(), err, want)
		}
	}
	if b, _ := os.ReadFile(res.CA); string(b) != p.caPEM {
		t.Fatal("ca.pem is not the CA the service sent")
	}
	var cfg map[string]any
	b, _ := os.ReadFile(res.Config)
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"heartbeat_interval": "5s", "insecure_plaintext": false, "node": "web-01", "prefix": "mesh", "js_api_prefix": wire.NodeJSAPIPrefix,
		"nats_urls": []any{fmt.Sprintf("tls://127.0.0.1:%d", port)}, "nats_creds": res.Creds, "nats_ca": res.CA,
		"trusted_keys": []any{key},
	}
	if fmt.Sprint(cfg) != fmt.Sprint(want) {
		t.Fatalf("host.json is\n%s\nwant %v", b, want)
	}
	// The node's own creds now reach the bus, pinned to the CA it wrote.
	nc, err := nats.Connect(strings.Join(stringsOf(cfg["nats_urls"]), ","), nats.UserCredentials(res.Creds), nats.RootCAs(res.CA))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}

func stringsOf(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

func TestEnrolRefusesAServerWithoutThePinnedCA(t *testing.T) {
	mesh := newPKI(t, "127.0.0.1")
	impostor := newPKI(t, "127.0.0.1")
	port := startTLSBus(t, impostor.leaf)
	n := service(t, impostor, port, sign(impostor, port))
	root := t.TempDir()
	_, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, mesh.pinned, ""), Root: root, Node: "web-01"})
	var pe *PinError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a PinError", err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), mesh.pinned) || !strings.Contains(err.Error(), impostor.pinned) {
		t.Fatalf("%q does not name both the pinned and the presented CA", err)
	}
	if n.Load() != 0 {
		t.Fatal("the request reached the impostor")
	}
	if names, _ := os.ReadDir(root); len(names) != 0 {
		t.Fatalf("a refused enrolment wrote %v", names)
	}
}

func TestEnrolRefusesACertificateNotForTheHostDialled(t *testing.T) {
	p := newPKI(t, "bus.example")
	port := startTLSBus(t, p.leaf)
	_, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, ""), Root: t.TempDir(), Node: "web-01"})
	if err == nil || !strings.Contains(err.Error(), "does not hold for 127.0.0.1") {
		t.Fatalf("got %v", err)
	}
}

func TestEnrolSaysTheServicesRefusalAndWritesNothing(t *testing.T) {
	p := newPKI(t, "127.0.0.1")
	port := startTLSBus(t, p.leaf)
	service(t, p, port, refuseWith("409", "token 00 was already used"))
	root := t.TempDir()
	_, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, ""), Root: root, Node: "web-01"})
	var re *RefusedError
	if !errors.As(err, &re) || re.Code != "409" || re.Reason != "token 00 was already used" {
		t.Fatalf("got %v", err)
	}
	if names, _ := os.ReadDir(root); len(names) != 0 {
		t.Fatalf("a refused enrolment wrote %v", names)
	}
}

func TestEnrolRefusesAJWTForAnotherKey(t *testing.T) {
	p := newPKI(t, "127.0.0.1")
	port := startTLSBus(t, p.leaf)
	service(t, p, port, func(req wire.EnrolRequest, m *nats.Msg) {
		other, _ := nkeys.CreateUser()
		pub, _ := other.PublicKey()
		req.PublicKey = pub
		sign(p, port)(req, m)
	})
	root := t.TempDir()
	_, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, ""), Root: root, Node: "web-01"})
	if err == nil || !strings.Contains(err.Error(), "not for this node's key") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, CredsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("node.creds written")
	}
}

func TestEnrolWithNoServiceSaysWhatToRun(t *testing.T) {
	p := newPKI(t, "127.0.0.1")
	port := startTLSBus(t, p.leaf)
	_, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, ""), Root: t.TempDir(), Node: "web-01"})
	if err == nil || !strings.Contains(err.Error(), "no enrolment service answers on mesh.enrol.node") {
		t.Fatalf("got %v", err)
	}
}

func TestEnrolChecksBeforeItConnects(t *testing.T) {
	p := newPKI(t, "127.0.0.1")
	port := startTLSBus(t, p.leaf)
	n := service(t, p, port, sign(p, port))
	tok := tokenFor(t, port, p.pinned, "web-01")
	broken := t.TempDir()
	os.WriteFile(filepath.Join(broken, ConfigFile), []byte(`["not an object"]`), 0o600)
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"another node", Options{Token: tok, Root: t.TempDir(), Node: "web-02"}, "the token is for node web-01, not web-02"},
		{"host.json not an object", Options{Token: tok, Root: broken, Node: "web-01"}, "is not a JSON object"},
		{"not a token", Options{Token: "hello", Root: t.TempDir(), Node: "web-01"}, "does not start with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Enrol(context.Background(), tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if n.Load() != 0 {
		t.Fatalf("%d requests were sent", n.Load())
	}
}

func TestChooseNode(t *testing.T) {
	host := func() (string, error) { return "web-09.example.com", nil }
	for _, tc := range []struct {
		given, token, env, configured string
		want, err                     string
	}{
		{want: "web-09"},
		{configured: "cfg", want: "cfg"},
		{env: "env", configured: "cfg", want: "env"},
		{token: "tok", configured: "cfg", want: "tok"},
		{given: "flag", configured: "cfg", want: "flag"},
		{given: "flag", token: "tok", err: "the token is for node tok, not flag"},
		{token: "tok", env: "env", err: "MESH_HOST_NODE is env"},
		{given: "a.b", err: "contains \".\""},
	} {
		got, err := ChooseNode(tc.given, tc.token, tc.env, tc.configured, host)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: got %q, %v; want error %q", tc, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %q, %v; want %q", tc, got, err, tc.want)
		}
	}
}

// A root enrolled as one node is not enrolled as another over it unless --replace says so: the
// refusal names the node the root is and the one the token is for, and leaves host.json and
// node.creds as they were (a host may be running with them) without asking the service.
func TestEnrolRefusesARootEnrolledAsAnotherNodeUnlessReplace(t *testing.T) {
	p := newPKI(t, "127.0.0.1", "localhost")
	port := startTLSBus(t, p.leaf)
	n := service(t, p, port, sign(p, port))
	root := t.TempDir()
	if _, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, "web-01"), Root: root, Node: "web-01"}); err != nil {
		t.Fatal(err)
	}
	files := func() string {
		var b strings.Builder
		for _, f := range []string{ConfigFile, CredsFile, CAFile} {
			data, _ := os.ReadFile(filepath.Join(root, f))
			b.Write(data)
		}
		return b.String()
	}
	before := files()
	for _, tc := range []struct {
		name    string
		token   string
		node    string
		replace bool
		want    string // the error; "" enrols
	}{
		{name: "a token for another node", token: "web-02", node: "web-02",
			want: "the root " + root + " is enrolled as node web-01, and the token is for node web-02"},
		{name: "a token for any node, enrolled as another", node: "web-03",
			want: "the root " + root + " is enrolled as node web-01, and this enrols node web-03"},
		{name: "with --replace", token: "web-02", node: "web-02", replace: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := n.Load()
			_, err := Enrol(context.Background(), Options{Token: tokenFor(t, port, p.pinned, tc.token), Root: root, Node: tc.node, Replace: tc.replace})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if node, _ := ConfiguredNode(root); node != tc.node {
					t.Fatalf("host.json names %q after --replace, want %q", node, tc.node)
				}
				return
			}
			var other *OtherNodeError
			if !errors.As(err, &other) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--replace") {
				t.Fatalf("got %v, want an OtherNodeError saying %q and --replace", err, tc.want)
			}
			if n.Load() != asked {
				t.Errorf("the service was asked")
			}
			if files() != before {
				t.Errorf("host.json, node.creds or ca.pem changed")
			}
		})
	}
}
