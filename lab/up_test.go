package lab

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
