package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/wire"
)

// opLog is the order of a batch's durable steps and the ledger's records, as one list.
type opLog struct {
	mu  sync.Mutex
	ops []string
	// fail, when set, makes the step it names fail (e.g. "rename 2": the second rename).
	fail  string
	count map[string]int
}

func (l *opLog) add(kind, what string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.count == nil {
		l.count = map[string]int{}
	}
	l.count[kind]++
	if l.fail == fmt.Sprintf("%s %d", kind, l.count[kind]) {
		l.ops = append(l.ops, kind+" FAILED "+what)
		return errors.New("injected: " + kind + " " + what)
	}
	l.ops = append(l.ops, kind+" "+what)
	return nil
}

func (l *opLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// fs is the machine's fsOps, each call logged first (and failed when l says so).
func (l *opLog) fs() fsOps {
	real := osFS()
	return fsOps{
		syncFile: func(f *os.File) error {
			if err := l.add("sync", f.Name()); err != nil {
				return err
			}
			return real.syncFile(f)
		},
		rename: func(from, to string) error {
			if err := l.add("rename", to); err != nil {
				return err
			}
			return real.rename(from, to)
		},
		syncDir: func(dir string) error {
			if err := l.add("syncdir", dir); err != nil {
				return err
			}
			return real.syncDir(dir)
		},
	}
}

// loggedLedger is the real store.db, each record logged as it is made.
type loggedLedger struct {
	*store.Store
	log *opLog
}

func (l loggedLedger) RecordAll(ctx context.Context, rs []apply.Applied) error {
	for _, a := range rs {
		l.log.add("record", a.Resource.ID)
	}
	return l.Store.RecordAll(ctx, rs)
}

func (l loggedLedger) Record(ctx context.Context, r wire.Resource, created bool, at time.Time) error {
	l.log.add("record", r.ID)
	return l.Store.Record(ctx, r, created, at)
}

// batchEnv is an engine with the real directory and file appliers, the file applier's durable
// steps logged, over a real store.db: two directories of three files each.
type batchEnv struct {
	e      *apply.Engine
	s      *store.Store
	log    *opLog
	dirs   []string
	files  []string
	decl   wire.Declaration
	bodies map[string]string // what each file is declared to hold
}

func newBatchEnv(t *testing.T) *batchEnv {
	t.Helper()
	env := newEnv(t)
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := &batchEnv{s: s, log: &opLog{}, bodies: map[string]string{}}
	var rs []wire.Resource
	for d := range 2 {
		dir := filepath.Join(env.dir, fmt.Sprintf("d%d", d))
		b.dirs = append(b.dirs, dir)
		rs = append(rs, res(t, wire.KindDirectory, dir, &wire.DirectorySpec{}))
	}
	for f := range 6 {
		p := filepath.Join(b.dirs[f%2], fmt.Sprintf("f%d.conf", f))
		b.files = append(b.files, p)
		b.bodies[p] = strings.Repeat(fmt.Sprintf("line %d of %s\n", f, p), 100)
		rs = append(rs, res(t, wire.KindFile, p, &wire.FileSpec{Content: str(b.bodies[p])}))
	}
	b.decl = wire.Declaration{Version: 1, Node: "n1", Resources: rs}
	b.e = &apply.Engine{
		Appliers: apply.Appliers{wire.KindDirectory: Directory(env.g), wire.KindFile: file{g: env.g, fs: b.log.fs()}},
		Ledger:   loggedLedger{s, b.log}, Guard: env.g,
	}
	return b
}

// index is the position in ops of the first op that is kind and ends with what; -1 if none.
func index(ops []string, kind, what string) int {
	return slices.IndexFunc(ops, func(op string) bool { return strings.HasPrefix(op, kind+" ") && strings.HasSuffix(op, what) })
}

// A run of files is recorded only once each is on disk: its temp file synced, renamed into
// place and its directory synced — and each directory is synced once for the run, not once per
// file. The order is read from one log of the durable steps (the env seam) and the ledger.
func TestABatchRecordsNothingBeforeItIsOnDisk(t *testing.T) {
	b := newBatchEnv(t)
	rep, err := b.e.Apply(context.Background(), b.decl, nil)
	if err != nil || rep.Counts[apply.ActionCreated] != 8 {
		t.Fatalf("apply: %+v %v", rep.Counts, err)
	}
	ops := b.log.list()
	for _, p := range b.files {
		rec, ren, dsync := index(ops, "record", p), index(ops, "rename", p), index(ops, "syncdir", filepath.Dir(p))
		switch {
		case rec < 0 || ren < 0 || dsync < 0:
			t.Fatalf("%s: record at %d, rename at %d, its directory synced at %d: %q", p, rec, ren, dsync, ops)
		case !(ren < dsync && dsync < rec):
			t.Errorf("%s: renamed at %d, its directory synced at %d, recorded at %d: want that order (%q)", p, ren, dsync, rec, ops)
		}
		// Every temp file is synced before the first rename: none renamed unsynced.
		if first := index(ops, "rename", ""); slices.ContainsFunc(ops[first:], func(op string) bool { return strings.HasPrefix(op, "sync ") }) {
			t.Errorf("a temp file synced after the renames began: %q", ops)
		}
		if got, err := os.ReadFile(p); err != nil || string(got) != b.bodies[p] {
			t.Errorf("%s holds %d bytes, %v", p, len(got), err)
		}
	}
	if n := b.log.count["sync"]; n != len(b.files) {
		t.Errorf("%d temp files synced, want %d", n, len(b.files))
	}
	if n := b.log.count["syncdir"]; n != len(b.dirs) {
		t.Errorf("%d directory syncs for %d files in %d directories, want one per directory", n, len(b.files), len(b.dirs))
	}
}

// A batch interrupted at any durable step leaves every declared path holding its old content
// or the whole new one — never a part — and records only files whose content is in place and
// whose directory was synced; the next apply completes it and leaves no temp file.
func TestAnInterruptedBatchLeavesNoHalfWrittenFileAtADeclaredPath(t *testing.T) {
	for _, fail := range []string{"sync 1", "sync 4", "rename 1", "rename 3", "syncdir 1", "syncdir 2"} {
		t.Run(fail, func(t *testing.T) {
			b := newBatchEnv(t)
			ctx := context.Background()
			// The directories first, and an old version of every other file.
			dirsOnly := b.decl
			dirsOnly.Resources = b.decl.Resources[:2]
			if _, err := b.e.Apply(ctx, dirsOnly, nil); err != nil {
				t.Fatal(err)
			}
			old := map[string]string{}
			for i, p := range b.files {
				if i%2 == 0 {
					old[p] = "old content\n"
					if err := os.WriteFile(p, []byte(old[p]), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			b.log.fail = fail
			if _, err := b.e.Apply(ctx, b.decl, nil); err == nil || !strings.Contains(err.Error(), "injected") {
				t.Fatalf("apply with %s failing: %v", fail, err)
			}
			owned, err := b.s.Owned(ctx)
			if err != nil {
				t.Fatal(err)
			}
			recorded := map[string]bool{}
			for _, o := range owned {
				recorded[o.ID] = true
			}
			ops := b.log.list()
			for _, p := range b.files {
				got, err := os.ReadFile(p)
				whole := err == nil && string(got) == b.bodies[p]
				was := (err == nil && old[p] != "" && string(got) == old[p]) || (errors.Is(err, os.ErrNotExist) && old[p] == "")
				if !whole && !was {
					t.Errorf("%s holds %q (%v): neither its old content nor the whole new one", p, trim(got), err)
				}
				if recorded[p] && (!whole || index(ops, "syncdir", filepath.Dir(p)) < 0 || strings.Contains(ops[index(ops, "syncdir", filepath.Dir(p))], "FAILED")) {
					t.Errorf("%s is recorded as applied, but its content in place is %v and its directory's sync %q", p, whole, ops)
				}
			}
			b.log.fail = ""
			if rep, err := b.e.Apply(ctx, b.decl, nil); err != nil {
				t.Fatalf("the next apply: %+v %v", rep.Counts, err)
			}
			for _, dir := range b.dirs {
				for _, name := range entries(t, dir) {
					if strings.Contains(name, ".mesh-tmp-") {
						t.Errorf("%s left in %s", name, dir)
					}
				}
			}
			for _, p := range b.files {
				if got, _ := os.ReadFile(p); string(got) != b.bodies[p] {
					t.Errorf("after the next apply %s holds %q", p, trim(got))
				}
			}
		})
	}
}

func trim(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}
