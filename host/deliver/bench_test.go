package deliver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkDeliver20MB stages a 20 MB binary from an embedded bus — fetch while hashing,
// verify, strict extract, binary digest, preflight, fsyncs, record, rename — and, in the same
// run, puts the same archive through `sha256sum`, `zstd -d` and `tar -x` as processes. It
// reports both times per op and their ratio (deliver/cli; the goal is within 1.5).
//
//	go test -run '^$' -bench Deliver20MB -benchtime 20x ./host/deliver/
func BenchmarkDeliver20MB(b *testing.B) {
	h := newHarness(b, nil)
	bin := padded(fakehost(b, v1, "ok", runtime.GOARCH), 20<<20-len(fakehost(b, v1, "ok", runtime.GOARCH)))
	a := pack(b, bin)
	m := manifestFor(v1, a, bin)
	h.sign(&m)
	h.put(v1, m, a)

	cli := true
	for _, tool := range []string{"sha256sum", "zstd", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Logf("skipping the CLI comparison: %s is not installed (Debian: apt-get install zstd)", tool)
			cli = false
		}
	}
	arch := filepath.Join(b.TempDir(), m.Object)
	if err := os.WriteFile(arch, a, 0o644); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var tDeliver, tCLI time.Duration
	b.SetBytes(int64(len(bin)))
	b.ReportAllocs()
	for b.Loop() {
		os.RemoveAll(filepath.Join(rollback.VersionsDir(h.root), v1))
		start := time.Now()
		if err := h.d.Deliver(ctx, v1, nil); err != nil {
			b.Fatal(err)
		}
		tDeliver += time.Since(start)
		if !cli {
			continue
		}
		dir := b.TempDir()
		start = time.Now()
		if out, err := exec.Command("sha256sum", arch).CombinedOutput(); err != nil {
			b.Fatalf("sha256sum: %v %s", err, out)
		}
		zstd := exec.Command("zstd", "-d", "-c", "-q", arch)
		tar := exec.Command("tar", "-x", "-C", dir)
		pipe, err := zstd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		tar.Stdin = pipe
		if err := zstd.Start(); err != nil {
			b.Fatal(err)
		}
		if out, err := tar.CombinedOutput(); err != nil {
			b.Fatalf("tar: %v %s", err, out)
		}
		if err := zstd.Wait(); err != nil {
			b.Fatal(err)
		}
		tCLI += time.Since(start)
	}
	b.ReportMetric(float64(len(a)), "archive-bytes")
	b.ReportMetric(float64(tDeliver.Nanoseconds())/float64(b.N), "deliver-ns/op")
	if cli {
		b.ReportMetric(float64(tCLI.Nanoseconds())/float64(b.N), "cli-ns/op")
		b.ReportMetric(float64(tDeliver)/float64(tCLI), "deliver/cli")
	}
}

// BenchmarkFetchThrough200KBps is an upgrade of the real host through a link of 200 KB/s (a
// relay in front of the bus forwarding 200,000 bytes a second to the node): a node on the host
// built at HEAD~N of this repository (v1.0.0, staged from the bus beforehand) delivers HEAD
// (v1.0.1) — fetch, verify or rebuild, preflight, stage — once from the full archive and once
// from the delta against what it has (N = 1 and 10). It reports the seconds per delivery and the
// bytes it moved (the heartbeat's fetch.moved). Skipped without git history to build from.
//
//	go test -run '^$' -bench FetchThrough200KBps -benchtime 1x ./host/deliver/
func BenchmarkFetchThrough200KBps(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	n, err := meshtest.Commits(root)
	if err != nil {
		b.Skip(err)
	}
	for _, tc := range []struct {
		name  string
		step  int
		delta bool
	}{
		{"archive", 1, false},
		{"delta-commits=1", 1, true},
		{"delta-commits=10", 10, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			if n <= tc.step {
				b.Skipf("the history has %d commits, too short for a %d-commit step", n, tc.step)
			}
			old, err := meshtest.HostAt(root, fmt.Sprintf("HEAD~%d", tc.step), v1)
			if err != nil {
				b.Skipf("HEAD~%d does not build here: %v", tc.step, err)
			}
			next, err := meshtest.HostAt(root, "HEAD", v101)
			if err != nil {
				b.Skipf("HEAD does not build here: %v", err)
			}
			var moved int64
			for b.Loop() {
				b.StopTimer()
				h := newHarness(b, func(c *Config) { c.PreflightTimeout = 30 * time.Second })
				h.release(v1, old)
				if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
					b.Fatal(err)
				}
				if tc.delta {
					h.releaseWithDeltas(v101, next, []base{{v1, old}}, nil)
				} else {
					h.release(v101, next) // schema 1: nothing listed to rebuild from
				}
				r := startRelay(b, h.url, 200_000)
				h.deliverVia(r.URL())
				var last Progress
				b.StartTimer()
				if err := h.d.Deliver(context.Background(), v101, func(p Progress) { last = p }); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if tc.delta != (last.Delta != "") {
					b.Fatalf("staged %+v; want delta %v", last, tc.delta)
				}
				moved = last.Moved
				b.StartTimer()
			}
			b.ReportMetric(float64(moved), "bytes-moved")
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/delivery")
		})
	}
}
