package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// PkgAnyVersion is the real host taking its version from the launcher (benchmarks only).
const PkgAnyVersion = "./lab/fixtures/anyversion"

func benchNode(b *testing.B, interval string) *Node {
	b.Helper()
	n := &Node{
		Name: b.Name(), Root: b.TempDir(), Launcher: build(b, PkgLauncher, "v0.0.0-lab"),
		Env: []string{"MESH_HOST_RECONCILE_INTERVAL=" + interval, "MESH_HOST_NODE=bench"},
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if n.PID() != 0 {
			n.Stop(ctx)
		}
	})
	return n
}

func waitRunning(b *testing.B, n *Node, version string) launcher.Report {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := n.WaitStatus(ctx, version+" running", func(rep launcher.Report) bool { return Running(rep) == version })
	if err != nil {
		b.Fatalf("%v\n%s", err, n.Log())
	}
	return rep
}

func reportQuantiles(b *testing.B, ds []time.Duration, unit string) {
	b.ReportMetric(quantile(ds, 0.5), "median-"+unit)
	b.ReportMetric(quantile(ds, 0.99), "p99-"+unit)
	b.ReportMetric(0, "ns/op") // wall time per op includes waiting for a reconcile; not the figure
}

// BenchmarkStandAsideGap measures, per stand-aside, the time from the old host's exit to the
// new host's process start, as the launcher records them (exit seen by wait(2) → exec done),
// and beside it the floor that gap cannot go under: fork+exec+exit of the same binary
// (`--version`), measured in the same run so a loaded machine moves both alike.
func BenchmarkStandAsideGap(b *testing.B) {
	bin := build(b, PkgAnyVersion, "any")
	n := benchNode(b, "20ms")
	if err := n.PlaceVersion("v1.0.0", bin); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	waitRunning(b, n, "v1.0.0")
	var gaps, floors []time.Duration
	prev := "v1.0.0"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := fmt.Sprintf("v1.%d.0", i+1)
		if err := n.PlaceVersion(v, bin); err != nil {
			b.Fatal(err)
		}
		waitRunning(b, n, v)
		old, cur := starts(b, n.Root, prev), starts(b, n.Root, v)
		gaps = append(gaps, cur[0].StartedAt.Sub(old[len(old)-1].EndedAt))
		prev = v
		floors = append(floors, execFloor(b, rollback.BinaryPath(n.Root, v)))
	}
	b.StopTimer()
	b.ReportMetric(quantile(gaps, 0.5), "gap-median-ms")
	b.ReportMetric(quantile(gaps, 0.99), "gap-p99-ms")
	b.ReportMetric(quantile(floors, 0.5), "exec-floor-median-ms")
	b.ReportMetric(0, "ns/op") // wall time per op includes waiting for a reconcile; not the figure
}

// execFloor is how long fork+exec+exit of bin takes (it prints its version and exits).
func execFloor(b *testing.B, bin string) time.Duration {
	b.Helper()
	t := time.Now()
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		b.Fatalf("%s --version: %v\n%s", bin, err, out)
	}
	return time.Since(t)
}

// quantile is the p-quantile of ds in milliseconds (ds is sorted in place).
func quantile(ds []time.Duration, p float64) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000
}

// BenchmarkCrashOnStartToPredecessor measures the time from a version that crashes at start
// appearing on disk to the node running its predecessor again (3 failures, backoff 500ms then
// 1s, a rollback), with a reconcile interval of 20ms so noticing the version costs little.
func BenchmarkCrashOnStartToPredecessor(b *testing.B) {
	good := build(b, PkgAnyVersion, "any")
	bad := build(b, PkgExit1, "any")
	n := benchNode(b, "20ms")
	if err := n.PlaceVersion("v1.0.0", good); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	waitRunning(b, n, "v1.0.0")
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v := fmt.Sprintf("v2.%d.0", i)
		before := len(starts(b, n.Root, "v1.0.0"))
		placed := time.Now()
		if err := n.PlaceVersion(v, bad); err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_, err := n.WaitStatus(ctx, "rolled back", func(rep launcher.Report) bool {
			return len(rep.Rollbacks) > 0 && rep.Rollbacks[0].From == v && Running(rep) == "v1.0.0"
		})
		cancel()
		if err != nil {
			b.Fatalf("%v\n%s", err, n.Log())
		}
		s := starts(b, n.Root, "v1.0.0")
		took = append(took, s[before].StartedAt.Sub(placed))
	}
	b.StopTimer()
	reportQuantiles(b, took, "to-predecessor-ms")
}

// BenchmarkLauncherFootprint reports the launcher's stripped static binary size, its peak RSS
// while supervising a host (VmHWM), and its line count (launcher/ and the rollback/ it links).
func BenchmarkLauncherFootprint(b *testing.B) {
	lb := build(b, PkgLauncher, "v0.0.0-lab")
	fi, err := os.Stat(lb)
	if err != nil {
		b.Fatal(err)
	}
	n := benchNode(b, "50ms")
	if err := n.PlaceVersion("v1.0.0", build(b, PkgAnyVersion, "any")); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	waitRunning(b, n, "v1.0.0")
	for i := 0; i < b.N; i++ {
		// Let it supervise through two more of the host's reconciles, as its store records them.
		before := meshtest.ReadReconciles(b, n.Root).Count("timer")
		meshtest.Eventually(b, "two more reconciles", func() bool {
			return meshtest.ReadReconciles(b, n.Root).Count("timer") >= before+2
		})
	}
	rss, err := MemoryKB(n.PID(), "VmHWM")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size()), "binary-bytes")
	b.ReportMetric(float64(rss), "peak-rss-kB")
	b.ReportMetric(float64(goLines(b, "../launcher")), "launcher-lines")
	b.ReportMetric(float64(goLines(b, "../rollback")), "rollback-lines")
	b.ReportMetric(0, "ns/op")
	if out, err := exec.Command("go", "version", "-m", lb).Output(); err == nil && strings.Contains(string(out), "nats") {
		b.Fatalf("the launcher links network code:\n%s", out)
	}
	n.Signal(syscall.SIGTERM)
}

// goLines counts the lines of the non-test Go files under dir.
func goLines(b *testing.B, dir string) int {
	total := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		total += strings.Count(string(data), "\n")
		return nil
	})
	return total
}

// BenchmarkLauncherTakeover measures a launcher taking a new launcher by exec while its host
// runs: the time nobody watches the host (the old image's exec to the host adopted by the new
// one, CLOCK_BOOTTIME across the exec), and the host's downtime, which must be 0 — the same
// host pid after every takeover, never restarted. Each op replaces the floor, as the package
// does (two builds alternated: every copy is a new file).
func BenchmarkLauncherTakeover(b *testing.B) {
	n := benchNode(b, "200ms")
	floor := filepath.Join(b.TempDir(), "mesh-launcher")
	builds := []string{launcherAt(b, "v9.0.0"), launcherAt(b, "v9.0.1")}
	if err := copyFile(n.Launcher, floor, 0o755); err != nil {
		b.Fatal(err)
	}
	n.Launcher = floor
	if err := n.PlaceVersion("v1.0.0", build(b, PkgHost, "v1.0.0")); err != nil {
		b.Fatal(err)
	}
	if err := n.Start("--launcher-check", "20ms"); err != nil {
		b.Fatal(err)
	}
	hostPID := waitRunning(b, n, "v1.0.0").Running.PID
	var unwatched []time.Duration
	restarts := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		before := strings.Count(n.Log(), "took over as launcher")
		next := floor + ".new"
		if err := copyFile(builds[i%2], next, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Rename(next, floor); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for strings.Count(n.Log(), "took over as launcher") == before {
			if time.Now().After(deadline) {
				b.Fatalf("no takeover within 30s:\n%s", n.Log())
			}
			time.Sleep(5 * time.Millisecond)
		}
		if syscall.Kill(hostPID, 0) != nil || parentOf(hostPID) != n.PID() {
			restarts++
		}
	}
	b.StopTimer()
	for _, line := range strings.Split(n.Log(), "\n") {
		if _, v, ok := strings.Cut(line, " unwatched="); ok && strings.Contains(line, "took over as launcher") {
			if d, err := time.ParseDuration(strings.Fields(v)[0]); err == nil {
				unwatched = append(unwatched, d)
			}
		}
	}
	if len(unwatched) < b.N {
		b.Fatalf("%d takeovers logged their unwatched time, want %d", len(unwatched), b.N)
	}
	b.ReportMetric(quantile(unwatched, 0.5), "unwatched-median-ms")
	b.ReportMetric(quantile(unwatched, 0.99), "unwatched-p99-ms")
	b.ReportMetric(float64(restarts), "host-restarts")
	b.ReportMetric(0, "ns/op")
}
