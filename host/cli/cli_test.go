package cli

import (
	"bytes"
	"strings"
	"testing"
)

// One way for every command: help on stdout with exit 0, a bad flag said once with exit 2,
// unknown commands named, the version both ways. (lab/cli_test.go runs the built binary.)
func TestTheCommandLineAnswersLikeEveryMeshCommand(t *testing.T) {
	const v = "v1.2.3"
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // prefixes; "" means empty
	}{
		{[]string{"--help"}, 0, "usage: mesh-host <command>", ""},
		{[]string{"run", "-h"}, 0, "usage: mesh-host run [flags]", ""},
		{[]string{"preflight", "--help"}, 0, "usage: mesh-host preflight [flags]", ""},
		{[]string{"version", "--help"}, 0, "usage: mesh-host version\n", ""},
		{[]string{"--version"}, 0, v + "\n", ""},
		{[]string{"version"}, 0, v + "\n", ""},
		{nil, 2, "", "usage: mesh-host <command>"},
		{[]string{"start"}, 2, "", "mesh-host: unknown command \"start\"\nrun `mesh-host --help` for the commands\n"},
		{[]string{"run", "--bogus"}, 2, "", "mesh-host run: flag provided but not defined: -bogus\nrun `mesh-host run --help` for usage\n"},
		{[]string{"preflight", "extra"}, 2, "", "mesh-host preflight: unexpected argument \"extra\"; this command takes flags only\n"},
	} {
		var out, errOut bytes.Buffer
		code := command(v, tc.args, &out, &errOut)
		if code != tc.code || !prefixed(out.String(), tc.out) || !prefixed(errOut.String(), tc.err) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q…, stderr %q…", tc.args, code, out.String(), errOut.String(), tc.code, tc.out, tc.err)
		}
	}
}

// run's help explains where the node id comes from; the issue found it explained nowhere.
func TestRunHelpSaysHowTheNodeIDIsMade(t *testing.T) {
	var out bytes.Buffer
	command("v1.2.3", []string{"run", "--help"}, &out, &bytes.Buffer{})
	for _, want := range []string{"MESH_HOST_NODE", "short hostname", "mesh-launcher"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("run --help does not say %q:\n%s", want, out.String())
		}
	}
}

func prefixed(s, prefix string) bool {
	if prefix == "" {
		return s == ""
	}
	return strings.HasPrefix(s, prefix)
}
