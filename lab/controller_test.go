package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/rollout"
)

// controllerRun is one `mesh-release rollout …` process run to its end, and what it cost: its
// own CPU, from the kernel's accounting of the child (wait4's rusage), and its peak RSS.
type controllerRun struct {
	Code int
	Wall time.Duration
	CPU  time.Duration // user + system
	// PeakRSS is the process's VmHWM in kB, read every 50ms while it runs. Not wait4's
	// ru_maxrss: exec records the parent's high-water mark there (Go starts children with
	// CLONE_VM), so it would report this test process's size, not the controller's.
	PeakRSS int64
	Events  []rollout.Event
	Stderr  string
}

// Last returns the last event of kind, and whether there was one.
func (r controllerRun) Last(kind string) (rollout.Event, bool) {
	for i := len(r.Events) - 1; i >= 0; i-- {
		if r.Events[i].Kind == kind {
			return r.Events[i], true
		}
	}
	return rollout.Event{}, false
}

// runController runs bin with args (which should include --json) and waits for it to exit,
// killing it if it runs past limit (a controller that never ends fails the test rather than
// hanging it); env is added to its environment. Each event line is also passed to onEvent as
// it arrives, if given.
func runController(ctx context.Context, tb testing.TB, limit time.Duration, bin string, env []string, onEvent func(rollout.Event), args ...string) controllerRun {
	tb.Helper()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	var run controllerRun
	var hwm atomic.Int64
	watched := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watched)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if kb, err := MemoryKB(cmd.Process.Pid, "VmHWM"); err == nil && kb > hwm.Load() {
				hwm.Store(kb)
			}
			select {
			case <-stopWatch:
				return
			case <-t.C:
			}
		}
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev rollout.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			tb.Errorf("the controller wrote a line that is not an event: %q", sc.Text())
			continue
		}
		run.Events = append(run.Events, ev)
		if onEvent != nil {
			onEvent(ev)
		}
	}
	err = cmd.Wait()
	run.Wall = time.Since(began)
	close(stopWatch)
	<-watched
	run.PeakRSS = hwm.Load()
	run.Stderr = stderr.String()
	if ctx.Err() != nil {
		tb.Fatalf("the controller (%s) did not end within %s; killed. Its events:\n%s\n%s", strings.Join(args, " "), limit, eventLines(run), run.Stderr)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, run.Stderr)
	}
	ps := cmd.ProcessState
	run.Code = ps.ExitCode()
	run.CPU = ps.UserTime() + ps.SystemTime()
	return run
}

// profiledOverlay is a file added to mesh-release when a benchmark profiles the controller: with
// MESH_LAB_PROFILE=DIR it writes DIR/cpu-NNNN.pprof, one per second of CPU profile (the last,
// partial second is lost when the process exits), and DIR/heap.pprof each second; merge them
// with `go tool pprof -proto DIR/cpu-*.pprof > cpu.pprof`.
const profiledOverlay = `package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"
)

func init() {
	dir := os.Getenv("MESH_LAB_PROFILE")
	if dir == "" {
		return
	}
	go func() {
		for i := 0; ; i++ {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%04d.pprof", i)))
			if err != nil {
				return
			}
			pprof.StartCPUProfile(f)
			time.Sleep(time.Second)
			pprof.StopCPUProfile()
			f.Close()
			if h, err := os.Create(filepath.Join(dir, "heap.tmp")); err == nil {
				pprof.Lookup("heap").WriteTo(h, 0)
				h.Close()
				os.Rename(filepath.Join(dir, "heap.tmp"), filepath.Join(dir, "heap.pprof"))
			}
		}
	}()
}
`

// buildProfiled builds mesh-release with profiledOverlay added (go build -overlay), leaving the
// tree untouched.
func buildProfiled(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	src := filepath.Join(dir, "zz_lab_profile.go")
	if err := os.WriteFile(src, []byte(profiledOverlay), 0o644); err != nil {
		tb.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {
		filepath.Join(bins.Src, "release", "cmd", "mesh-release", "zz_lab_profile.go"): src,
	}})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		tb.Fatal(err)
	}
	out := filepath.Join(dir, "mesh-release-profiled")
	cmd := exec.Command("go", "build", "-overlay", ov, "-trimpath", "-ldflags", "-X main.version=v0.0.0-lab", "-o", out, PkgRelease)
	cmd.Dir = bins.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build the profiled controller: %v\n%s", err, b)
	}
	return out
}

// controllerBinary is mesh-release as the benchmarks run it: profiled when $MESH_BENCH_PPROF
// names a directory. profile(name) is the environment that makes one run write its profiles
// to that directory's subdirectory name (none when not profiling).
func controllerBinary(tb testing.TB) (bin string, profile func(name string) []string) {
	dir := os.Getenv("MESH_BENCH_PPROF")
	if dir == "" {
		return build(tb, PkgRelease, "v0.0.0-lab"), func(string) []string { return nil }
	}
	return buildProfiled(tb), func(name string) []string {
		sub := filepath.Join(dir, name)
		if err := os.MkdirAll(sub, 0o755); err != nil {
			tb.Fatal(err)
		}
		return []string{"MESH_LAB_PROFILE=" + sub}
	}
}
