package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/novox/mesh-host/lab"
)

// The issue: `mesh-lab demo --help` ran the demo. Help never runs it; the rest answers like
// every mesh command.
func TestTheCommandLineAnswersLikeEveryMeshCommand(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // prefixes; "" means empty
		ran      bool
	}{
		{[]string{"demo", "--help"}, 0, "usage: mesh-lab demo\n", "", false},
		{[]string{"demo", "-h"}, 0, "usage: mesh-lab demo\n", "", false},
		{[]string{"--help"}, 0, "usage: mesh-lab <command>", "", false},
		{[]string{"--version"}, 0, version + "\n", "", false},
		{[]string{"version"}, 0, version + "\n", "", false},
		{[]string{"version", "--help"}, 0, "usage: mesh-lab version\n", "", false},
		{nil, 2, "", "usage: mesh-lab <command>", false},
		{[]string{"play"}, 2, "", "mesh-lab: unknown command \"play\"\nrun `mesh-lab --help` for the commands\n", false},
		{[]string{"demo", "--fast"}, 2, "", "mesh-lab demo: flag provided but not defined: -fast\nrun `mesh-lab demo --help` for usage\n", false},
		{[]string{"demo"}, 0, "", "", true},
		{[]string{"up", "--help"}, 0, "usage: mesh-lab up [flags]\n", "", false},
		{[]string{"up", "extra"}, 2, "", "mesh-lab up: unexpected argument \"extra\"", false},
		{[]string{"up", "--nodes", "2"}, 0, "", "", true},
	} {
		ran := false
		demo := func(context.Context, io.Writer, string) error { ran = true; return nil }
		up := func(_ context.Context, _ io.Writer, o lab.UpOptions) error {
			ran = o.Nodes == 2 && o.Src == "."
			return nil
		}
		var out, errOut bytes.Buffer
		code := cli(context.Background(), tc.args, &out, &errOut, runners{demo: demo, up: up})
		if code != tc.code || ran != tc.ran || !prefixed(out.String(), tc.out) || !prefixed(errOut.String(), tc.err) {
			t.Errorf("%q: exit %d, ran %v, stdout %q, stderr %q; want exit %d, ran %v, stdout %q…, stderr %q…",
				tc.args, code, ran, out.String(), errOut.String(), tc.code, tc.ran, tc.out, tc.err)
		}
	}
}

func prefixed(s, prefix string) bool {
	if prefix == "" {
		return s == ""
	}
	return strings.HasPrefix(s, prefix)
}
