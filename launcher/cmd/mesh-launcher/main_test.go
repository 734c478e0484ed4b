package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/launcher"
)

// One way for every command: help on stdout with exit 0, a bad flag said once with exit 2,
// unknown commands named, the version both ways. (lab/cli_test.go runs the built binary.)
func TestTheCommandLineAnswersLikeEveryMeshCommand(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // prefixes; "" means empty
	}{
		{[]string{"--help"}, 0, "usage: mesh-launcher <command>", ""},
		{[]string{"run", "-h"}, 0, "usage: mesh-launcher run [flags]", ""},
		{[]string{"status", "--help"}, 0, "usage: mesh-launcher status [flags]", ""},
		{[]string{"version", "--help"}, 0, "usage: mesh-launcher version\n", ""},
		{[]string{"--version"}, 0, launcher.Version + "\n", ""},
		{[]string{"version"}, 0, launcher.Version + "\n", ""},
		{nil, 2, "", "usage: mesh-launcher <command>"},
		{[]string{"start"}, 2, "", "mesh-launcher: unknown command \"start\"\nrun `mesh-launcher --help` for the commands\n"},
		{[]string{"run", "--bogus"}, 2, "", "mesh-launcher run: flag provided but not defined: -bogus\nrun `mesh-launcher run --help` for usage\n"},
		{[]string{"status", "extra"}, 2, "", "mesh-launcher status: unexpected argument \"extra\"; this command takes flags only\n"},
		{[]string{"run", "--failure-limit", "0"}, 2, "", "mesh-launcher run: --failure-limit must be at least 1\n"},
		{[]string{"install", "--help"}, 0, "usage: mesh-launcher install [flags] FILE\n", ""},
		{[]string{"install"}, 2, "", "mesh-launcher install: missing FILE\nrun `mesh-launcher install --help` for usage\n"},
		{[]string{"install", "a", "b"}, 2, "", "mesh-launcher install: unexpected argument \"b\"; this command takes FILE\n"},
		{[]string{"install", "a", "--version", "1.0"}, 2, "", "mesh-launcher install: --version \"1.0\" is not a canonical semantic version"},
		{[]string{"install", "--version", "v1.0.0+build", "a"}, 2, "", "mesh-launcher install: --version \"v1.0.0+build\" is not"},
		{[]string{"install", "--", "--version"}, 1, "", "mesh-launcher install: --version does not exist"},
		// supports: what the package's postinst asks the running launcher (issue 19, 5).
		{[]string{"supports", "takeover"}, 0, "", ""},
		{[]string{"supports", "teleport"}, 1, "", "mesh-launcher supports: this launcher (" + launcher.Version + ") does not have \"teleport\"; it has: takeover\n"},
		{[]string{"supports"}, 2, "", "mesh-launcher supports: missing FEATURE\nrun `mesh-launcher supports --help` for usage\n"},
		{[]string{"supports", "takeover", "x"}, 2, "", "mesh-launcher supports: unexpected argument \"x\"; this command takes FEATURE\n"},
		{[]string{"supports", "--all"}, 2, "", "mesh-launcher supports: flag provided but not defined: -all\n"},
		{[]string{"supports", "--help"}, 0, "usage: mesh-launcher supports FEATURE\n", ""},
		{[]string{"supports", strings.Repeat("x", 10000)}, 1, "", "mesh-launcher supports: this launcher (" + launcher.Version + ") does not have \"" + strings.Repeat("x", 64) + "\"; it has"},
	} {
		var out, errOut bytes.Buffer
		code := cli(tc.args, &out, &errOut, func(string) string { return "" })
		if code != tc.code || !prefixed(out.String(), tc.out) || !prefixed(errOut.String(), tc.err) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q…, stderr %q…", tc.args, code, out.String(), errOut.String(), tc.code, tc.out, tc.err)
		}
	}
}

func prefixed(s, prefix string) bool {
	if prefix == "" {
		return s == ""
	}
	return strings.HasPrefix(s, prefix)
}

// status on a root that does not exist says so, naming the root and where it is given, and
// exits 1 (its "error"; 3 and 4 are states of a node, which a missing root is not); on a root
// with no records it says the launcher never ran there. The built binary, as an operator runs it.
func TestStatusOnAMissingRootSaysThereIsNoRootAndExits1(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mesh-launcher")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	missing := filepath.Join(t.TempDir(), "no", "such", "root")
	empty := t.TempDir()
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"--root", nil, []string{"status", "--root", missing}, "mesh-launcher status: no mesh-host root at " + missing + " (--root or MESH_HOST_ROOT)\n"},
		{"--json --root", nil, []string{"status", "--json", "--root", missing}, "mesh-launcher status: no mesh-host root at " + missing + " (--root or MESH_HOST_ROOT)\n"},
		{"MESH_HOST_ROOT", []string{"MESH_HOST_ROOT=" + missing}, []string{"status"}, "mesh-launcher status: no mesh-host root at " + missing + " (--root or MESH_HOST_ROOT)\n"},
		{"a root with no records", nil, []string{"status", "--root", empty}, "mesh-launcher status: no records at " + filepath.Join(empty, "records.db") + ": mesh-launcher has never run on this root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, tc.args...)
			cmd.Env = append(append(os.Environ(), "MESH_HOST_ROOT="), tc.env...)
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || out.Len() != 0 || !strings.HasPrefix(errOut.String(), tc.want) {
				t.Errorf("%v, stdout %q, stderr %q; want exit 1, stderr %q…", err, out.String(), errOut.String(), tc.want)
			}
			if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("status created the root: %v", err)
			}
		})
	}
}
