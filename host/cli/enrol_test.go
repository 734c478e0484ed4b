package cli

import (
	"bytes"
	"strings"
	"testing"
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
