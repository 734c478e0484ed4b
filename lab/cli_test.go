package lab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The command-line tests run the built binaries, as an operator would: one way for every
// command (issue 8).

const pkgLab = "./lab/cmd/mesh-lab"

type binary struct {
	name, pkg string
	commands  []string // at least these; the rest are read from its --help
}

var binaries = []binary{
	{"mesh-launcher", PkgLauncher, []string{"run", "install", "status", "version"}},
	{"mesh-host", PkgHost, []string{"run", "preflight", "version"}},
	{"mesh-release", PkgRelease, []string{"serve", "init", "declare", "fleet", "metrics", "keygen", "build", "publish", "target", "rollout", "withdraw", "enrol-token", "enrol-service", "node", "version"}},
	{"mesh-lab", pkgLab, []string{"demo", "up", "version"}},
}

const cliVersion = "v8.8.8-cli"

// runBin runs a built binary with args and no MESH_* variables, and returns its exit status and
// output.
func runBin(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESH_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Dir = t.TempDir() // mesh-lab demo, if it ran, would fail here rather than build the tree
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("%s %q: %v", filepath.Base(bin), args, err)
	}
	return code, o.String(), e.String()
}

// commandsOf is every command b's --help lists (an indented word, then its summary), checked
// to include the ones the test knows.
func commandsOf(t *testing.T, b binary, path string) []string {
	t.Helper()
	_, out, _ := runBin(t, path, "--help")
	var listed []string
	sc := bufio.NewScanner(strings.NewReader(out))
	re := regexp.MustCompile(`^  ([a-z][a-z-]*) +\S`)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			listed = append(listed, m[1])
		}
	}
	for _, want := range b.commands {
		if !strings.Contains(" "+strings.Join(listed, " ")+" ", " "+want+" ") {
			t.Errorf("%s --help does not list %s:\n%s", b.name, want, out)
		}
	}
	return listed
}

// -h and --help on every binary and every command print a usage on stdout, exit 0, and write
// nothing on stderr; a command's usage line names it (and its arguments).
func TestEveryBinaryAndCommandPrintsHelpOnStdout(t *testing.T) {
	for _, b := range binaries {
		path := build(t, b.pkg, cliVersion)
		runs := [][]string{{"-h"}, {"--help"}}
		for _, c := range commandsOf(t, b, path) {
			runs = append(runs, []string{c, "-h"}, []string{c, "--help"})
		}
		for _, args := range runs {
			code, out, errOut := runBin(t, path, args...)
			want := "usage: " + b.name
			if len(args) == 2 {
				want += " " + args[0]
			}
			if code != 0 || !strings.HasPrefix(out, want) || errOut != "" {
				t.Errorf("%s %s: exit %d, stderr %q, stdout:\n%s\nwant exit 0, nothing on stderr and stdout starting %q",
					b.name, strings.Join(args, " "), code, errOut, out, want)
			}
		}
	}
	// The usage lines name positional arguments.
	rel := build(t, PkgRelease, cliVersion)
	for cmd, want := range map[string]string{
		"declare":  "usage: mesh-release declare [flags] NODE FILE\n",
		"target":   "usage: mesh-release target [flags] (NODE… | --fleet) VERSION\n",
		"publish":  "usage: mesh-release publish [flags] DIR\n",
		"withdraw": "usage: mesh-release withdraw [flags] VERSION\n",
	} {
		if _, out, _ := runBin(t, rel, cmd, "--help"); !strings.HasPrefix(out, want) {
			t.Errorf("mesh-release %s --help: %q, want %q", cmd, out, want)
		}
	}
	if _, out, _ := runBin(t, build(t, PkgLauncher, cliVersion), "install", "--help"); !strings.HasPrefix(out, "usage: mesh-launcher install [flags] FILE\n") {
		t.Errorf("mesh-launcher install --help: %q", out)
	}
}

// An unknown command is named, with where to look, on stderr, exit 2; so is no command at all
// (the usage, on stderr).
func TestEveryBinaryRefusesAnUnknownCommand(t *testing.T) {
	for _, b := range binaries {
		path := build(t, b.pkg, cliVersion)
		code, out, errOut := runBin(t, path, "frobnicate")
		want := fmt.Sprintf("%s: unknown command \"frobnicate\"\nrun `%s --help` for the commands\n", b.name, b.name)
		if code != 2 || out != "" || errOut != want {
			t.Errorf("%s frobnicate: exit %d, stdout %q, stderr %q; want exit 2 and %q", b.name, code, out, errOut, want)
		}
		code, out, errOut = runBin(t, path)
		if code != 2 || out != "" || !strings.HasPrefix(errOut, "usage: "+b.name) {
			t.Errorf("%s alone: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", b.name, code, out, errOut)
		}
	}
}

// A bad flag is said once, the flag package's message and a pointer to --help, exit 2, for
// every command of every binary.
func TestEveryCommandSaysABadFlagOnceAndExits2(t *testing.T) {
	for _, b := range binaries {
		path := build(t, b.pkg, cliVersion)
		for _, c := range commandsOf(t, b, path) {
			code, out, errOut := runBin(t, path, c, "--no-such-flag")
			want := fmt.Sprintf("%s %s: flag provided but not defined: -no-such-flag\nrun `%s %s --help` for usage\n", b.name, c, b.name, c)
			if code != 2 || out != "" || errOut != want {
				t.Errorf("%s %s --no-such-flag: exit %d, stdout %q, stderr %q; want exit 2 and %q", b.name, c, code, out, errOut, want)
			}
		}
	}
}

// Every binary says its version both ways: the version stamped into it, alone on stdout.
func TestEveryBinarySaysItsVersion(t *testing.T) {
	for _, b := range binaries {
		path := build(t, b.pkg, cliVersion)
		for _, arg := range []string{"--version", "version"} {
			code, out, errOut := runBin(t, path, arg)
			if code != 0 || out != cliVersion+"\n" || errOut != "" {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want %q", b.name, arg, code, out, errOut, cliVersion)
			}
		}
	}
}

// The issue: two `serve` shared one --data directory, a port in use made serve wait 10 s after
// its banner, and the NATS banner filled its log. With the real binary: the second serve on
// the same directory fails at once naming the first's pid, a serve on a taken address fails at
// once naming it, and the first logs nothing on stderr from start to a clean stop.
func TestServeOwnsItsDataDirectoryAndAddressAndIsQuiet(t *testing.T) {
	rel := build(t, PkgRelease, cliVersion)
	data := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := exec.CommandContext(ctx, rel, "serve", "--data", data, "--listen", "127.0.0.1:0")
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	stdout, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer first.Process.Kill()
	sc := bufio.NewScanner(stdout)
	url := ""
	for url == "" && sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), "serving the mesh bus on "); ok {
			url, _, _ = strings.Cut(rest, " ")
		}
	}
	if url == "" {
		t.Fatalf("serve did not say where it listens; stderr:\n%s", firstErr.String())
	}
	drained := make(chan struct{})
	go func() {
		for sc.Scan() { // the loopback note, then "stopping"
		}
		close(drained)
	}()

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"SameData", []string{"--data", data, "--listen", "127.0.0.1:0"}, fmt.Sprintf("(pid %d) already serves from %s", first.Process.Pid, data)},
		{"SameAddress", []string{"--data", t.TempDir(), "--listen", hostPort(url)}, "cannot listen on " + hostPort(url)},
	} {
		// The line said is the behaviour: both come from checks before any server starts,
		// never from waiting for one to become ready.
		code, out, errOut := runBin(t, rel, append([]string{"serve"}, tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and one line saying %q", tc.name, code, out, errOut, tc.want)
		}
	}

	first.Process.Signal(os.Interrupt)
	<-drained // Wait closes the pipe: read it to its end first
	if err := first.Wait(); err != nil {
		t.Errorf("serve did not stop cleanly: %v", err)
	}
	if firstErr.Len() != 0 {
		t.Errorf("serve logged without --verbose:\n%s", firstErr.String())
	}
}

// hostPort is the host:port of a client URL, whatever its scheme (serve says tls:// by default).
func hostPort(url string) string {
	if _, rest, ok := strings.Cut(url, "://"); ok {
		return rest
	}
	return url
}
