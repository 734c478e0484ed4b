package main

import (
	"strings"
	"testing"
)

// `rollout --help` lists the five subcommands; each answers -h, --help and `help rollout X`
// on stdout with exit 0, naming its arguments, its flags and the exit statuses it can return.
func TestRolloutAndEachSubcommandPrintTheirHelpOnStdout(t *testing.T) {
	code, out, errOut := runMain(t, nil, "rollout", "--help")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: mesh-release rollout (start|resume|status|abort|watch)") {
		t.Fatalf("rollout --help: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, sub := range []string{"start VERSION", "resume", "status [ID]", "abort", "watch"} {
		if !strings.Contains(out, "\n  "+sub+" ") {
			t.Errorf("rollout --help does not list %q:\n%s", sub, out)
		}
	}
	if code, out, _ := runMain(t, nil, "--help"); code != 0 || !strings.Contains(out, "\n  rollout  stage a release") {
		t.Errorf("mesh-release --help does not list rollout:\n%s", out)
	}
	if _, out, _ := runMain(t, nil, "target", "--help"); !strings.Contains(out, "`mesh-release rollout start VERSION`") {
		t.Errorf("target --help does not point at rollout start:\n%s", out)
	}
	for _, tc := range []struct {
		sub, usage string
		flags      []string
		exits      bool
	}{
		{"start", "usage: mesh-release rollout start [flags] VERSION\n", []string{"-canary int", "-canary-nodes ids", "-steps shares", "-window duration", "-soak duration", "-alive duration", "-silent-after duration", "-lease duration", "-policy string", "-supersede", "-follow", "-json", "-nats URL", "-creds FILE", "-prefix string"}, true},
		{"resume", "usage: mesh-release rollout resume [flags]\n", []string{"-follow", "-json", "-lease duration", "-nats URL"}, true},
		{"status", "usage: mesh-release rollout status [flags] [ID]\n", []string{"-json", "-nats URL"}, false},
		{"abort", "usage: mesh-release rollout abort [flags]\n", []string{"-nats URL"}, false},
		{"watch", "usage: mesh-release rollout watch [flags]\n", []string{"-policy string", "-canary int", "-steps shares", "-window duration", "-follow", "-json", "-lease duration"}, false},
	} {
		for _, args := range [][]string{{"rollout", tc.sub, "-h"}, {"rollout", tc.sub, "--help"}, {"help", "rollout", tc.sub}} {
			code, out, errOut := runMain(t, nil, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, tc.usage) {
				t.Errorf("%q: exit %d, stdout %.200q, stderr %q; want exit 0 and %q on stdout", args, code, out, errOut, tc.usage)
				continue
			}
			for _, f := range tc.flags {
				if !strings.Contains(out, "\n  "+f+"\n") {
					t.Errorf("%q: no flag %q in:\n%s", args, f, out)
				}
			}
			if strings.Contains(out, "-supersede") != (tc.sub == "start") {
				t.Errorf("%q: --supersede belongs to start alone:\n%s", args, out)
			}
			if tc.exits && !strings.Contains(out, "exit status: 0 completed, 1 an error (or stopped by a signal: the rollout pauses), 2 usage,\n3 halted, 4 aborted or superseded.") {
				t.Errorf("%q: the exit statuses are not said:\n%s", args, out)
			}
			if !strings.Contains(out, envNATSURL) {
				t.Errorf("%q: the help does not name %s", args, envNATSURL)
			}
		}
	}
}

// A bad subcommand, flag or argument is said once, with the --help to read, and exits 2 before
// any bus is dialled (none runs here).
func TestRolloutUsageErrorsExit2AndAreSaidOnce(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "frob"}, "mesh-release rollout: unknown subcommand \"frob\"; want start, resume, status, abort or watch\nrun `mesh-release rollout --help` for usage\n"},
		{[]string{"rollout", "--bogus"}, "mesh-release rollout: flag provided but not defined: -bogus\nrun `mesh-release rollout --help` for usage\n"},
		{[]string{"rollout", "start", "v1.2.0", "--bogus"}, "mesh-release rollout start: flag provided but not defined: -bogus\nrun `mesh-release rollout start --help` for usage\n"},
		{[]string{"rollout", "start", "v1.2.0", "v1.3.0"}, "mesh-release rollout start: want VERSION, got 2 arguments\n"},
		{[]string{"rollout", "start", "1.2.0"}, "mesh-release rollout start: \"1.2.0\" is not a version; want vX.Y.Z\n"},
		{[]string{"rollout", "start", "v1.2.0", "--steps", "10%,50%"}, "mesh-release rollout start: --steps: the last step is 50%; it must be 100% so that the rollout reaches every node\n"},
		{[]string{"rollout", "start", "v1.2.0", "--steps", "50%,x,100%"}, "mesh-release rollout start: --steps: step \"x\" is not a whole percentage like 10%\n"},
		{[]string{"rollout", "start", "v1.2.0", "--policy", "yolo"}, "mesh-release rollout start: --policy \"yolo\": want canary or immediate\n"},
		{[]string{"rollout", "start", "v1.2.0", "--canary", "1", "--canary-nodes", "a"}, "mesh-release rollout start: give --canary N or --canary-nodes a,b, not both\n"},
		{[]string{"rollout", "start", "v1.2.0", "--canary-nodes", "a,b.c"}, "mesh-release rollout start: --canary-nodes: node id \"b.c\""},
		{[]string{"rollout", "start", "v1.2.0", "--window", "0s"}, "mesh-release rollout start: --window is 0s; it must be positive\n"},
		{[]string{"rollout", "start", "v1.2.0", "--canary", "-1"}, "mesh-release rollout start: --canary is -1; it must be 0 or more\n"},
		{[]string{"rollout", "resume", "now"}, "mesh-release rollout resume: unexpected argument [\"now\"]; this command takes flags only\n"},
		{[]string{"rollout", "resume", "--lease", "0s"}, "mesh-release rollout resume: --lease is 0s; it must be positive\n"},
		{[]string{"rollout", "status", "a", "b"}, "mesh-release rollout status: want at most one rollout ID, got 2 arguments\n"},
		{[]string{"rollout", "abort", "now"}, "mesh-release rollout abort: unexpected argument"},
		{[]string{"rollout", "watch", "v1.2.0"}, "mesh-release rollout watch: unexpected argument"},
		{[]string{"rollout", "watch", "--soak", "-1s"}, "mesh-release rollout watch: --soak is -1s; it must be positive\n"},
	} {
		code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, tc.args...)
		hint := "\nrun `mesh-release " + strings.Join(tc.args[:2], " ") + " --help` for usage\n"
		if tc.args[1] == "frob" || tc.args[1] == "--bogus" {
			hint = "\nrun `mesh-release rollout --help` for usage\n"
		}
		if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 2 || !strings.HasSuffix(errOut, hint) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q once, then %q", tc.args, code, out, errOut, tc.want, hint)
		}
	}
	// Alone, rollout and rollout start show their whole usage on stderr.
	for _, args := range [][]string{{"rollout"}, {"rollout", "start"}} {
		code, out, errOut := runMain(t, nil, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: mesh-release "+strings.Join(args, " ")) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", args, code, out, errOut)
		}
	}
}
