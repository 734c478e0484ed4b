package lab

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire/meshtest"
)

// `mesh-lab up` as a person runs it: from the source tree, it builds and starts a fleet and
// prints the commands to try; those commands work against it as printed (the fleet table shows
// every node on v1.0.0, the good release publishes, a node's status reads); SIGINT stops every
// node and the bus, and it exits 0 with no launcher left running.
func TestMeshLabUpLeavesAFleetToTryAndStopsCleanly(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 4*time.Minute)
	dir := filepath.Join(t.TempDir(), "fleet")
	cmd := exec.CommandContext(ctx, build(t, pkgLab, "v0.0.0-lab"), "up", "--nodes", "2", "--dir", dir)
	cmd.Dir = bins.Src
	cmd.Env = os.Environ()
	cmd.WaitDelay = 10 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })

	// Read what it prints until it says it is running; the commands are the lines after
	// "Try, in another shell", each indented.
	var printed []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "mesh-lab up: running until") {
		printed = append(printed, sc.Text())
	}
	rest := make(chan []string)
	go func() {
		var lines []string
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		rest <- lines
	}()
	text := strings.Join(printed, "\n")
	m := regexp.MustCompile(`export PATH=(\S+):\$PATH MESH_NATS_URL=(nats://127\.0\.0\.1:\d+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("mesh-lab up did not print the bus's URL; stdout:\n%s\nstderr:\n%s", text, stderr.String())
	}
	bin, url := m[1], m[2]
	// Each printed mesh-* command, run as printed (with the printed PATH and URL).
	run := func(prefix string) string {
		t.Helper()
		for _, line := range printed {
			if c := strings.TrimSpace(line); strings.HasPrefix(c, prefix) {
				f := strings.Fields(c)
				cmd := exec.CommandContext(ctx, filepath.Join(bin, f[0]), f[1:]...)
				cmd.Env = append(os.Environ(), "MESH_NATS_URL="+url)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", c, err, out)
				}
				return string(out)
			}
		}
		t.Fatalf("mesh-lab up did not print a %q command:\n%s", prefix, text)
		return ""
	}
	table := run("mesh-release fleet")
	for _, node := range []string{"node-1", "node-2"} {
		if !regexp.MustCompile(node + `\s+ok\s+v1\.0\.0`).MatchString(table) {
			t.Errorf("the fleet table does not show %s ok on v1.0.0:\n%s", node, table)
		}
	}
	run("mesh-release publish " + dir + "/releases/v1.1.0")
	if status := run("mesh-launcher status --root"); !strings.Contains(status, "launcher     running") {
		t.Errorf("a node's status does not show its launcher running:\n%s", status)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	after := <-rest
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mesh-lab up did not exit 0 on SIGINT: %v\nstdout after:\n%s\nstderr:\n%s", err, strings.Join(after, "\n"), stderr.String())
	}
	if got := strings.Join(after, "\n"); !strings.Contains(got, "mesh-lab up: stopped") {
		t.Errorf("it did not say it stopped:\n%s", got)
	}
	for _, node := range []string{"node-1", "node-2"} {
		out, _ := exec.CommandContext(ctx, filepath.Join(bin, "mesh-launcher"), "status", "--root", filepath.Join(dir, "nodes", node)).CombinedOutput()
		if !strings.Contains(string(out), "not running") {
			t.Errorf("%s's launcher still runs after mesh-lab up stopped:\n%s", node, out)
		}
	}
}

// `make up` (and `go run ./lab/cmd/mesh-lab up`) as a person starts it, then what started
// mesh-lab dies without passing a signal on: killed (SIGKILL), or `go run` terminated (it dies of
// SIGTERM and forwards nothing), or make terminated (it passes SIGTERM to its child). Each time
// mesh-lab stops its nodes and the bus, says so, and exits, and no launcher is left running.
func TestMeshLabUpStopsItsFleetWhenWhatStartedItDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet for each way")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	launcherBin := build(t, PkgLauncher, "v0.0.0-lab")
	src := filepath.Join(t.TempDir(), "checkout")
	copyCheckout(t, bins.Src, src) // `make up` writes bin/mesh-lab: into a copy, as a stranger's clone
	for _, tc := range []struct {
		name   string
		parent func(dir string) []string
		sig    syscall.Signal
	}{
		{"make up, make killed", func(dir string) []string { return []string{"make", "up", "UPFLAGS=--nodes 1 --dir " + dir} }, syscall.SIGKILL},
		{"make up, make terminated", func(dir string) []string { return []string{"make", "up", "UPFLAGS=--nodes 1 --dir " + dir} }, syscall.SIGTERM},
		{"go run, go terminated", func(dir string) []string {
			return []string{"go", "run", "-trimpath", "./lab/cmd/mesh-lab", "up", "--nodes", "1", "--dir", dir}
		}, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fleet")
			argv := tc.parent(dir)
			parent := exec.Command(argv[0], argv[1:]...)
			parent.Dir = src
			parent.Env = append(os.Environ(), "CGO_ENABLED=0")
			// Files, not pipes exec copies from: the parent's Wait must not wait for mesh-lab,
			// which inherits them, and what mesh-lab writes after must still be read. The pipe
			// ends (EOF) when its last writer, mesh-lab, exits.
			stdout, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdout.Close()
			stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			parent.Stdout, parent.Stderr = w, stderr
			// Its own group, so the signal reaches the parent alone, as `kill PID` sends it.
			parent.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			err = parent.Start()
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			errText := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			// Building and starting are not timed: only the stop after the parent's death is.
			var printed []string
			for line := range lines {
				printed = append(printed, line)
				if strings.HasPrefix(line, "mesh-lab up: running until") {
					break
				}
			}
			lab := childOf(parent.Process.Pid)
			if lab == 0 {
				parent.Process.Kill()
				parent.Wait()
				t.Fatalf("mesh-lab up did not start under %q; stdout:\n%s\nstderr:\n%s", argv, strings.Join(printed, "\n"), errText())
			}
			t.Cleanup(func() {
				// If it outlived its parent, stop it as a person would, so its launchers stop too.
				if syscall.Kill(lab, syscall.SIGINT) == nil {
					for i := 0; i < 600 && syscall.Kill(lab, 0) == nil; i++ {
						time.Sleep(50 * time.Millisecond)
					}
				}
			})
			if err := parent.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			parent.Wait()
			var after []string
			stopped := false
			timeout := time.After(2 * time.Minute) // a stop takes seconds: 15 s at most per launcher
		read:
			for {
				select {
				case line, ok := <-lines:
					if !ok {
						break read // mesh-lab, the last writer, has exited
					}
					after = append(after, line)
					stopped = stopped || line == "mesh-lab up: stopped"
				case <-timeout:
					t.Fatalf("mesh-lab up (pid %d) still runs 2 minutes after its parent %q died of %v; it printed:\n%s",
						lab, argv[0], tc.sig, strings.Join(after, "\n"))
				}
			}
			if !stopped {
				t.Errorf("mesh-lab up did not say it stopped its fleet; it printed:\n%s\nstderr:\n%s", strings.Join(after, "\n"), errText())
			}
			out, _ := exec.Command(launcherBin, "status", "--root", filepath.Join(dir, "nodes", "node-1")).CombinedOutput()
			if !regexp.MustCompile(`launcher\s+not running`).Match(out) {
				t.Errorf("node-1's launcher still runs after mesh-lab up stopped:\n%s", out)
			}
		})
	}
}

// childOf is the pid of pid's one child (mesh-lab under make or go run), or 0. A Go program (go
// run) forks from any of its threads: each thread's children are listed apart.
func childOf(pid int) int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var kids []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0
		}
		kids = append(kids, strings.Fields(string(b))...)
	}
	if len(kids) != 1 {
		return 0
	}
	n, err := strconv.Atoi(kids[0])
	if err != nil {
		return 0
	}
	return n
}
