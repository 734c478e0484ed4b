package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// testIO is stdio for a command run in a test: no environment, not a terminal.
func testIO(in io.Reader, out io.Writer) *stdio {
	return &stdio{in: in, out: out, err: io.Discard, getenv: func(string) string { return "" }}
}

func flagSetFor(name string) *flag.FlagSet {
	c, ok := lookup(name)
	if !ok {
		panic("no command " + name)
	}
	return c.flagSet()
}

// execCmd runs one command as main does and returns its error instead of an exit status.
func execCmd(ctx context.Context, name string, in io.Reader, out io.Writer, args ...string) error {
	c, ok := lookup(name)
	if !ok {
		panic("no command " + name)
	}
	return c.run(ctx, testIO(in, out), c.flagSet(), args)
}

// runMain runs the command line as main does, with env as the whole environment.
func runMain(t testing.TB, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	s := &stdio{in: strings.NewReader(""), out: &o, err: &e, getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code = run(ctx, s, args)
	return code, o.String(), e.String()
}

// Every command answers -h and --help on stdout with exit 0 and a usage line naming its
// arguments; `help CMD` says the same.
func TestEveryCommandPrintsItsHelpOnStdout(t *testing.T) {
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			code, out, errOut := runMain(t, nil, args...)
			want := "usage: mesh-release " + c.name
			if code != 0 || !strings.HasPrefix(out, want) || errOut != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and %q on stdout only", args, code, out, errOut, want)
			}
			if c.args != "" && !strings.Contains(out, c.args) {
				t.Errorf("%q: the usage does not name the arguments %q:\n%s", args, c.args, out)
			}
			if (c.name == "declare" || c.name == "fleet") && !strings.Contains(out, envNATSURL) {
				t.Errorf("%q: the help does not name %s:\n%s", args, envNATSURL, out)
			}
		}
	}
}

func TestTheProgramAnswersHelpVersionAndNothing(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // prefixes; "" means empty
	}{
		{[]string{"--help"}, 0, "usage: mesh-release <command>", ""},
		{[]string{"-h"}, 0, "usage: mesh-release <command>", ""},
		{[]string{"help"}, 0, "usage: mesh-release <command>", ""},
		{[]string{"--version"}, 0, version + "\n", ""},
		{[]string{"version"}, 0, version + "\n", ""},
		{nil, 2, "", "usage: mesh-release <command>"},
		{[]string{"frobnicate"}, 2, "", "mesh-release: unknown command \"frobnicate\"\nrun `mesh-release --help` for the commands\n"},
		{[]string{"--frobnicate"}, 2, "", "mesh-release: unknown flag \"--frobnicate\""},
		{[]string{"help", "frobnicate"}, 2, "", "mesh-release: unknown command \"frobnicate\""},
	} {
		code, out, errOut := runMain(t, nil, tc.args...)
		if code != tc.code || !prefixed(out, tc.out) || !prefixed(errOut, tc.err) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout %q…, stderr %q…", tc.args, code, out, errOut, tc.code, tc.out, tc.err)
		}
	}
}

func prefixed(s, prefix string) bool {
	if prefix == "" {
		return s == ""
	}
	return strings.HasPrefix(s, prefix)
}

// A bad flag or argument is said once, with where to find the usage, and exits 2, for every
// command; nothing reaches stdout.
func TestBadFlagsAndArgumentsExit2AndAreSaidOnce(t *testing.T) {
	for _, c := range commands {
		code, out, errOut := runMain(t, nil, c.name, "--no-such-flag")
		want := "mesh-release " + c.name + ": flag provided but not defined: -no-such-flag\nrun `mesh-release " + c.name + " --help` for usage\n"
		if code != 2 || out != "" || errOut != want {
			t.Errorf("%s --no-such-flag: exit %d, stdout %q, stderr %q; want exit 2 and stderr %q", c.name, code, out, errOut, want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"declare", "n1"}, "mesh-release declare: want NODE and FILE, got 1 argument\n"},
		{[]string{"declare", "n1", "f", "--max-bytes", "x"}, "mesh-release declare: invalid value \"x\" for flag -max-bytes: parse error\n"},
		{[]string{"declare", "n1", "f", "--max-bytes", "0"}, "mesh-release declare: --max-bytes is 0; it must be a positive number of bytes\n"},
		{[]string{"fleet", "n1", "extra"}, "mesh-release fleet: one NODE at most, got 2 arguments\n"}, // one is a node (issue 22)
		{[]string{"fleet", "--silent-after", "0s"}, "mesh-release fleet: --silent-after must be positive\n"},
		{[]string{"target", "v1.0.0"}, "mesh-release target: no node ids given"},
		{[]string{"target", "--fleet", "n1", "v1.0.0"}, "mesh-release target: give node ids or --fleet, not both\n"},
		{[]string{"publish", "a", "b"}, "mesh-release publish: want DIR"},
		{[]string{"keygen", "--out="}, "mesh-release keygen: --out DIR is required\n"},
		{[]string{"version", "x"}, "mesh-release version: unexpected argument"},
	} {
		code, out, errOut := runMain(t, nil, tc.args...)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 2 ||
			!strings.HasSuffix(errOut, "\nrun `mesh-release "+tc.args[0]+" --help` for usage\n") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q once, then the --help hint", tc.args, code, out, errOut, tc.want)
		}
	}
	// A command alone, when it needs arguments, shows its whole usage.
	if code, _, errOut := runMain(t, nil, "declare"); code != 2 || !strings.Contains(errOut, "usage: mesh-release declare [flags] NODE FILE") {
		t.Errorf("declare alone: exit %d, stderr %q", code, errOut)
	}
}

// MESH_NATS_URL and MESH_NATS_CREDS stand in for --nats and --creds; the flags win.
func TestBusCommandsReadTheURLAndCredsFromTheEnvironment(t *testing.T) {
	url := startServe(t, t.TempDir())
	if code, out, errOut := runMain(t, map[string]string{envNATSURL: url}, "init"); code != 0 || !strings.HasPrefix(out, "ready:") {
		t.Fatalf("init with %s: exit %d, %q, %q", envNATSURL, code, out, errOut)
	}
	if code, _, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, "init", "--nats", url); code != 0 {
		t.Fatalf("--nats did not win over %s: %s", envNATSURL, errOut)
	}
	missing := filepath.Join(t.TempDir(), "none.creds")
	code, _, errOut := runMain(t, map[string]string{envNATSURL: url, envNATSCreds: missing}, "init")
	if code != 1 || !strings.Contains(errOut, "none.creds") {
		t.Fatalf("init with %s naming a missing file: exit %d, %q; want it used (and refused)", envNATSCreds, code, errOut)
	}
}

// The issue: `target web-01` succeeded silently for a node that does not exist. A node that
// never heartbeated is refused and nothing is set; --force sets it and says so; --fleet needs
// no check; the output names what was set and its revision.
func TestTargetSaysWhatItSetAndRefusesANodeNeverHeard(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	n := wire.NamesFor("")
	announce(t, c, "v1.0.0")
	heartbeat(t, c, "web-01")
	heartbeat(t, c, "web-02")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string // a regexp on stdout (exit 0) or stderr
		set  []string
	}{
		{"Heard", []string{"web-01", "web-02", "v1.0.0"}, 0, `^target v1\.0\.0 set for web-01 \(revision \d+\), web-02 \(revision \d+\), signed by key [0-9a-f]{16}, valid until \S+Z\n$`, []string{"web-01", "web-02"}},
		{"Typo", []string{"web-01", "web-10", "v1.0.0"}, 1, `(?s)^mesh-release target: node "web-10" has never heartbeated on this bus \(MESH_HEARTBEATS keeps each node's last heartbeat for 30 days\); no target was set\.\n.*short hostname.*Heard from 2 nodes: web-01, web-02\.\n.*--force`, nil},
		{"Forced", []string{"web-09", "v1.0.0", "--force"}, 0, `^target v1\.0\.0 set for web-09 \(revision \d+; pre-declared: it has not heartbeated yet\), signed by key [0-9a-f]{16}, valid until \S+Z\n$`, []string{"web-09"}},
		{"Fleet", []string{"--fleet", "v1.0.0"}, 0, `^target v1\.0\.0 set for the fleet \(revision \d+\): every node without its own target runs it, signed by key [0-9a-f]{16}, valid until \S+Z\n$`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv, err := c.JS.KeyValue(ctx, n.Targets())
			if err != nil {
				t.Fatal(err)
			}
			before, _ := kv.Status(ctx)
			code, out, errOut := runMain(t, map[string]string{envNATSURL: url}, append([]string{"target", "--key", keyFile(t)}, tc.args...)...)
			got := out
			if tc.code != 0 {
				got = errOut
			}
			if code != tc.code || !regexp.MustCompile(tc.want).MatchString(got) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %s", code, out, errOut, tc.code, tc.want)
			}
			after, _ := kv.Status(ctx)
			if tc.code != 0 && after.Values() != before.Values() {
				t.Errorf("a refused target was set: %d values before, %d after", before.Values(), after.Values())
			}
			for _, node := range tc.set {
				if _, err := kv.Get(ctx, wire.NodeTargetKey(node)); err != nil {
					t.Errorf("%s: %v", node, err)
				}
			}
		})
	}
}

// The list of nodes heard in a refusal is bounded, and printed safely: node ids come from
// subjects anyone allowed to publish could have made.
func TestARefusalListsAFewNodesPrintably(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		heartbeat(t, c, "node-"+string(rune('a'+i%26))+strings.Repeat("x", i))
	}
	if _, err := c.JS.Publish(ctx, "mesh.node.evil\x1b[2J.heartbeat", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "web-01.json")
	os.WriteFile(file, []byte(`{"version":1,"node":"web-01","resources":[]}`), 0o600)
	code, _, errOut := runMain(t, map[string]string{envNATSURL: url}, "declare", "web-01", file)
	if code != 1 || !strings.Contains(errOut, "Heard from 31 nodes: ") || !strings.Contains(errOut, " and 23 more (`mesh-release fleet` lists them all)") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if bad := controlBytes(errOut); bad != "" {
		t.Errorf("the refusal carries %s:\n%q", bad, errOut)
	}
	for _, line := range strings.Split(errOut, "\n") {
		if len(line) > 600 {
			t.Errorf("a line of %d bytes", len(line))
		}
	}
}

// announce stores a signed manifest for version in the releases bucket, as publish would.
func announce(t *testing.T, c *bus.Conn, version string) {
	t.Helper()
	m := wire.Manifest{Schema: wire.ManifestSchema, Version: version, OS: "linux", Arch: "amd64",
		Object: wire.ObjectName(version, "linux", "amd64"), Size: 1,
		Digest: digest.FromString("archive"), BinaryDigest: digest.FromString("binary"),
		Created: time.Now().UTC().Format(time.RFC3339)}
	kv, err := c.JS.KeyValue(context.Background(), wire.NamesFor("").Releases())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), version, m.Marshal()); err != nil {
		t.Fatal(err)
	}
}

// The issue: the NATS banner filled serve's log. Only the server's warnings and errors are
// logged unless --verbose; the banner says where it serves and that loopback is this machine only.
func TestServeIsQuietUnlessVerbose(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errOut meshtest.Buffer
		args := []string{"--data", t.TempDir(), "--listen", "127.0.0.1:0"}
		if verbose {
			args = append(args, "--verbose")
		}
		ready := make(chan string, 1)
		done := make(chan error, 1)
		go func() {
			done <- serveCmd(ctx, &stdio{out: &out, err: &errOut, getenv: func(string) string { return "" }}, flagSetFor("serve"), args, func(u string) { ready <- u })
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatal(err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		logged := errOut.String()
		if !verbose && logged != "" {
			t.Errorf("serve logged without --verbose:\n%s", logged)
		}
		if verbose && !strings.Contains(logged, "Listening for client connections") {
			t.Errorf("serve --verbose did not log the server's notices:\n%s", logged)
		}
		if o := out.String(); !regexp.MustCompile(`^serving the mesh bus on tls://127\.0\.0\.1:\d+ \(data in .*, prefix mesh\)\nonly this machine can connect; nodes elsewhere need --listen`).MatchString(o) {
			t.Errorf("serve printed:\n%s", o)
		}
	}
}
