package files

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The drift check every node pays every 10 minutes: Inspect of resources that are in their
// declared state. Run with: go test -run XXX -bench Inspect -benchmem ./host/apply/files/
func BenchmarkInspect200Files(b *testing.B) {
	for _, kind := range []string{"content", "source"} {
		b.Run(kind, func(b *testing.B) {
			e := env{root: filepath.Join(b.TempDir(), "root"), dir: b.TempDir()}
			e.g = apply.Guard{Root: e.root}
			blobs := newBlobs()
			a := File(e.g, blobs)
			body := strings.Repeat("configuration line\n", 50) // ~1 KiB
			var rs []wire.Resource
			for i := range 200 {
				spec := &wire.FileSpec{Path: filepath.Join(e.dir, fmt.Sprintf("f%03d.conf", i)), Mode: "0644"}
				if kind == "content" {
					spec.Content = str(body + fmt.Sprint(i))
				} else {
					spec.Source = blobs.put([]byte(body + fmt.Sprint(i)))
				}
				r := wire.Resource{Type: "file", ID: spec.Path, Parsed: spec}
				if _, err := a.Apply(context.Background(), r); err != nil {
					b.Fatal(err)
				}
				rs = append(rs, r)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				for _, r := range rs {
					if d, err := a.Inspect(context.Background(), r); err != nil || len(d) != 0 {
						b.Fatal(d, err)
					}
				}
			}
		})
	}
}

func BenchmarkInspectArchiveOf200Files(b *testing.B) {
	root := filepath.Join(b.TempDir(), "root")
	os.Mkdir(root, 0o755)
	dir := b.TempDir()
	blobs := newBlobs()
	a := Archive(apply.Guard{Root: root}, blobs, root)
	var ents []meshtest.Entry
	for i := range 200 {
		ents = append(ents, tfile(fmt.Sprintf("d%d/f%03d", i%10, i), 0o644, strings.Repeat("x", 1000)+fmt.Sprint(i)))
	}
	spec := &wire.ArchiveSpec{Path: filepath.Join(dir, "app"), Source: blobs.put(meshtest.Archive(ents, nil))}
	r := wire.Resource{Type: "archive", ID: "app", Parsed: spec}
	if _, err := a.Apply(context.Background(), r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, err := a.Inspect(context.Background(), r); err != nil || len(d) != 0 {
			b.Fatal(d, err)
		}
	}
}
