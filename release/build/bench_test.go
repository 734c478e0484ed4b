package build

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire/archive"
)

// BenchmarkHostArchive builds the real host (./host/cmd/mesh-host, stripped, as releases are
// built) twice from clean output paths, packs each, and reports the binary's and the archive's
// size. Two builds giving two archive digests fail it: reproducibility is a property, not a
// figure. Building and packing are timed per op.
//
//	go test -run '^$' -bench HostArchive -benchtime 2x ./release/build/
func BenchmarkHostArchive(b *testing.B) {
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "host", "cmd", "mesh-host")); err != nil {
		b.Skipf("no host to build yet: %v", err)
	}
	var first digest.Digest
	var binSize, archSize int
	for b.Loop() {
		out := filepath.Join(b.TempDir(), "mesh-host")
		if err := GoBuild(context.Background(), GoBuildOptions{Dir: root, Version: "v1.2.3", Out: out}); err != nil {
			b.Skipf("the host does not build right now (work in flight?): %v", err)
		}
		bin, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		var a bytes.Buffer
		if err := archive.Pack(&a, bytes.NewReader(bin), int64(len(bin))); err != nil {
			b.Fatal(err)
		}
		d := digest.FromBytes(a.Bytes())
		if first == "" {
			first = d
		} else if d != first {
			b.Fatalf("two builds of the same tree gave two archives: %s and %s", first, d)
		}
		binSize, archSize = len(bin), a.Len()
	}
	b.ReportMetric(float64(binSize), "binary-bytes")
	b.ReportMetric(float64(archSize), "archive-bytes")
	b.ReportMetric(1, "reproducible")
}
