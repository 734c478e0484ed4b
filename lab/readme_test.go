package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// The README's "Operating it" section, run as a stranger would: its shell blocks, in order, from
// a copy of this checkout, with the real binaries `make build` makes, a real `mesh-release
// serve`, and a node on a temporary root. What cannot run here is replaced, and each replacement
// must still match the README (so the README cannot drift from what is tested):
//
//	/var/lib/mesh-host, /var/lib/mesh-release, /usr/bin, /etc/systemd/system → temporary dirs
//	bus.example:4222, 0.0.0.0:4222 → a free loopback port
//	systemctl enable --now mesh-launcher → mesh-launcher run & (the unit's ExecStart)
//	the v1.2.0 build → the same command packing a release that crashes when run (--binary)
//	the rollout's --soak 2m → --soak 3s
//
// Between blocks the test waits as a person would look: for the node to heartbeat, for the
// release to run, for the rollback.
func TestREADMEOperatingSectionWorksAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole README walk-through")
	}
	ctx := meshtest.Context(t, 5*time.Minute)
	readme, err := os.ReadFile(filepath.Join(bins.Src, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthroughBlocks(t, string(readme))
	for _, name := range []string{"bus", "node", "release", "rollback", "rollout", "withdraw"} {
		if _, ok := blocks[name]; !ok {
			t.Fatalf("README has no walkthrough block %q", name)
		}
	}
	if lines := unsigned(blocks); len(lines) > 0 {
		// Hosts refuse an unsigned target, and mesh-release refuses to write one (decision 0011).
		t.Fatalf("the README's walk-through writes targets without --key: %q", lines)
	}

	work := t.TempDir()
	src := filepath.Join(work, "checkout")
	copyCheckout(t, bins.Src, src)
	root, data := filepath.Join(work, "root"), filepath.Join(work, "release-data")
	usrBin, units := filepath.Join(work, "usr-bin"), filepath.Join(work, "systemd")
	port := freePort(t)
	busURL := fmt.Sprintf("tls://127.0.0.1:%d", port)
	crashrun := build(t, "./lab/fixtures/crashrun", "v1.2.0")
	subst := []struct{ old, new string }{
		{"/var/lib/mesh-host", root},
		{"/var/lib/mesh-release", data},
		{"/srv/app", filepath.Join(work, "srv-app")}, // the declared directory: the host makes it
		{"/usr/bin/mesh-launcher", filepath.Join(usrBin, "mesh-launcher")},
		{"/etc/systemd/system/mesh-launcher.service", filepath.Join(units, "mesh-launcher.service")},
		{"bus.example:4222", fmt.Sprintf("127.0.0.1:%d", port)},
		{"0.0.0.0:4222", fmt.Sprintf("127.0.0.1:%d", port)},
		{"systemctl enable --now mesh-launcher", "mesh-launcher run --backoff-min 200ms &"},
		{"mesh-release build --version v1.2.0", "mesh-release build --version v1.2.0 --binary " + crashrun},
		{"--soak 2m", "--soak 3s"},
	}
	used := make([]bool, len(subst))
	replace := func(block string) string {
		for i, s := range subst {
			if strings.Contains(block, s.old) {
				used[i] = true
				block = strings.ReplaceAll(block, s.old, s.new)
			}
		}
		return block
	}

	sh := startShell(t, src, root)
	run := func(what, script string) string {
		t.Helper()
		out, err := sh.run(ctx, replace(script))
		if err != nil {
			t.Fatalf("README block %q: %v\n%s", what, err, out)
		}
		return out
	}

	run("bus", blocks["bus"])
	// As a person would read serve's banner before going on: the bus answers the admin.
	var c *bus.Conn
	waitFor(t, ctx, "serve to answer the admin over TLS", func() bool {
		var err error
		c, err = bus.Connect(ctx, busURL, filepath.Join(data, "trust", "admin.creds"), bus.WithCA(filepath.Join(data, "tls", "ca.pem")))
		return err == nil
	})
	defer c.Close()
	run("node", blocks["node"])
	heard := func(what string, ok func(wire.Heartbeat) bool) {
		t.Helper()
		for {
			es, err := fleet.Read(ctx, c.JS, wire.NamesFor(""))
			if err == nil {
				for _, e := range es {
					if e.Err == nil && e.Heartbeat.Node == "web-01" && ok(e.Heartbeat) {
						return
					}
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for web-01 %s: %v", what, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	heard("to heartbeat, confirmed on v1.0.0", func(hb wire.Heartbeat) bool { return hb.KnownGood == "v1.0.0" })

	// The release block: everything up to the fleet view, then the fleet view once the node runs
	// what it was targeted.
	release := blocks["release"]
	cut := strings.Index(release, "mesh-release fleet")
	out := run("release", release[:cut])
	if !strings.Contains(out, "declaration for web-01 stored, revision") {
		t.Errorf("declare did not say what it did:\n%s", out)
	}
	heard("running and confirmed on v1.1.0", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.KnownGood == "v1.1.0" && hb.DeclarationRevision > 0
	})
	if out := run("release (fleet)", release[cut:]); !regexp.MustCompile(`web-01\s+ok\s+v1\.1\.0`).MatchString(out) {
		t.Errorf("fleet does not show web-01 ok on v1.1.0:\n%s", out)
	}

	rb := blocks["rollback"]
	cut = strings.Index(rb, "mesh-launcher status")
	run("rollback", rb[:cut])
	waitFor(t, ctx, "the rollback from v1.2.0", func() bool {
		rep, err := launcher.ReadStatus(ctx, root, rollback.DefaultPolicy)
		return err == nil && len(rep.Rollbacks) > 0 && rep.Rollbacks[0].From == "v1.2.0" && rep.Running != nil && rep.Running.Version == "v1.1.0"
	})
	heard("reporting the rollback", func(hb wire.Heartbeat) bool { return len(hb.Rollbacks) > 0 && hb.Running == "v1.1.0" })
	out = run("rollback (status, fleet)", rb[cut:])
	for _, want := range []string{"BAD", "last rollback: v1.2.0 -> v1.1.0", `"from": "v1.2.0"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the README's last commands do not show %q:\n%s", want, out)
		}
	}

	// The rollout block: one node, so the canary is the whole fleet; it completes, sets the fleet
	// key, and the node runs v1.3.0 confirmed.
	out = run("rollout", blocks["rollout"])
	for _, want := range []string{"batch 1/1 (canary): targets set for 1 node: web-01", "completed: v1.3.0 is the fleet target", "completed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the README's rollout does not say %q:\n%s", want, out)
		}
	}
	heard("running and confirmed on v1.3.0", func(hb wire.Heartbeat) bool { return hb.Running == "v1.3.0" && hb.KnownGood == "v1.3.0" })

	// The withdraw block: the node steps down from v1.3.0 to v1.1.0 (v1.2.0 is bad), and fleet
	// shows the withdrawal.
	wd := blocks["withdraw"]
	cut = strings.Index(wd, "mesh-release fleet")
	run("withdraw", wd[:cut])
	heard("back on v1.1.0 after the withdrawal", func(hb wire.Heartbeat) bool { return hb.Running == "v1.1.0" })
	if out := run("withdraw (fleet)", wd[cut:]); !strings.Contains(out, "v1.3.0") || !strings.Contains(out, "withdrawn") {
		t.Errorf("fleet does not show v1.3.0 withdrawn:\n%s", out)
	}
	rep, err := launcher.ReadStatus(ctx, root, rollback.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Versions {
		if v.Version == "v1.3.0" && (!v.Bad || !strings.Contains(v.BadReason, "withdrawn: corrupts the cache under load")) {
			t.Errorf("v1.3.0 after the withdrawal: %+v", v)
		}
	}

	for i, s := range subst {
		if !used[i] {
			t.Errorf("the README no longer says %q: update this test's replacements with it", s.old)
		}
	}
}

// unsigned are the walk-through's commands that write targets without a key.
func unsigned(blocks map[string]string) []string {
	var out []string
	for _, b := range blocks {
		for _, line := range strings.Split(b, "\n") {
			writes := strings.HasPrefix(line, "mesh-release target ") || strings.HasPrefix(line, "mesh-release rollout start ") ||
				strings.HasPrefix(line, "mesh-release withdraw ")
			if writes && !strings.Contains(line, "--key") {
				out = append(out, line)
			}
		}
	}
	return out
}

// walkthroughBlocks returns the README's shell blocks marked <!-- walkthrough: NAME -->.
func walkthroughBlocks(t *testing.T, readme string) map[string]string {
	t.Helper()
	re := regexp.MustCompile("(?s)<!-- walkthrough: (\\w+) -->\\s*```sh\\n(.*?)```")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(readme, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// copyCheckout copies the files git tracks (the checkout a stranger has) from src to dst.
func copyCheckout(t *testing.T, src, dst string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = src
	list, err := cmd.Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): the walk-through copies the tracked files", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		from := filepath.Join(src, name)
		fi, err := os.Stat(from)
		if err != nil {
			continue // deleted in the working tree
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(from, filepath.Join(dst, name), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shell is one bash that the README's blocks are fed to, so what one block exports the next
// sees, and what it starts in the background keeps running; it and everything it started are
// killed at the end.
type shell struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	seq  int
	done chan struct{}
}

func startShell(t *testing.T, dir, root string) *shell {
	t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-e")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MESH_HOST_ROOT="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh := &shell{cmd: cmd, in: in, out: bufio.NewReader(pr), done: make(chan struct{})}
	go func() { cmd.Wait(); pw.Close(); close(sh.done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-sh.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		// The launcher and serve run in the group too; let them stop before the temp dirs go.
		for i := 0; i < 100 && syscall.Kill(-cmd.Process.Pid, 0) == nil; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	return sh
}

// run feeds script to the shell and returns what it printed until the script ended. The shell
// runs with -e: a failing command ends it, and run says so.
func (s *shell) run(ctx context.Context, script string) (string, error) {
	s.seq++
	marker := fmt.Sprintf("__walkthrough_done_%d__", s.seq)
	if _, err := fmt.Fprintf(s.in, "%s\necho %s\n", script, marker); err != nil {
		return "", fmt.Errorf("the shell is gone: %w", err)
	}
	var out bytes.Buffer
	lines := make(chan string)
	go func() {
		defer close(lines)
		for {
			line, err := s.out.ReadString('\n')
			if line != "" {
				lines <- line
			}
			if err != nil || strings.TrimSpace(line) == marker {
				return
			}
		}
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return out.String(), fmt.Errorf("a command failed and the shell stopped")
			}
			if strings.TrimSpace(line) == marker {
				return out.String(), nil
			}
			out.WriteString(line)
		case <-s.done:
			// What it started in the background may still hold the output open: the shell's
			// own end is what says a command failed.
			time.Sleep(100 * time.Millisecond)
			for {
				select {
				case line := <-lines:
					out.WriteString(line)
					continue
				default:
				}
				break
			}
			return out.String(), fmt.Errorf("a command failed and the shell stopped (%v)", s.cmd.ProcessState)
		case <-ctx.Done():
			return out.String(), ctx.Err()
		}
	}
}
