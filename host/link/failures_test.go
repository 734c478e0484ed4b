package link

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

const testPassword = "S3cretPassw0rd"

// logLine is the first line of log that contains every one of parts, or "".
func logLine(log string, parts ...string) string {
	for _, line := range strings.Split(log, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return line
		}
	}
	return ""
}

// openLogged opens a link of node n1 that logs into the returned buffer and retries fast.
func openLogged(t *testing.T, o Options) (*Link, *meshtest.Buffer) {
	t.Helper()
	logs := &meshtest.Buffer{}
	o.Node, o.Names = "n1", names
	o.ReconnectWait, o.RetryMin, o.RetryMax = 20*time.Millisecond, 20*time.Millisecond, 200*time.Millisecond
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		if t.Failed() {
			t.Logf("link log:\n%s", logs.String())
		}
	})
	return l, logs
}

// drain reads and drops the link's events, for a test that watches something else.
func drain(l *Link) {
	go func() {
		for range l.Events() {
		}
	}()
}

// failedAtLeast waits until the link has counted n failed attempts and returns the last failure.
func failedAtLeast(t *testing.T, l *Link, n int) *wire.LinkFailure {
	t.Helper()
	meshtest.Eventually(t, fmt.Sprintf("%d failed attempts counted", n), func() bool {
		f := l.LastFailure()
		return f != nil && f.Attempts >= n
	})
	return l.LastFailure()
}

// selfSigned is a certificate for 127.0.0.1 that no CA vouches for.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bus"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// A bus that refuses the link, or cannot be reached, is logged at once with which side refused
// and why — and never with the password in the URL.
func TestLinkLogsAFailedConnectionWithItsCause(t *testing.T) {
	for _, tc := range []struct {
		name   string
		url    func(t *testing.T) string
		reason string
		cause  string
	}{
		{"wrong password", func(t *testing.T) string {
			port := meshtest.StartServer(t, server.Options{Username: "mesh", Password: "the-right-one"})
			return fmt.Sprintf("nats://mesh:%s@127.0.0.1:%d", testPassword, port)
		}, "the server refused this node's credentials", "Authorization Violation"},
		{"a revoked user", func(t *testing.T) string {
			return "nats://127.0.0.1:" + refusingServer(t, "User Authentication Revoked")
		}, "the server refused this node: its user was revoked", "User Authentication Revoked"},
		{"expired user credentials", func(t *testing.T) string {
			return "nats://127.0.0.1:" + refusingServer(t, "User Authentication Expired")
		}, "the server refused this node: its user credentials expired", "User Authentication Expired"},
		{"a token it does not know", func(t *testing.T) string {
			port := meshtest.StartServer(t, server.Options{Authorization: "the-right-token"})
			return fmt.Sprintf("nats://%s@127.0.0.1:%d", testPassword, port)
		}, "the server refused this node's credentials", "Authorization Violation"},
		{"nothing listening", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
			return fmt.Sprintf("nats://mesh:%s@%s", testPassword, l.Addr())
		}, "refused", "connection refused"},
		{"a certificate it does not trust", func(t *testing.T) string {
			port := meshtest.StartServer(t, server.Options{TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}})
			return fmt.Sprintf("tls://mesh:%s@127.0.0.1:%d", testPassword, port)
		}, "this node refused the server: its TLS certificate is not signed by a CA this node trusts", "x509: certificate signed by unknown authority"},
		{"TLS asked of a server without it", func(t *testing.T) string {
			port := meshtest.StartServer(t, server.Options{})
			return fmt.Sprintf("tls://mesh:%s@127.0.0.1:%d", testPassword, port)
		}, "TLS", "secure connection not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, logs := openLogged(t, Options{URLs: []string{tc.url(t)}})
			expectFailure(t, l, logs, tc.reason, tc.cause)
		})
	}
}

// TLS with the bus's own CA: this node refuses a server whose certificate another CA signed,
// that names another host, or that has expired, and says which it was.
func TestLinkRefusesAServerCertificateAndSaysWhy(t *testing.T) {
	dir := t.TempDir()
	ours, theirs := newCA(t, "mesh bus CA"), newCA(t, "another CA")
	now := time.Now()
	for _, tc := range []struct {
		name   string
		cert   tls.Certificate
		reason string
		cause  string
	}{
		{"signed by another CA", theirs.issue(t, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour)),
			"this node refused the server: its TLS certificate is not signed by a CA this node trusts", "unknown authority"},
		{"made for another name", ours.issue(t, []string{"bus.example.com"}, now.Add(-time.Hour), now.Add(time.Hour)),
			"this node refused the server: its TLS certificate is not for the host name in the URL", "127.0.0.1"},
		{"expired", ours.issue(t, []string{"127.0.0.1"}, now.Add(-48*time.Hour), now.Add(-24*time.Hour)),
			"this node refused the server: its TLS certificate has expired", "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := meshtest.StartServer(t, server.Options{TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{tc.cert}, MinVersion: tls.VersionTLS12}})
			l, logs := openLogged(t, Options{URLs: []string{fmt.Sprintf("tls://127.0.0.1:%d", port)}, CA: ours.pemFile(t, dir)})
			expectFailure(t, l, logs, tc.reason, tc.cause)
		})
	}
	// The same server with a certificate the node's CA made for it is accepted.
	port := meshtest.StartServer(t, server.Options{TLS: true, TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{ours.issue(t, []string{"127.0.0.1"}, now.Add(-time.Hour), now.Add(time.Hour))}, MinVersion: tls.VersionTLS12}})
	l, _ := openLogged(t, Options{URLs: []string{fmt.Sprintf("tls://127.0.0.1:%d", port)}, CA: ours.pemFile(t, dir)})
	waitFor[Connected](t, l, "connected over TLS", nil)
}

// expectFailure waits for the link's failed attempts and checks the log line and the failure
// kept for the heartbeat name the reason and the cause, once, without the test password.
func expectFailure(t *testing.T, l *Link, logs *meshtest.Buffer, reason, cause string) {
	t.Helper()
	drain(l)
	// The link counts every attempt, and logs the first of a cause at once; later ones
	// fail the same way and are counted, not logged again within the minute.
	f := failedAtLeast(t, l, 3)
	line := logLine(logs.String(), "link: cannot connect to the bus; retrying", reason, cause)
	if line == "" {
		t.Fatalf("no log line says the link cannot connect, %q, %q", reason, cause)
	}
	if !strings.Contains(line, "level=WARN") {
		t.Errorf("not a warning: %s", line)
	}
	if n := strings.Count(logs.String(), "link: cannot connect"); n != 1 {
		t.Errorf("%d lines for one cause within a minute, want 1", n)
	}
	if !strings.Contains(f.LastError, reason) || !strings.Contains(f.LastError, cause) {
		t.Errorf("last failure %+v does not say %q and %q", f, reason, cause)
	}
	if strings.Contains(logs.String(), testPassword) || strings.Contains(f.LastError, testPassword) {
		t.Errorf("the password is in the log or the failure:\n%s", logs.String())
	}
}

// refusingServer is a server that speaks NATS just far enough to refuse every client with the
// error a server sends a revoked or expired user; it returns its port.
func refusingServer(t *testing.T, serverErr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				fmt.Fprintf(c, "INFO {\"server_id\":\"fake\",\"version\":\"2.12.0\",\"proto\":1,\"max_payload\":1048576,\"auth_required\":true,\"headers\":true}\r\n")
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						fmt.Fprintf(c, "-ERR '%s'\r\n", serverErr)
						return
					}
				}
			}()
		}
	}()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// testCA is a CA that signs server certificates for a test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(72 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, der: der}
}

// issue is a server certificate for names (IP addresses or DNS names) valid between the times.
func (ca *testCA) issue(t *testing.T, names []string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// pemFile writes the CA certificate as PEM under dir and returns its path.
func (ca *testCA) pemFile(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, ca.cert.Subject.CommonName+".pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The attempts that failed before the link came up are kept for the heartbeat, and said when it
// connects.
func TestLinkKeepsTheLastFailureOnceTheBusReturns(t *testing.T) {
	b := meshtest.StartBus(t)
	b.Stop()
	l, logs := openLogged(t, Options{URLs: []string{b.URL()}})
	if l.LastFailure() != nil && l.LastFailure().Attempts == 0 {
		t.Fatalf("a failure without an attempt: %+v", l.LastFailure())
	}
	failedAtLeast(t, l, 1)
	b.Start()
	waitFor[Connected](t, l, "connected", nil)
	// The link says so before it reports Connected.
	line := logLine(logs.String(), "link: connected", "after_failed_attempts=")
	if line == "" {
		t.Errorf("the link connected without saying after how many failed attempts")
	}
	f := l.LastFailure()
	if f == nil || f.Attempts < 1 || f.At.IsZero() || !strings.Contains(f.LastError, "refused") {
		t.Fatalf("last failure = %+v, want the refused attempts (log: %s)", f, line)
	}
}

func TestFailureLogIsRateLimitedPerCause(t *testing.T) {
	refused := fmt.Errorf("dial tcp 10.0.0.1:4222: %w", errRefusedForTest)
	auth := fmt.Errorf("nats: authorization violation")
	type step struct {
		after  time.Duration // since the previous step
		err    error
		logged bool
		count  int // the suppressed count on the logged line
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"the first is logged at once, repeats within a minute are counted", []step{
			{0, refused, true, 0}, {time.Second, refused, false, 0}, {10 * time.Second, refused, false, 0},
			{50 * time.Second, refused, true, 2}, {time.Second, refused, false, 0},
		}},
		{"another cause is logged at once", []step{
			{0, refused, true, 0}, {time.Second, auth, true, 0}, {time.Second, refused, false, 0}, {time.Second, auth, false, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &meshtest.Buffer{}
			f := newFailures(slog.New(slog.NewTextHandler(logs, nil)))
			now := time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)
			f.now = func() time.Time { return now }
			for i, s := range tc.steps {
				now = now.Add(s.after)
				before := strings.Count(logs.String(), "\n")
				f.attemptFailed(s.err)
				out := logs.String()
				logged := strings.Count(out, "\n") > before
				if logged != s.logged {
					t.Fatalf("step %d (%v): logged %v, want %v\n%s", i, s.err, logged, s.logged, out)
				}
				last := out[strings.LastIndex(strings.TrimSuffix(out, "\n"), "\n")+1:]
				if logged && s.count > 0 && !strings.Contains(last, fmt.Sprintf("not_logged=%d", s.count)) {
					t.Errorf("step %d: %q does not count %d attempts not logged", i, last, s.count)
				}
				if got := f.lastFailure(); got.Attempts != i+1 || !got.At.Equal(now) {
					t.Errorf("step %d: last failure %+v, want attempt %d at %s", i, got, i+1, now)
				}
			}
		})
	}
}

var errRefusedForTest = fmt.Errorf("connect: connection refused")

func TestAFailureIsKeptBoundedForTheHeartbeat(t *testing.T) {
	f := newFailures(slog.New(slog.DiscardHandler))
	f.attemptFailed(fmt.Errorf("nats: %s", strings.Repeat("x", 4000)))
	got := f.lastFailure()
	hb := wire.Heartbeat{Link: got}
	if len(got.LastError) > maxFailureText || !strings.Contains(got.LastError, "cut") {
		t.Errorf("last error is %d bytes: %q", len(got.LastError), got.LastError)
	}
	if !bytes.Contains(hb.Marshal(), []byte(`"link":{"last_error":`)) {
		t.Errorf("heartbeat JSON: %s", hb.Marshal())
	}
	if bytes.Contains(wire.Heartbeat{}.Marshal(), []byte(`"link"`)) {
		t.Error("a heartbeat without a link failure has a link key")
	}
}

func TestPlaintextToAnotherMachineIsRefusedUnlessAllowed(t *testing.T) {
	for _, tc := range []struct {
		url    string
		ca     string
		refuse bool
	}{
		{"nats://10.0.0.5:4222", "", true},
		{"nats://mesh:pw@bus.example.com:4222", "", true},
		{"bus.example.com:4222", "", true}, // no scheme is nats://
		{"ws://bus.example.com:8080", "", true},
		{"nats://127.0.0.1:4222", "", false},
		{"nats://127.8.9.10:4222", "", false},
		{"nats://[::1]:4222", "", false},
		{"nats://LocalHost:4222", "", false},
		{"tls://bus.example.com:4222", "", false},
		{"wss://bus.example.com:443", "", false},
		{"nats://bus.example.com:4222", "/etc/mesh/ca.pem", false}, // a CA makes nats.go insist on TLS
	} {
		t.Run(tc.url, func(t *testing.T) {
			err := CheckPlaintext([]string{tc.url}, tc.ca, false)
			if (err != nil) != tc.refuse {
				t.Fatalf("CheckPlaintext(%q, ca %q) = %v, want refused: %v", tc.url, tc.ca, err, tc.refuse)
			}
			if err != nil && (!strings.Contains(err.Error(), "insecure_plaintext") || strings.Contains(err.Error(), ":pw@")) {
				t.Errorf("the refusal does not name the setting, or shows the password: %v", err)
			}
			if err := CheckPlaintext([]string{tc.url}, tc.ca, true); err != nil {
				t.Errorf("allowed by insecure_plaintext, still refused: %v", err)
			}
		})
	}
}

func TestOpenRefusesAPlaintextRemoteBusNamingItAndTheSetting(t *testing.T) {
	_, err := Open(context.Background(), Options{Node: "n1", URLs: []string{"nats://mesh:" + testPassword + "@192.0.2.1:4222", "nats://127.0.0.1:1"}})
	if err == nil {
		t.Fatal("a plaintext URL to another machine was accepted")
	}
	for _, want := range []string{"this node refuses", "nats://mesh:xxxxx@192.0.2.1:4222", `"insecure_plaintext": true`, "MESH_HOST_INSECURE_PLAINTEXT=1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), testPassword) || strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("the refusal shows the password, or names a loopback URL it does not refuse: %v", err)
	}
}

func TestOpenWarnsOnceAboutAnAllowedPlaintextRemoteBusWithoutItsPassword(t *testing.T) {
	l, logs := openLogged(t, Options{InsecurePlaintext: true, URLs: []string{"nats://mesh:" + testPassword + "@192.0.2.1:4222", "mesh:" + testPassword + "@192.0.2.2:4222", "nats://127.0.0.1:1"}})
	drain(l)
	// Open says it before it returns.
	line := logLine(logs.String(), "link: the bus URL is plaintext", "insecure_plaintext")
	if line == "" {
		t.Fatal("no warning about the plaintext URLs")
	}
	if n := strings.Count(logs.String(), "link: the bus URL is plaintext"); n != 1 {
		t.Errorf("%d plaintext warnings, want one", n)
	}
	if !strings.Contains(line, "nats://mesh:xxxxx@192.0.2.1:4222,nats://mesh:xxxxx@192.0.2.2:4222") || strings.Contains(logs.String(), testPassword) {
		t.Errorf("the warning should name both remote URLs, redacted: %s", line)
	}
}
