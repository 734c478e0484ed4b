package apply_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/apply/files"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/wire"
)

// With the real directory and file appliers: a file that was there before it was declared is
// left when no longer declared (forgotten), the ones the host created are removed, in reverse
// order (the file before its directory, which could not go first).
func TestWithTheRealAppliersOnlyWhatTheHostCreatedIsRemoved(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := apply.Guard{Root: t.TempDir()}
	e := &apply.Engine{Appliers: apply.Appliers{wire.KindDirectory: files.Directory(g), wire.KindFile: files.File(g, nil)}, Ledger: s, Guard: g}
	dir := t.TempDir()
	before := filepath.Join(dir, "was-here.conf")
	if err := os.WriteFile(before, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parse := func(rs ...string) wire.Declaration {
		d, err := wire.ParseDeclaration([]byte(`{"version": 1, "node": "n1", "resources": [`+strings.Join(rs, ",")+`]}`), "n1")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	app, conf := filepath.Join(dir, "app"), filepath.Join(dir, "app", "app.conf")
	rep, err := e.Apply(ctx, parse(
		`{"type": "directory", "id": "`+app+`"}`,
		`{"type": "file", "id": "`+conf+`", "spec": {"content": "x\n"}}`,
		`{"type": "file", "id": "`+before+`", "spec": {"content": "new\n"}}`), nil)
	if err != nil || rep.Changed() != 3 {
		t.Fatalf("apply: %+v %v", rep.Counts, err)
	}
	rep, err = e.Apply(ctx, parse(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rep); got != "was-here.conf:forgotten app.conf:removed app:removed" {
		t.Errorf("steps %s", got)
	}
	if b, err := os.ReadFile(before); err != nil || string(b) != "new\n" {
		t.Errorf("the file that was there before: %q %v; want it left as last applied", b, err)
	}
	if _, err := os.Stat(app); !os.IsNotExist(err) {
		t.Errorf("the directory the host made is still there: %v", err)
	}
	if owned, _ := s.Owned(ctx); len(owned) != 0 {
		t.Errorf("still owned: %+v", owned)
	}
}
