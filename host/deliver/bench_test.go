package deliver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
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
