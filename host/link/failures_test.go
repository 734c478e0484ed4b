package link

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/wire"
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
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
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
		}, "the server's TLS certificate is not trusted by this node", "x509"},
		{"TLS asked of a server without it", func(t *testing.T) string {
			port := meshtest.StartServer(t, server.Options{})
			return fmt.Sprintf("tls://mesh:%s@127.0.0.1:%d", testPassword, port)
		}, "TLS", "secure connection not available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, logs := openLogged(t, Options{URLs: []string{tc.url(t)}})
			drain(l)
			// The link counts every attempt, and logs the first of a cause at once; later ones
			// fail the same way and are counted, not logged again within the minute.
			f := failedAtLeast(t, l, 3)
			line := logLine(logs.String(), "link: cannot connect to the bus; retrying", tc.reason, tc.cause)
			if line == "" {
				t.Fatalf("no log line says the link cannot connect, %q, %q", tc.reason, tc.cause)
			}
			if !strings.Contains(line, "level=WARN") {
				t.Errorf("not a warning: %s", line)
			}
			if n := strings.Count(logs.String(), "link: cannot connect"); n != 1 {
				t.Errorf("%d lines for one cause within a minute, want 1", n)
			}
			if !strings.Contains(f.LastError, tc.reason) || !strings.Contains(f.LastError, tc.cause) {
				t.Errorf("last failure %+v does not say %q and %q", f, tc.reason, tc.cause)
			}
			if strings.Contains(logs.String(), testPassword) || strings.Contains(f.LastError, testPassword) {
				t.Errorf("the password is in the log or the failure:\n%s", logs.String())
			}
		})
	}
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

func TestPlaintextIsOnlyWarnedForAnotherMachine(t *testing.T) {
	for _, tc := range []struct {
		url       string
		tlsForced bool
		warn      bool
	}{
		{"nats://10.0.0.5:4222", false, true},
		{"nats://mesh:pw@bus.example.com:4222", false, true},
		{"ws://bus.example.com:8080", false, true},
		{"nats://127.0.0.1:4222", false, false},
		{"nats://127.8.9.10:4222", false, false},
		{"nats://[::1]:4222", false, false},
		{"nats://LocalHost:4222", false, false},
		{"tls://bus.example.com:4222", false, false},
		{"wss://bus.example.com:443", false, false},
		{"nats://bus.example.com:4222", true, false}, // a CA makes nats.go insist on TLS
	} {
		t.Run(tc.url, func(t *testing.T) {
			got := plaintextRemote([]string{tc.url}, tc.tlsForced)
			if (len(got) > 0) != tc.warn {
				t.Errorf("plaintextRemote(%q, tls forced %v) = %q, want a warning: %v", tc.url, tc.tlsForced, got, tc.warn)
			}
		})
	}
}

func TestOpenWarnsOnceAboutAPlaintextRemoteBusWithoutItsPassword(t *testing.T) {
	l, logs := openLogged(t, Options{URLs: []string{"nats://mesh:" + testPassword + "@192.0.2.1:4222", "mesh:" + testPassword + "@192.0.2.2:4222", "nats://127.0.0.1:1"}})
	drain(l)
	// Open says it before it returns.
	line := logLine(logs.String(), "link: the bus URL is plaintext")
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
