package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// enrol answers as every command does: usage errors exit 2, a token it cannot read exits 1 and
// says why, before anything touches the network or the root.
func TestEnrolCommandLine(t *testing.T) {
	root := t.TempDir()
	env := func(string) string { return "" }
	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		out   string
		err   string
	}{
		{[]string{"--help"}, "", 0, "usage: mesh-host enrol [flags] TOKEN", ""},
		{nil, "", 2, "", "mesh-host enrol: missing TOKEN\n"},
		{[]string{"a", "b"}, "", 2, "", "mesh-host enrol: unexpected argument \"b\"; this command takes TOKEN\n"},
		{[]string{"--bogus", "t"}, "", 2, "", "mesh-host enrol: flag provided but not defined: -bogus\n"},
		{[]string{"--root", root, "hello"}, "", 1, "", "mesh-host enrol: enrolment token: it does not start with \"mesh-enrol-1.\""},
		{[]string{"--root", root, "-"}, "mesh-enrol-1.!!\n", 1, "", "mesh-host enrol: enrolment token: not base64url"},
		{[]string{"--root", root, "-"}, strings.Repeat("x", 9000), 1, "", "mesh-host enrol: enrolment token: 8193 bytes, more than the 8192"},
	} {
		var out, errOut bytes.Buffer
		code := enrolCmd(tc.args, strings.NewReader(tc.stdin), &out, &errOut, env)
		if code != tc.code || !prefixed(out.String(), tc.out) || !prefixed(errOut.String(), tc.err) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q…, stderr %q…", tc.args, code, out.String(), errOut.String(), tc.code, tc.out, tc.err)
		}
	}
	var out bytes.Buffer
	command("v1", []string{"--help"}, &out, &bytes.Buffer{})
	if !strings.Contains(out.String(), "  enrol ") {
		t.Errorf("mesh-host --help does not list enrol:\n%s", out.String())
	}
}

// offlineToken is a well-formed token for node whose bus is nowhere: enough for what enrol checks
// before it connects.
func offlineToken(t *testing.T, node string) string {
	t.Helper()
	creds := "-----BEGIN NATS USER JWT-----\nx\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\nSU\n------END USER NKEY SEED------\n"
	tok, err := wire.FormatToken(wire.EnrolToken{URLs: []string{"tls://127.0.0.1:1"}, CASHA256: strings.Repeat("ab", 32), Prefix: "mesh", Node: node,
		ID: wire.NewTokenID([16]byte{1}), Secret: wire.NewTokenSecret([32]byte{2}), Expires: time.Now().Add(time.Hour).UTC().Truncate(time.Second), Creds: creds})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// `mesh-host enrol --root <web-01's root> <a token for web-02>` is refused before anything is
// asked or written: it says which node the root is and which the token is for, and that
// --replace would make it the other; host.json and node.creds are left as the running host has them.
func TestEnrolRefusesARootEnrolledAsAnotherNode(t *testing.T) {
	root := t.TempDir()
	creds := filepath.Join(root, "node.creds")
	hostJSON := `{"node": "web-01", "nats_creds": "` + creds + `"}`
	if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(hostJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(creds, []byte("web-01's"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := enrolCmd([]string{"--root", root, offlineToken(t, "web-02")}, strings.NewReader(""), &out, &errOut, func(string) string { return "" })
	want := "mesh-host enrol: the root " + root + " is enrolled as node web-01, and the token is for node web-02: "
	if code != 1 || !strings.HasPrefix(errOut.String(), want) || !strings.Contains(errOut.String(), "--replace") {
		t.Fatalf("exit %d, stderr %q; want exit 1, %q… naming --replace", code, errOut.String(), want)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "host.json")); string(b) != hostJSON {
		t.Errorf("host.json is now %s", b)
	}
	if b, _ := os.ReadFile(creds); string(b) != "web-01's" {
		t.Errorf("node.creds is now %s", b)
	}
}
