package apply_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
