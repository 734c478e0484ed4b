package files

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/novox/mesh-host/wire"
)

// A run of file resources is applied as one batch (apply.BatchApplier) with the guarantee a
// single write has — a declared path holds its old content or the whole new one, and what
// ApplyBatch reports applied is on disk — for a sync per file and one per directory instead
// of one per file and one per file's directory: every temp file is written beside its path,
// then each is synced (several at once, which the file system commits together), then each
// renamed over its path, then each directory holding one synced once. Only then does the
// engine record them.

// fsOps are the calls that make a batch durable, in the order a batch makes them: the seam a
// test replaces to see that order, or to interrupt it.
type fsOps struct {
	syncFile func(f *os.File) error
	rename   func(from, to string) error
	syncDir  func(dir string) error
}

// osFS is the machine's.
func osFS() fsOps {
	return fsOps{syncFile: (*os.File).Sync, rename: os.Rename, syncDir: syncDir}
}

// syncWorkers is how many temp files a batch syncs at once: ext4 commits the syncs waiting
// together in one journal transaction.
const syncWorkers = 32

// batch is the temp files of a run, written and not yet in place.
type batch struct {
	fs     fsOps
	writes []pendingWrite
	placed int // writes renamed into place
}

type pendingWrite struct {
	f    *os.File
	path string
	at   int // the resource's index in the run
}

// write starts p's content in a temp file beside it, filled by fill, owned and moded as
// given: in place only once commit has run.
func (b *batch) write(at int, p string, mode uint32, id ids, fill func(io.Writer) error) error {
	if err := checkParent(p); err != nil {
		return err
	}
	dir, base := filepath.Split(p)
	f, err := os.CreateTemp(dir, "."+base+".mesh-tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	if err := fill(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := setAttrs(f, mode, id); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	b.writes = append(b.writes, pendingWrite{f: f, path: p, at: at})
	return nil
}

// commit syncs every temp file, renames each into place and syncs each directory once. It
// returns how many of the run's resources, from the first, are in place and durable: n when
// every step worked, else the index of the first resource a failed step left out (its temp
// file and those after it are removed, never renamed).
func (b *batch) commit(n int) (int, error) {
	if len(b.writes) == 0 {
		return n, nil
	}
	synced, err := b.syncAll()
	if err != nil {
		n = b.writes[synced].at
	}
	for i := b.placed; i < synced; i++ {
		w := b.writes[i]
		w.f.Close()
		if rerr := b.fs.rename(w.f.Name(), w.path); rerr != nil {
			n, err = w.at, fmt.Errorf("writing %s: %w", w.path, rerr)
			break
		}
		b.placed = i + 1
	}
	// Each directory once, in the order first written to; a directory that cannot be synced
	// leaves out the first resource placed in it and all after.
	seen := map[string]bool{}
	for _, w := range b.writes[:b.placed] {
		dir := filepath.Dir(w.path)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		if derr := b.fs.syncDir(dir); derr != nil {
			if w.at < n || err == nil {
				n, err = w.at, derr
			}
			break
		}
	}
	return n, err
}

// syncAll syncs the temp files, syncWorkers at once. It returns how many, from the first, were
// synced with no failure before them, and the first failure.
func (b *batch) syncAll() (int, error) {
	errs := make([]error, len(b.writes))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(syncWorkers, len(b.writes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := b.fs.syncFile(b.writes[i].f); err != nil {
					errs[i] = fmt.Errorf("sync %s: %w", b.writes[i].f.Name(), err)
				}
			}
		}()
	}
	for i := range b.writes {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return i, err
		}
	}
	return len(b.writes), nil
}

// abort removes every temp file not renamed into place.
func (b *batch) abort() {
	for _, w := range b.writes[b.placed:] {
		w.f.Close()
		os.Remove(w.f.Name())
	}
	b.writes = b.writes[:b.placed]
}

// clearLeftoversOf removes what interrupted writes left beside each of paths
// (.<name>.mesh-tmp-*), reading each directory once: clearLeftovers, for a run.
func clearLeftoversOf(paths []string) {
	byDir := map[string]map[string]bool{}
	for _, p := range paths {
		dir, base := filepath.Split(p)
		if byDir[dir] == nil {
			byDir[dir] = map[string]bool{}
		}
		byDir[dir][base] = true
	}
	for dir, bases := range byDir {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			name, ok := strings.CutPrefix(e.Name(), ".")
			if !ok {
				continue
			}
			if i := strings.LastIndex(name, ".mesh-tmp-"); i > 0 && bases[name[:i]] {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
	}
}

// ApplyBatch applies each of rs as Apply does, sharing the durability (apply.BatchApplier).
func (a file) ApplyBatch(ctx context.Context, rs []wire.Resource) ([]bool, error) {
	b := &batch{fs: a.fs}
	defer b.abort()
	var paths []string
	for _, r := range rs {
		if w, err := a.want(r); err == nil {
			paths = append(paths, w.path)
		}
	}
	clearLeftoversOf(paths)
	created := make([]bool, 0, len(rs))
	var failed error
	for i, r := range rs {
		c, err := a.applyTo(ctx, i, r, b)
		if err != nil {
			failed = err
			break
		}
		created = append(created, c)
	}
	n, err := b.commit(len(created))
	if err != nil {
		return created[:n], err
	}
	return created, failed
}
