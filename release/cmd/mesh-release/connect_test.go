package main

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/novox/mesh-host/release/trust"
)

// freeURL is a loopback URL with nothing listening on it: a port the kernel gave and took back.
func freeURL(t *testing.T, scheme string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return scheme + "://127.0.0.1:" + strconv.Itoa(port)
}

// The issue: a command that could not reach the bus said only what NATS said ("Authorization
// Violation", "x509: certificate signed by unknown authority", "no servers available"), where
// the host's link says what to change. Each refusal names its fix, on the one line the command
// prints: the credentials to pass and where serve wrote them, the CA to trust and where serve
// keeps it, the URL tried and whether serve runs. Against a real serve in operator mode with
// TLS, and a port nothing listens on.
func TestAConnectionRefusedNamesItsFix(t *testing.T) {
	data := t.TempDir()
	url, out, _, _ := runServe(t, "--data", data, "--listen", "127.0.0.1:0")
	env := exported(out.String())
	creds, ca := env[envNATSCreds], env[envNATSCA]
	// Another serve's identities and CA: present, well-formed, and not this bus's.
	other := t.TempDir()
	otherStore, err := trust.Ensure(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := trust.EnsureTLS(other, nil); err != nil {
		t.Fatal(err)
	}
	otherCA := filepath.Join(other, "tls", "ca.pem")
	nothing := freeURL(t, "tls")

	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string // each said, in this order
	}{
		{"no credentials", map[string]string{envNATSURL: url, envNATSCA: ca}, []string{"init"},
			[]string{"Authorization Violation", "no credentials were given", "--creds FILE", envNATSCreds, filepath.Join(defaultDataDir, "trust", "admin.creds"), "serve's --data"}},
		{"no credentials, fleet", map[string]string{envNATSURL: url, envNATSCA: ca}, []string{"fleet"},
			[]string{"Authorization Violation", "--creds FILE", envNATSCreds, "trust/admin.creds"}},
		{"no credentials, serve's data in the environment", map[string]string{envNATSURL: url, envNATSCA: ca, envReleaseData: data}, []string{"rollout", "status"},
			[]string{"Authorization Violation", "--creds FILE", envNATSCreds, creds}},
		{"another bus's credentials", map[string]string{envNATSURL: url, envNATSCA: ca}, []string{"init", "--creds", otherStore.AdminCreds()},
			[]string{"Authorization Violation", "refused the credentials in " + otherStore.AdminCreds() + " (--creds)", "trust/admin.creds"}},
		{"another bus's credentials from the environment", map[string]string{envNATSURL: url, envNATSCA: ca, envNATSCreds: otherStore.AdminCreds()}, []string{"fleet"},
			[]string{"Authorization Violation", "refused the credentials in " + otherStore.AdminCreds() + " ($" + envNATSCreds + ")"}},
		{"no CA", map[string]string{envNATSURL: url, envNATSCreds: creds}, []string{"init"},
			[]string{"x509: certificate signed by unknown authority", "--ca FILE", envNATSCA, filepath.Join(defaultDataDir, "tls", "ca.pem")}},
		{"no CA, serve's data in the environment", map[string]string{envNATSURL: url, envNATSCreds: creds, envReleaseData: data}, []string{"fleet"},
			[]string{"x509: certificate signed by unknown authority", "--ca FILE", envNATSCA, ca}},
		{"another bus's CA", map[string]string{envNATSURL: url, envNATSCreds: creds}, []string{"init", "--ca", otherCA},
			[]string{"x509: certificate signed by unknown authority", "the CA in " + otherCA + " (--ca) did not sign", "tls/ca.pem"}},
		{"another bus's CA, a trust-store command", nil, []string{"enrol-token", "--data", data, "--nats", url, "--ca", otherCA},
			[]string{"x509: certificate signed by unknown authority", "the CA in " + otherCA + " (--ca) did not sign"}},
		{"another serve's data, a trust-store command", nil, []string{"enrol-token", "--data", other, "--nats", url},
			[]string{"x509: certificate signed by unknown authority", "the CA in " + otherCA + " did not sign", "is " + other + " (from --data) the --data of the serve that runs this bus"}},
		{"another serve's data with this bus's CA, a trust-store command", map[string]string{envReleaseData: other}, []string{"node", "revoke", "n1", "--nats", url, "--ca", ca},
			[]string{"Authorization Violation", "refused the credentials in " + otherStore.AdminCreds(), "is " + other + " (from $" + envReleaseData + ") the --data"}},
		{"nothing listening", map[string]string{envNATSURL: nothing, envNATSCreds: creds, envNATSCA: ca}, []string{"init"},
			[]string{"connect to the bus at " + nothing, "nothing answers at " + nothing, "is `mesh-release serve` running", "--nats", envNATSURL}},
		{"nothing listening, plain URL", nil, []string{"fleet", "--nats", strings.Replace(nothing, "tls:", "nats:", 1)},
			[]string{"nothing answers at " + strings.Replace(nothing, "tls:", "nats:", 1), "is `mesh-release serve` running"}},
		{"nothing listening, a trust-store command", nil, []string{"enrol-token", "--data", data, "--nats", nothing},
			[]string{"nothing answers at " + nothing, "is `mesh-release serve` running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.env, tc.args...)
			if code != exitError || stdout != "" || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line on stderr", code, stdout, stderr)
			}
			rest := stderr
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr %q does not say %q (in order: %q)", stderr, w, tc.want)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}
