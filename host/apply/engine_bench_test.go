package apply_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/apply/files"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/wire"
)

// The drift check every node pays every reconcile interval: a reconcile of 200 resources (20
// directories of 9 files each) with the real directory and file appliers over a temp dir and a
// real store.db, the held declaration parsed as the host parses it each time.

func bench200(b *testing.B) (e *apply.Engine, raw []byte, dir string) {
	b.Helper()
	dir = b.TempDir()
	var rs []string
	for d := 0; d < 20; d++ {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", d))
		rs = append(rs, fmt.Sprintf(`{"type": "directory", "id": %q, "spec": {"mode": "0750"}}`, p))
		for f := 0; f < 9; f++ {
			rs = append(rs, fmt.Sprintf(`{"type": "file", "id": %q, "spec": {"content": "key = %d\nvalue = %s\n", "mode": "0640"}}`,
				filepath.Join(p, fmt.Sprintf("f%d.conf", f)), f, strings.Repeat("x", 200)))
		}
	}
	raw = []byte(`{"version": 1, "node": "n1", "resources": [` + strings.Join(rs, ",") + `]}`)
	s, err := store.Open(context.Background(), filepath.Join(b.TempDir(), store.FileName))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	g := apply.NewGuard(b.TempDir()) // as the host makes it, once per reconcile
	e = &apply.Engine{Appliers: apply.Appliers{wire.KindDirectory: files.Directory(g), wire.KindFile: files.File(g, nil)}, Ledger: s, Guard: g}
	if rep := reconcile(b, e, raw); rep.Counts[apply.ActionCreated] != 200 {
		b.Fatalf("first apply: %+v", rep.Counts)
	}
	return e, raw, dir
}

func reconcile(b *testing.B, e *apply.Engine, raw []byte) apply.Report {
	d, err := wire.ParseDeclaration(raw, "n1")
	if err != nil {
		b.Fatal(err)
	}
	rep, err := e.Apply(context.Background(), d, nil)
	if err != nil {
		b.Fatal(err)
	}
	return rep
}

func BenchmarkReconcile200NothingToChange(b *testing.B) {
	e, raw, _ := bench200(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep := reconcile(b, e, raw); rep.Changed() != 0 {
			b.Fatalf("changed %d", rep.Changed())
		}
	}
}

func BenchmarkReconcile200OneDriftedFile(b *testing.B) {
	e, raw, dir := bench200(b)
	drifted := filepath.Join(dir, "d10", "f4.conf")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := os.WriteFile(drifted, []byte("changed by hand\n"), 0o640); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if rep := reconcile(b, e, raw); len(rep.Drifted) != 1 || rep.Changed() != 1 {
			b.Fatalf("drifted %v, changed %d", rep.Drifted, rep.Changed())
		}
	}
}

// The figure "11,000 small files applied" (issue 27 §1.7): a declaration of 100 directories of
// 110 files (about 100 bytes each) applied to an empty tree over a real store.db, three ways —
// one by one as before batches (each file synced, renamed and its directory synced, and each
// recorded in its own transaction: the file applier and the ledger with their batch methods
// hidden), batched (runs of files written, synced, renamed, each directory synced once, and
// the run recorded in one transaction), and the floor: the same files written in place with no
// temp file, no record, and one sync of the file system at the end. Run with:
// go test -run XXX -bench Apply11000Files -benchtime 1x ./host/apply/
func BenchmarkApply11000Files(b *testing.B) {
	const dirs, perDir = 100, 110
	for _, way := range []string{"one-by-one", "batched", "floor-one-sync"} {
		b.Run(way, func(b *testing.B) {
			var took time.Duration
			for b.Loop() {
				b.StopTimer()
				dir := b.TempDir()
				raw := declaration11000(dir, dirs, perDir)
				d, err := wire.ParseDeclaration(raw, "n1")
				if err != nil {
					b.Fatal(err)
				}
				e := engine11000(b, way == "batched")
				b.StartTimer()
				start := time.Now()
				if way == "floor-one-sync" {
					writeWithOneSync(b, d)
				} else if rep, err := e.Apply(context.Background(), d, nil); err != nil || rep.Counts[apply.ActionCreated] != dirs*(perDir+1) {
					b.Fatalf("apply: %+v %v", rep.Counts, err)
				}
				took += time.Since(start)
			}
			per := took.Seconds() / float64(b.N)
			b.ReportMetric(per, "s/apply")
			b.ReportMetric(float64(dirs*perDir)/per, "files/s")
		})
	}
}

func declaration11000(dir string, dirs, perDir int) []byte {
	var rs []string
	for d := range dirs {
		p := filepath.Join(dir, fmt.Sprintf("d%03d", d))
		rs = append(rs, fmt.Sprintf(`{"type": "directory", "id": %q}`, p))
		for f := range perDir {
			rs = append(rs, fmt.Sprintf(`{"type": "file", "id": %q, "spec": {"content": "key = %d\nvalue = %s\n", "mode": "0640"}}`,
				filepath.Join(p, fmt.Sprintf("f%03d.conf", f)), f, strings.Repeat("x", 80)))
		}
	}
	return []byte(`{"version": 1, "node": "n1", "resources": [` + strings.Join(rs, ",") + `]}`)
}

// oneByOne hides an applier's ApplyBatch, recordEach a ledger's RecordAll: the engine applies
// and records each resource alone, as before batches.
type (
	oneByOne   struct{ apply.Applier }
	recordEach struct{ apply.Ledger }
)

func engine11000(b *testing.B, batched bool) *apply.Engine {
	s, err := store.Open(context.Background(), filepath.Join(b.TempDir(), store.FileName))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	g := apply.NewGuard(b.TempDir())
	e := &apply.Engine{Appliers: apply.Appliers{wire.KindDirectory: files.Directory(g), wire.KindFile: files.File(g, nil)}, Ledger: s, Guard: g}
	if !batched {
		e.Appliers[wire.KindFile], e.Ledger = oneByOne{e.Appliers[wire.KindFile]}, recordEach{s}
	}
	return e
}

// writeWithOneSync makes d's directories and writes its files in place, then syncs the file
// system once: the least any durable apply of them can cost.
func writeWithOneSync(b *testing.B, d wire.Declaration) {
	var last string
	for _, r := range d.Resources {
		switch s := r.Parsed.(type) {
		case *wire.DirectorySpec:
			if err := os.Mkdir(r.ID, 0o755); err != nil {
				b.Fatal(err)
			}
		case *wire.FileSpec:
			if err := os.WriteFile(r.ID, []byte(*s.Content), 0o640); err != nil {
				b.Fatal(err)
			}
			last = r.ID
		}
	}
	f, err := os.Open(last)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
}
