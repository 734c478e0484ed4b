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
// built) and the real launcher (./launcher/cmd/mesh-launcher, unstamped, as a release carries
// it) twice from clean output paths, packs each alone and together, and reports the binaries'
// and the archives' sizes, and launcher-extra-bytes: what a release gains by carrying the
// launcher (the archive with it less the archive without). Two builds giving two archive
// digests fail it: reproducibility is a property, not a figure. Building and packing are timed
// per op.
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
	var first, firstWith digest.Digest
	var binSize, archSize, launcherSize, withSize int
	for b.Loop() {
		dir := b.TempDir()
		out, lout := filepath.Join(dir, "mesh-host"), filepath.Join(dir, "mesh-launcher")
		if err := GoBuild(context.Background(), GoBuildOptions{Dir: root, Version: "v1.2.3", Out: out}); err != nil {
			b.Skipf("the host does not build right now (work in flight?): %v", err)
		}
		if err := GoBuild(context.Background(), GoBuildOptions{Dir: root, Package: LauncherPackage, Out: lout}); err != nil {
			b.Skipf("the launcher does not build right now (work in flight?): %v", err)
		}
		bin, err := os.ReadFile(out)
		if err != nil {
			b.Fatal(err)
		}
		lbin, err := os.ReadFile(lout)
		if err != nil {
			b.Fatal(err)
		}
		var a, with bytes.Buffer
		if err := archive.Pack(&a, bytes.NewReader(bin), int64(len(bin))); err != nil {
			b.Fatal(err)
		}
		if err := archive.PackWithLauncher(&with, bytes.NewReader(bin), int64(len(bin)), bytes.NewReader(lbin), int64(len(lbin))); err != nil {
			b.Fatal(err)
		}
		d, dw := digest.FromBytes(a.Bytes()), digest.FromBytes(with.Bytes())
		if first == "" {
			first, firstWith = d, dw
		} else if d != first || dw != firstWith {
			b.Fatalf("two builds of the same tree gave two archives: %s and %s (with the launcher: %s and %s)", first, d, firstWith, dw)
		}
		binSize, archSize, launcherSize, withSize = len(bin), a.Len(), len(lbin), with.Len()
	}
	b.ReportMetric(float64(binSize), "binary-bytes")
	b.ReportMetric(float64(archSize), "archive-bytes")
	b.ReportMetric(float64(launcherSize), "launcher-binary-bytes")
	b.ReportMetric(float64(withSize), "archive-with-launcher-bytes")
	b.ReportMetric(float64(withSize-archSize), "launcher-extra-bytes")
	b.ReportMetric(1, "reproducible")
}
