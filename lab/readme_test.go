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
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The README's walk-through, run as a stranger would: every one of its shell blocks, in order,
// from a copy of this checkout, with the real binaries `make build` makes, a real `mesh-release
// serve`, and a node on a temporary root. Only what cannot run here is changed, and only as the
// README's own list (<!-- walkthrough: substitutions -->) says: paths, the bus's address,
// `systemctl`, and MESH_HOST_ROOT. The test holds its table to that: every entry is one of those
// kinds, the README lists exactly the table's entries, and every entry is used.
//
// Between blocks the test waits as a person would look: for the node to heartbeat, for the
// release to run, for the rollback. The blocks build binaries (make build, mesh-release build), so
// they run under no deadline but the test binary's; each wait between them has its own.
func TestREADMEOperatingSectionWorksAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole README walk-through")
	}
	ctx := t.Context()
	readme, err := os.ReadFile(filepath.Join(bins.Src, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	operating, err := os.ReadFile(filepath.Join(bins.Src, "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := walkthroughBlocks(t, string(readme))
	var names []string
	for name := range blocks {
		names = append(names, name)
	}
	if !slices.Equal(sorted(names), sorted(walkthroughOrder)) {
		t.Fatalf("the README's walk-through blocks are %q; this test runs %q: run each one (or mark it <!-- example -->)", sorted(names), walkthroughOrder)
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
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	launcherBin := filepath.Join(usrBin, "mesh-launcher")
	subst := []walkSubst{
		{substPath, "/var/lib/mesh-host", root},
		{substPath, "/var/lib/mesh-release", data},
		{substPath, "/srv/app", filepath.Join(work, "srv-app")},
		{substPath, "/usr/bin/mesh-launcher", launcherBin},
		{substPath, "/etc/systemd/system/mesh-launcher.service", filepath.Join(units, "mesh-launcher.service")},
		{substAddress, "bus.example:4222", addr},
		{substAddress, "0.0.0.0:4222", addr},
		// What systemd would start: the unit's own ExecStart, its path replaced as above.
		{substSystemctl, "systemctl enable --now mesh-launcher", unitExecStart(t, filepath.Join(bins.Src, "dist", "mesh-launcher.service"), launcherBin) + " &"},
	}
	for _, s := range subst {
		if why := s.outOfBounds(work); why != "" {
			t.Fatalf("substitution %q → %q: %s; the README runs as written, but for paths, the address and systemctl", s.old, s.new, why)
		}
	}
	listed := readmeSubstitutions(t, string(readme))
	want := []string{envRoot}
	for _, s := range subst {
		want = append(want, s.old)
	}
	if !slices.Equal(sorted(listed), sorted(want)) {
		t.Fatalf("the README lists the substitutions %q; the test makes %q: say each one in the README, and no other", listed, want)
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
	waitFor(t, waitCtx(t, ctx), "serve to answer the admin over TLS", func() bool {
		var err error
		c, err = bus.Connect(ctx, busURL, filepath.Join(data, "trust", "admin.creds"), bus.WithCA(filepath.Join(data, "tls", "ca.pem")))
		return err == nil
	})
	defer c.Close()
	if out := run("node", blocks["node"]); !strings.Contains(out, launcher.Version) {
		t.Errorf("mesh-launcher version did not print the launcher's own version %s, as the README says:\n%s", launcher.Version, out)
	}
	heard := func(what string, ok func(wire.Heartbeat) bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, waitLimit)
		defer cancel()
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
	out = run("release (fleet)", release[cut:])
	if !regexp.MustCompile(`web-01\s+ok\s+v1\.1\.0`).MatchString(out) {
		t.Errorf("fleet does not show web-01 ok on v1.1.0:\n%s", out)
	}
	// As the README says where the reader meets it: the launcher's own version, the floor.
	if floor := launcher.Version + " (floor)"; !strings.Contains(out, floor) {
		t.Errorf("fleet does not show web-01's launcher as %q, as the README says:\n%s", floor, out)
	}

	// The apply block: a blob put from a file the block makes, and the node's own commands; plan
	// exits 0, the declaration being applied already.
	out = run("apply", blocks["apply"])
	if !regexp.MustCompile(`sha256:[0-9a-f]{64}\s+\d+\s+app-static\.tar`).MatchString(out) {
		t.Errorf("blob put did not print the blob's digest, size and name:\n%s", out)
	}

	rb := blocks["rollback"]
	cut = strings.Index(rb, "mesh-launcher status")
	run("rollback", rb[:cut])
	waitFor(t, waitCtx(t, ctx), "the rollback from v1.2.0", func() bool {
		rep, err := launcher.ReadStatus(ctx, root, rollback.DefaultPolicy)
		if err != nil {
			return false
		}
		if rep.KnownGood == "v1.2.0" {
			// Said at once rather than after the timeout: the release the README calls bad is not.
			t.Fatalf("web-01 confirmed v1.2.0: the README's bad release is a good one")
		}
		return len(rep.Rollbacks) > 0 && rep.Rollbacks[0].From == "v1.2.0" && rep.Running != nil && rep.Running.Version == "v1.1.0"
	})
	heard("reporting the rollback", func(hb wire.Heartbeat) bool { return len(hb.Rollbacks) > 0 && hb.Running == "v1.1.0" })
	fleetCut := strings.Index(rb, "mesh-release fleet")
	out = run("rollback (status)", rb[cut:fleetCut])
	if sample, ok := readmeSamples(string(operating))["launcher-status"]; !ok {
		t.Error("docs/operating.md has no <!-- sample: launcher-status --> block")
	} else if diff := sampleShape(sample, out); diff != "" {
		t.Errorf("docs/operating.md's sample of mesh-launcher status is not what it prints today: %s\nthe real output:\n%s", diff, out)
	}
	out += run("rollback (fleet)", rb[fleetCut:])
	for _, want := range []string{"BAD", "last rollback: v1.2.0 -> v1.1.0", `"from": "v1.2.0"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the README's last commands do not show %q:\n%s", want, out)
		}
	}

	// The rollout block: one node, so the canary is the whole fleet; it completes, sets the fleet
	// key, and the node runs v1.3.0 confirmed.
	out = run("rollout", blocks["rollout"])
	for _, want := range []string{"plan of v1.3.0: 1 node in 1 batch", "batch 1/1 (canary): targets set for 1 node: web-01", "completed: v1.3.0 is the fleet target", "completed"} {
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
	if out := run("withdraw (fleet)", wd[cut:]); !strings.Contains(out, "v1.3.0") || !strings.Contains(out, "withdrawn") ||
		!strings.Contains(out, "stepped down from v1.3.0") {
		t.Errorf("fleet does not show v1.3.0 withdrawn and web-01 stepped down from it:\n%s", out)
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

	// The window block: windows set for the fleet and for web-01, an urgent target that does not
	// wait for them, and both windows cleared, so none is left in force.
	out = run("window", blocks["window"])
	if !strings.Contains(out, "sat,sun 03:00-05:00 UTC") {
		t.Errorf("window show does not show web-01's own window:\n%s", out)
	}
	heard("running and confirmed on v1.3.1, the urgent target", func(hb wire.Heartbeat) bool { return hb.Running == "v1.3.1" && hb.KnownGood == "v1.3.1" })
	if out := run("(the test's own) window show", "mesh-release window show\n"); !strings.Contains(out, "no maintenance window is set") {
		t.Errorf("the walk-through left a window in force:\n%s", out)
	}

	for i, s := range subst {
		if !used[i] {
			t.Errorf("the README no longer says %q: update this test's replacements with it", s.old)
		}
	}
}

// walkthroughOrder are the README's walk-through blocks, in the order the test runs them.
var walkthroughOrder = []string{"bus", "node", "release", "apply", "rollback", "rollout", "withdraw", "window"}

// waitLimit bounds each wait between the walk's blocks: for a node to fetch, stand aside and
// confirm, or to roll back, which take seconds.
const waitLimit = 3 * time.Minute

// waitCtx is ctx bounded by waitLimit, for one wait.
func waitCtx(t *testing.T, ctx context.Context) context.Context {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// The kinds of change the README test may make to the walk-through; nothing else is changed.
const (
	substPath      = "path"      // a system path → one under the test's temporary directory
	substAddress   = "address"   // the bus's address → a free loopback port
	substSystemctl = "systemctl" // there is no systemd here: what the unit would start
)

// envRoot is the one variable the test sets for the walk: the temporary root, for the commands
// that take the default root (/var/lib/mesh-host) without --root.
const envRoot = "MESH_HOST_ROOT"

type walkSubst struct{ kind, old, new string }

var (
	addressRE  = regexp.MustCompile(`^[a-z0-9.-]+:[0-9]+$`)
	loopbackRE = regexp.MustCompile(`^127\.0\.0\.1:[0-9]+$`)
)

// outOfBounds says why s is not a change of its kind, or "".
func (s walkSubst) outOfBounds(work string) string {
	switch s.kind {
	case substPath:
		if !strings.HasPrefix(s.old, "/") || !strings.HasPrefix(s.new, work+string(filepath.Separator)) {
			return "a path substitution replaces an absolute path with one under the test's directory"
		}
	case substAddress:
		if !addressRE.MatchString(s.old) || !loopbackRE.MatchString(s.new) {
			return "an address substitution replaces host:port with a loopback address"
		}
	case substSystemctl:
		if !strings.HasPrefix(s.old, "systemctl ") {
			return "a systemctl substitution replaces a systemctl command"
		}
	default:
		return "not a path, an address or systemctl"
	}
	return ""
}

// unitExecStart is the unit's ExecStart with its launcher path replaced by launcher.
func unitExecStart(t *testing.T, unit, launcher string) string {
	t.Helper()
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cmd, ok := strings.CutPrefix(line, "ExecStart="); ok {
			if !strings.HasPrefix(cmd, "/usr/bin/mesh-launcher ") {
				t.Fatalf("the unit's ExecStart %q does not start /usr/bin/mesh-launcher", cmd)
			}
			return launcher + strings.TrimPrefix(cmd, "/usr/bin/mesh-launcher")
		}
	}
	t.Fatalf("%s has no ExecStart", unit)
	return ""
}

// readmeSubstitutions are what the README's substitution list names: the first `code` of each
// "- " item of the list after <!-- walkthrough: substitutions -->.
func readmeSubstitutions(t *testing.T, readme string) []string {
	t.Helper()
	_, list, ok := strings.Cut(readme, "<!-- walkthrough: substitutions -->")
	if !ok {
		t.Fatal("the README has no <!-- walkthrough: substitutions --> list")
	}
	list = strings.TrimLeft(list, "\n")
	if end := strings.Index(list, "\n\n"); end >= 0 {
		list = list[:end]
	}
	first := regexp.MustCompile("^- `([^`]+)`")
	var out []string
	for _, line := range strings.Split(list, "\n") {
		if m := first.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// readmeSamples returns the README's sample outputs, the plain blocks marked
// <!-- sample: NAME -->.
func readmeSamples(readme string) map[string]string {
	re := regexp.MustCompile("(?s)<!-- sample: ([\\w-]+) -->\\s*```\\n(.*?)```")
	out := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(readme, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// cellsRE splits a line of tabwriter output (cells padded with two spaces or more), after the
// README's "← …" notes are cut off.
var cellsRE = regexp.MustCompile(`\s{2,}`)

func cells(line string) []string {
	line, _, _ = strings.Cut(line, "←")
	return cellsRE.Split(strings.TrimSpace(line), -1)
}

// sampleShape compares a sample of `mesh-launcher status` with real output by its shape, which
// does not depend on the machine: the labels of the summary lines in order, the version table's
// header, each sample row having the header's number of cells, and the lines that start a
// section ("last rollback:"). It returns what differs, or "".
func sampleShape(sample, real string) string {
	type shape struct {
		labels  []string
		header  string
		rows    [][]string
		section []string
		// the launcher versions' table, after the host's (issue 19)
		launcherHeader []string
		launcherRows   [][]string
	}
	read := func(text string) shape {
		var sh shape
		inTable, inLaunchers := false, false
		for _, line := range strings.Split(text, "\n") {
			switch {
			case strings.TrimSpace(line) == "":
				inTable, inLaunchers = false, false
			case strings.HasPrefix(line, "VERSION "):
				sh.header, inTable = strings.Join(cells(line), " "), true
			case strings.HasPrefix(line, "LAUNCHER VERSION "):
				sh.launcherHeader, inLaunchers = cells(line), true
			case strings.HasPrefix(line, " "):
			case inLaunchers:
				sh.launcherRows = append(sh.launcherRows, cells(line))
			case inTable:
				sh.rows = append(sh.rows, cells(line))
			case strings.HasPrefix(line, "last rollback:"):
				sh.section = append(sh.section, "last rollback:")
			case sh.header == "":
				sh.labels = append(sh.labels, cells(line)[0])
			}
		}
		return sh
	}
	// The walk's shell also carries the output of what runs in its background (serve, the
	// launcher and its host): keep the status from its first line on, without their log lines.
	if i := strings.LastIndex(real, "\nroot "); i >= 0 {
		real = real[i+1:]
	}
	var own []string
	for _, line := range strings.Split(real, "\n") {
		if !strings.HasPrefix(line, "time=") {
			own = append(own, line)
		}
	}
	s, r := read(sample), read(strings.Join(own, "\n"))
	switch {
	case !slices.Equal(s.labels, r.labels):
		return fmt.Sprintf("its summary lines are %q, the real ones %q", s.labels, r.labels)
	case s.header != r.header:
		return fmt.Sprintf("its table header is %q, the real one %q", s.header, r.header)
	case !slices.Equal(s.section, r.section):
		return fmt.Sprintf("its sections are %q, the real ones %q", s.section, r.section)
	case !slices.Equal(s.launcherHeader, r.launcherHeader):
		return fmt.Sprintf("its launcher table's header is %q, the real one %q", s.launcherHeader, r.launcherHeader)
	}
	for _, row := range s.launcherRows {
		if len(row) != len(s.launcherHeader) {
			return fmt.Sprintf("its launcher row %q has %d cells, the header %d", row, len(row), len(s.launcherHeader))
		}
	}
	for _, row := range s.rows {
		if len(row) != len(strings.Fields(s.header)) {
			return fmt.Sprintf("its row %q has %d cells, the header %d", row, len(row), len(strings.Fields(s.header)))
		}
	}
	return ""
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
		meshtest.SkipUnlessCI(t, "not a git checkout (%v): the walk-through copies the tracked files", err)
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

func waitFor(t testing.TB, ctx context.Context, what string, ok func() bool) {
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
	// The walk's environment is the test's, without any MESH_ variable a developer has set (the
	// README's blocks export what they use), and with the README's one named addition.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESH_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, envRoot+"="+root)
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

// The README test may change a path, the bus's address or systemctl, and nothing else: a
// substitution of a command's flags or arguments (as `--binary` once was) is refused.
func TestWalkthroughSubstitutesOnlyPathsTheAddressAndSystemctl(t *testing.T) {
	work := "/tmp/walk"
	for _, tc := range []struct {
		s  walkSubst
		ok bool
	}{
		{walkSubst{substPath, "/var/lib/mesh-host", "/tmp/walk/root"}, true},
		{walkSubst{substPath, "/var/lib/mesh-host", "/elsewhere/root"}, false},
		{walkSubst{substPath, "--soak 2m", "/tmp/walk/x"}, false},
		{walkSubst{substAddress, "bus.example:4222", "127.0.0.1:4711"}, true},
		{walkSubst{substAddress, "bus.example:4222", "10.0.0.1:4222"}, false},
		{walkSubst{substSystemctl, "systemctl enable --now mesh-launcher", "/tmp/walk/usr-bin/mesh-launcher run &"}, true},
		{walkSubst{substSystemctl, "mesh-release build --version v1.2.0", "mesh-release build --version v1.2.0 --binary x"}, false},
		{walkSubst{"flag", "--soak 2m", "--soak 3s"}, false},
	} {
		if why := tc.s.outOfBounds(work); (why == "") != tc.ok {
			t.Errorf("%+v: allowed %v (%q), want %v", tc.s, why == "", why, tc.ok)
		}
	}
}

func TestREADMESubstitutionListIsReadFromItsMarker(t *testing.T) {
	readme := "x\n<!-- walkthrough: substitutions -->\n- `/a` → b, with `c`\n- `MESH_HOST_ROOT` → d\n\n- `/not/in/the/list` → e\n"
	if got, want := readmeSubstitutions(t, readme), []string{"/a", "MESH_HOST_ROOT"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A sample of `mesh-launcher status` matches real output by its labels, its table's header and
// the cells of each row, not by what differs between machines.
func TestLauncherStatusSampleShapeIsComparedWithTheRealOutput(t *testing.T) {
	real := "root         /r\nstate        healthy\n\nVERSION  DIGEST  PROVENANCE\nv1.0.0   sha256:1…  installed by hand\n\nlast rollback: v1 -> v0\n" +
		"\nLAUNCHER VERSION  DIGEST  STATE  PROVENANCE\nv1.0.0            -       floor  the package's\n"
	launchers := "\nLAUNCHER VERSION  DIGEST  STATE  PROVENANCE\nv1.1.0  sha256:3…  running, trial  delivered with v1.2.0\nv1.0.0  -  floor  the package's: /usr/bin/mesh-launcher\n"
	for _, tc := range []struct {
		name, sample string
		ok           bool
	}{
		{"the same shape, another machine", "root         /var/lib/mesh-host   ← a note\nstate        degraded: x\n\nVERSION  DIGEST  PROVENANCE\nv1.1.0   sha256:2…  delivered, signed by key k\n\nlast rollback: v2 -> v1 at T\n" + launchers, true},
		{"no launcher table", "root  /r\nstate  healthy\n\nVERSION  DIGEST  PROVENANCE\nv1.0.0   sha256:1…  x\n\nlast rollback: v1 -> v0\n", false},
		{"a launcher row without a cell", "root  /r\nstate  healthy\n\nVERSION  DIGEST  PROVENANCE\nv1.0.0   sha256:1…  x\n\nlast rollback: v1 -> v0\n" +
			"\nLAUNCHER VERSION  DIGEST  STATE  PROVENANCE\nv1.0.0  -  floor\n", false},
		{"a column missing", "root  /r\nstate  healthy\n\nVERSION  DIGEST\nv1.0.0   sha256:1…\n\nlast rollback: v1 -> v0\n", false},
		{"a row without the new column", "root  /r\nstate  healthy\n\nVERSION  DIGEST  PROVENANCE\nv1.0.0   sha256:1…\n\nlast rollback: v1 -> v0\n", false},
		{"a summary line missing", "root  /r\n\nVERSION  DIGEST  PROVENANCE\nv1.0.0   sha256:1…  x\n\nlast rollback: v1 -> v0\n", false},
		{"no rollback section", "root  /r\nstate  healthy\n\nVERSION  DIGEST  PROVENANCE\nv1.0.0   sha256:1…  x\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := sampleShape(tc.sample, "time=T level=INFO msg=x\n"+real); (diff == "") != tc.ok {
				t.Errorf("matched %v (%s), want %v", diff == "", diff, tc.ok)
			}
		})
	}
}

// Every shell block a user reads (the README and docs/) runs as written in a test — the README's
// walk-through, docs/cluster.md's cluster — or is marked <!-- example --> (optionally saying why),
// so a reader knows which blocks are only examples; and a block marked for a test is one that test
// runs.
func TestEveryShellBlockInTheDocsRunsOrIsMarkedAnExample(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(bins.Src, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(bins.Src, "README.md"))
	run := map[string][]string{
		"walkthrough": walkthroughOrder,
		"cluster":     {"servers", "use", "enrol", "revoke"},
	}
	for _, f := range files {
		rel, _ := filepath.Rel(bins.Src, f)
		t.Run(rel, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, problem := range unmarkedShellBlocks(string(b), run) {
				t.Errorf("%s: %s", rel, problem)
			}
		})
	}
}

// shellBlockRE is a shell block's first line and the line before the block (a marker, or
// anything else).
var shellBlockRE = regexp.MustCompile("(?m)^(.*)\\n```sh\\n(.*)$")

// markerRE is a block's marker: <!-- KIND: NAME --> for a block a test runs, <!-- example --> or
// <!-- example: why --> for one no test runs.
var markerRE = regexp.MustCompile(`^<!-- (?:(walkthrough|cluster): (\w+)|example(?:: [^>]*)?) -->$`)

// unmarkedShellBlocks says what is wrong with the shell blocks of a Markdown text: a block without
// a marker, or marked for a test that does not run a block of that name (run: the names each
// kind's test runs).
func unmarkedShellBlocks(text string, run map[string][]string) []string {
	var out []string
	for _, m := range shellBlockRE.FindAllStringSubmatch(text, -1) {
		mk := markerRE.FindStringSubmatch(strings.TrimSpace(m[1]))
		switch {
		case mk == nil:
			out = append(out, fmt.Sprintf("the shell block that starts %q is neither run by a test (<!-- walkthrough: NAME -->, <!-- cluster: NAME --> on the line before it) nor marked <!-- example -->", m[2]))
		case mk[1] != "" && !slices.Contains(run[mk[1]], mk[2]):
			out = append(out, fmt.Sprintf("the shell block that starts %q is marked %s: %s, which its test does not run (it runs %q)", m[2], mk[1], mk[2], run[mk[1]]))
		}
	}
	return out
}

func TestUnmarkedShellBlocksAreFound(t *testing.T) {
	run := map[string][]string{"walkthrough": {"bus"}}
	for _, tc := range []struct {
		name, text string
		problems   int
	}{
		{"a walk-through block the test runs", "x\n<!-- walkthrough: bus -->\n```sh\nls\n```\n", 0},
		{"an example", "<!-- example -->\n```sh\nls\n```\n", 0},
		{"an example saying why", "<!-- example: runs for ever -->\n```sh\nls\n```\n", 0},
		{"a plain block of output is no shell block", "text\n```\nHALTED\n```\n", 0},
		{"no marker", "Run this:\n```sh\nls\n```\n", 1},
		{"a marker a line too early", "<!-- example -->\n\n```sh\nls\n```\n", 1},
		{"a walk-through block the test does not run", "<!-- walkthrough: window -->\n```sh\nls\n```\n", 1},
		{"a kind no test runs", "<!-- cluster: servers -->\n```sh\nls\n```\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := unmarkedShellBlocks(tc.text, run); len(got) != tc.problems {
				t.Errorf("problems %q, want %d", got, tc.problems)
			}
		})
	}
}
