package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire/meshtest"
)

const webToken = "0123456789abcdef0123456789abcdef"

// webLogin writes a token file and a TLS certificate for 127.0.0.1, returning their paths.
func webLogin(t *testing.T) (tokenFile, cert, key, ca string) {
	t.Helper()
	dir := t.TempDir()
	tokenFile = filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(webToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, key, ca, err := trust.EnsureTLS(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return tokenFile, cert, key, ca
}

// Off loopback the page starts only with TLS and a login; a half-given TLS pair, two logins
// and a bad login file are refused before anything listens or connects.
func TestWebRefusesToServeOffLoopbackWithoutTLSAndALogin(t *testing.T) {
	tokenFile, cert, key, _ := webLogin(t)
	short := filepath.Join(t.TempDir(), "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"neither TLS nor a login", nil, exitError, "missing: TLS and a login"},
		{"TLS without a login", []string{"--tls-cert", cert, "--tls-key", key}, exitError, "missing: a login"},
		{"a login without TLS", []string{"--token-file", tokenFile}, exitError, "missing: TLS"},
		{"a certificate without its key", []string{"--tls-cert", cert, "--token-file", tokenFile}, exitUsage, "--tls-cert and --tls-key go together"},
		{"two logins", []string{"--token-file", tokenFile, "--users-file", tokenFile}, exitUsage, "not both"},
		{"a short token", []string{"--token-file", short, "--tls-cert", cert, "--tls-key", key}, exitError, "want at least 22"},
		{"a non-positive silence rule", []string{"--silent-after", "0s"}, exitUsage, "--silent-after must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"web", "--nats", "nats://127.0.0.1:1", "--listen", "0.0.0.0:0"}, tc.args...)
			code, _, stderr := runMain(t, nil, args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d saying %q", code, stderr, tc.code, tc.want)
			}
		})
	}
}

// With TLS and a token it serves off loopback: HTTPS only, the page to who sends the token, a
// refusal with a challenge to who does not.
func TestWebServesOffLoopbackOverTLSToWhoLogsIn(t *testing.T) {
	url, _ := startServeConnected(t)
	tokenFile, cert, key, caFile := webLogin(t)
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &meshtest.Buffer{}, &meshtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- webCmd(ctx, &stdio{out: out, err: errOut, getenv: func(string) string { return "" }}, flagSetFor("web"),
			[]string{"--nats", url, "--listen", "0.0.0.0:0", "--tls-cert", cert, "--tls-key", key, "--token-file", tokenFile})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("web: %v (stderr %s)", err, errOut)
		}
	}()
	re := regexp.MustCompile(`web: serving https://\S+:(\d+)/`)
	var port string
	meshtest.Eventually(t, "web says where it serves", func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			port = m[1]
		}
		return m != nil
	})
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	addr := net.JoinHostPort("127.0.0.1", port)
	get := func(u, bearer string) (int, string) {
		req, _ := http.NewRequest("GET", u, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("https://"+addr+"/", ""); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s", code, body)
	}
	if code, body := get("https://"+addr+"/", webToken); code != http.StatusOK || !strings.Contains(body, "mesh fleet") {
		t.Errorf("with the token: %d %s", code, body)
	}
	if code, body := get("http://"+addr+"/", webToken); code == http.StatusOK {
		t.Errorf("plain HTTP was served: %d %s", code, body)
	}
}
