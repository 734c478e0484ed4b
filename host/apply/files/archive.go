package files

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// Archive is the applier of "archive" resources (wire.ArchiveSpec): the tar+zstd blob source
// names, extracted into the directory path (default: the id) by the same strict reader as a
// host archive (archive.ExtractTree). It extracts into a staging directory beside path, then
// moves the whole tree into place when path did not exist, or each entry that differs when it
// did, so a refused or failed extraction leaves path as it was. What it placed is recorded in a
// manifest under root (applied/archives/<sha256 of the id>.json): Inspect compares the disk
// with it (without fetching the blob), and Remove takes away exactly what it lists as created
// by the host, never anything else.
func Archive(g apply.Guard, b apply.Blobs, root string) apply.Applier {
	if root == "" {
		root = wire.DefaultRoot // never a path relative to wherever the host was started
	}
	return archiveApplier{g: g, b: b, root: root}
}

type archiveApplier struct {
	g    apply.Guard
	b    apply.Blobs
	root string
	lim  archive.TreeLimits // zero: the defaults; tests lower them
}

// manifestVersion is the manifest's format; a manifest of another version is treated as
// missing (the archive is read again to compare).
const manifestVersion = 1

// manifest is what an archive resource placed on the machine.
type manifest struct {
	Version int    `json:"version"`
	ID      string `json:"id"`
	Path    string `json:"path"`
	Source  string `json:"source"`
	// Created says the host made path itself (it did not exist before).
	Created bool            `json:"created"`
	Entries []manifestEntry `json:"entries"`
}

type manifestEntry struct {
	archive.Entry
	// Created says nothing was at this entry's place before the host put it there.
	Created bool `json:"created,omitempty"`
}

// maxArchiveDiffs bounds Inspect's lines for one archive.
const maxArchiveDiffs = 10

type archiveWant struct {
	path   string
	source digest.Digest
	id     ids
}

func (a archiveApplier) want(r wire.Resource) (archiveWant, error) {
	spec, err := specOf[wire.ArchiveSpec](r)
	if err != nil {
		return archiveWant{}, err
	}
	p, err := target(a.g, spec.Path, r.ID)
	if err != nil {
		return archiveWant{}, err
	}
	w := archiveWant{path: p}
	if w.source, err = parseSource(spec.Source); err != nil {
		return archiveWant{}, err
	}
	if w.id, err = lookupIDs(spec.Owner, spec.Group); err != nil {
		return archiveWant{}, err
	}
	return w, nil
}

// manifestPath is where the manifest of resource id is kept.
func (a archiveApplier) manifestPath(id string) string {
	sum := sha256.Sum256([]byte(id))
	return filepath.Join(a.root, "applied", "archives", hex.EncodeToString(sum[:])+".json")
}

// loadManifest returns the manifest of id, or nil when there is none (or it is unreadable as
// one: then the archive itself is the reference).
func (a archiveApplier) loadManifest(id string) (*manifest, error) {
	b, err := os.ReadFile(a.manifestPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the record of archive %q: %w", text.Bound(id), err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Version != manifestVersion || m.ID != id {
		return nil, nil
	}
	return &m, nil
}

func (a archiveApplier) saveManifest(m *manifest) error {
	p := a.manifestPath(m.ID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("recording archive %q: %w", text.Bound(m.ID), err)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return writeAtomic(p, 0o600, ids{uid: -1, gid: -1}, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}

func (a archiveApplier) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := a.want(r)
	if err != nil {
		return nil, err
	}
	s, err := lstat(w.path)
	switch {
	case err != nil:
		return nil, err
	case !s.exists:
		return []string{"absent"}, nil
	case s.kind != "directory":
		return []string{fmt.Sprintf("is a %s, declared a directory", s.kind)}, nil
	}
	m, err := a.loadManifest(r.ID)
	if err != nil {
		return nil, err
	}
	if m != nil && m.Path == w.path {
		if m.Source != string(w.source) {
			return []string{fmt.Sprintf("extracted from %s, declared %s", short(digest.Digest(m.Source)), short(w.source))}, nil
		}
		return a.compare(w, m.Entries)
	}
	// No record of what was extracted here: the archive itself is the reference.
	ents, err := a.read(ctx, w.source, nil)
	if err != nil {
		return nil, err
	}
	mes := make([]manifestEntry, len(ents))
	for i, e := range ents {
		mes[i] = manifestEntry{Entry: e}
	}
	diffs, err := a.compare(w, mes)
	if err != nil || len(diffs) > 0 {
		return diffs, err
	}
	// In place, but the host has no record: applying writes one (and changes nothing else).
	return []string{apply.Unrecorded + " extracted as declared, but the host's record of it is missing"}, nil
}

// compare words how the disk under w.path differs from ents. A file's content is hashed only
// when its size matches.
func (a archiveApplier) compare(w archiveWant, ents []manifestEntry) ([]string, error) {
	var diffs []string
	more := 0
	add := func(s ...string) {
		for _, d := range s {
			if len(diffs) < maxArchiveDiffs {
				diffs = append(diffs, d)
			} else {
				more++
			}
		}
	}
	for _, e := range ents {
		p := filepath.Join(w.path, filepath.FromSlash(e.Name))
		name := text.Bound(e.Name)
		s, err := lstat(p)
		if err != nil {
			return nil, err
		}
		switch {
		case !s.exists:
			add("missing: " + name)
			continue
		case e.Dir && s.kind != "directory":
			add(fmt.Sprintf("%s is a %s, declared a directory", name, s.kind))
			continue
		case !e.Dir && s.kind != "regular file":
			add(fmt.Sprintf("%s is a %s, declared a regular file", name, s.kind))
			continue
		case !e.Dir && s.size != e.Size:
			add(fmt.Sprintf("changed: %s (%d bytes on disk, %d declared)", name, s.size, e.Size))
		case !e.Dir:
			got, err := hashFile(p)
			if err != nil {
				return nil, err
			}
			if got != e.Digest {
				add(fmt.Sprintf("changed: %s (%s on disk)", name, short(got)))
			}
		}
		add(attrDiffs(name+": ", s, uint32(e.Mode), w.id)...)
	}
	if more > 0 {
		diffs = append(diffs, fmt.Sprintf("… and %d more differences", more))
	}
	return diffs, nil
}

// read reads the blob source through the strict tree reader, verifying the blob against its
// digest as it goes; into, when set, is the staging directory to extract into.
func (a archiveApplier) read(ctx context.Context, source digest.Digest, into *string) ([]archive.Entry, error) {
	if a.b == nil {
		return nil, fmt.Errorf("source %s: no blob source is configured on this host", source)
	}
	rc, err := a.b.Open(ctx, string(source))
	if err != nil {
		return nil, fmt.Errorf("source %s: %w", source, err)
	}
	defer rc.Close()
	v := source.Verifier()
	tee := io.TeeReader(rc, v)
	var ents []archive.Entry
	if into != nil {
		ents, err = archive.ExtractTree(ctx, tee, *into, a.lim)
	} else {
		ents, err = archive.ReadTree(ctx, tee, a.lim, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", source, err)
	}
	// The decoder may stop short of the blob's last bytes; what is left still counts for the
	// digest (a blob longer than this is not the one named, and is refused below).
	if _, err := io.CopyN(io.Discard, tee, 1<<20); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("source %s: %w", source, err)
	}
	if !v.Verified() {
		return nil, fmt.Errorf("source %s: the blob read does not match it; refused, nothing placed", source)
	}
	return ents, nil
}

func (a archiveApplier) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	w, err := a.want(r)
	if err != nil {
		return false, err
	}
	s, err := lstat(w.path)
	if err != nil {
		return false, err
	}
	if s.exists && s.kind != "directory" && s.kind != "symlink" {
		return false, fmt.Errorf("%s is a %s, declared a directory to extract into: the host does not replace what it did not create; remove it first", w.path, s.kind)
	}
	if err := checkParent(w.path); err != nil {
		return false, err
	}
	old, err := a.loadManifest(r.ID)
	if err != nil {
		return false, err
	}
	if old != nil && old.Path != w.path {
		old = nil // a record of another place says nothing about this one
	}

	if old == nil && s.kind == "directory" {
		// No record, and the tree may be in place already (a rescue, the applied records
		// lost): then only the record is written, and nothing on disk is touched.
		if adopted, err := a.adopt(ctx, w, r.ID); err != nil || adopted {
			return false, err
		}
	}
	clearLeftovers(w.path, "staging")
	parent, base := filepath.Split(w.path)
	staging, err := os.MkdirTemp(parent, "."+base+".mesh-staging-*")
	if err != nil {
		return false, fmt.Errorf("extracting into %s: %w", w.path, err)
	}
	defer os.RemoveAll(staging) // what was not moved into place; RemoveAll follows no symlink
	ents, err := a.read(ctx, w.source, &staging)
	if err != nil {
		return false, err
	}
	// An archive extracted into /etc/systemd/system could otherwise place the launcher's
	// unit: every entry's place is checked like a declared path, symlinks included.
	for _, e := range ents {
		if err := a.g.Check(filepath.Join(w.path, filepath.FromSlash(e.Name))); err != nil {
			return false, fmt.Errorf("archive entry %q: %w", text.Bound(e.Name), err)
		}
	}
	m := &manifest{Version: manifestVersion, ID: r.ID, Path: w.path, Source: string(w.source), Created: !s.exists}
	if old != nil && s.exists {
		m.Created = old.Created
	}
	if s.kind == "symlink" {
		// Like a directory resource, the link itself is replaced (once the archive was read
		// and found sound), never followed: the tree goes where the link was.
		if err := syscall.Unlink(w.path); err != nil {
			return false, fmt.Errorf("replacing the symlink at %s: %w", w.path, err)
		}
	}
	if s.kind != "directory" {
		err = a.swapIn(staging, w, ents, m)
	} else {
		err = a.placeEach(staging, w, ents, old, m)
	}
	if err != nil {
		return m.Created && !s.exists, err
	}
	if old != nil && old.Source != m.Source {
		a.removeStale(w.path, old, m)
	}
	created := m.Created
	for _, e := range m.Entries {
		created = created || e.Created
	}
	return created, a.saveManifest(m)
}

// adopt writes the record of an archive found extracted at w.path exactly as the archive holds
// it (nothing created by the host); false when the disk differs.
func (a archiveApplier) adopt(ctx context.Context, w archiveWant, id string) (bool, error) {
	ents, err := a.read(ctx, w.source, nil)
	if err != nil {
		return false, err
	}
	mes := make([]manifestEntry, len(ents))
	for i, e := range ents {
		mes[i] = manifestEntry{Entry: e}
	}
	if diffs, err := a.compare(w, mes); err != nil || len(diffs) > 0 {
		return false, err
	}
	for _, e := range ents {
		if err := a.g.Check(filepath.Join(w.path, filepath.FromSlash(e.Name))); err != nil {
			return false, fmt.Errorf("archive entry %q: %w", text.Bound(e.Name), err)
		}
	}
	return true, a.saveManifest(&manifest{Version: manifestVersion, ID: id, Path: w.path, Source: string(w.source), Entries: mes})
}

// swapIn moves the whole staged tree into place, path having not existed.
func (a archiveApplier) swapIn(staging string, w archiveWant, ents []archive.Entry, m *manifest) error {
	for _, e := range ents {
		m.Entries = append(m.Entries, manifestEntry{Entry: e, Created: true})
		if w.id.uid >= 0 || w.id.gid >= 0 {
			if err := os.Lchown(filepath.Join(staging, filepath.FromSlash(e.Name)), w.id.uid, w.id.gid); err != nil {
				return fmt.Errorf("extracting into %s: %w", w.path, err)
			}
			// chown clears setuid/setgid; the tree has none (refused), but the mode is set
			// again so the read-back matches what the archive says.
			if err := os.Chmod(filepath.Join(staging, filepath.FromSlash(e.Name)), e.Mode); err != nil {
				return fmt.Errorf("extracting into %s: %w", w.path, err)
			}
		}
	}
	if err := fixAttrs(staging, true, 0o755, w.id); err != nil {
		return err
	}
	if err := os.Rename(staging, w.path); err != nil {
		return fmt.Errorf("moving the extracted tree to %s: %w", w.path, err)
	}
	return syncDir(filepath.Dir(w.path))
}

// placeEach moves into the existing path each staged entry that differs from what is there,
// in three phases: every conflict found before anything moves (conflicts), each entry placed
// (placeOne), then each directory that gained an entry synced once.
func (a archiveApplier) placeEach(staging string, w archiveWant, ents []archive.Entry, old *manifest, m *manifest) error {
	before, err := conflicts(w.path, ents)
	if err != nil {
		return err
	}
	wasCreated := map[string]bool{}
	if old != nil {
		for _, e := range old.Entries {
			wasCreated[e.Name] = e.Created
		}
	}
	dirs := map[string]bool{w.path: true}
	for i, e := range ents {
		m.Entries = append(m.Entries, manifestEntry{Entry: e, Created: !before[i].exists || wasCreated[e.Name]})
		placed, err := placeOne(staging, w, e, before[i])
		if err != nil {
			return err
		}
		if placed {
			dirs[filepath.Dir(filepath.Join(w.path, filepath.FromSlash(e.Name)))] = true
		}
	}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// conflicts reads what is at each entry's place under path, refusing before anything moves a
// directory declared where a file, a symlink or anything else is (a symlink there would lead
// the entries under it elsewhere), or a file declared where a directory is.
func conflicts(path string, ents []archive.Entry) ([]stat, error) {
	before := make([]stat, len(ents))
	for i, e := range ents {
		p := filepath.Join(path, filepath.FromSlash(e.Name))
		s, err := lstat(p)
		if err != nil {
			return nil, err
		}
		switch {
		case !s.exists:
		case e.Dir && s.kind != "directory":
			return nil, fmt.Errorf("%s is a %s where the archive holds a directory: refused, nothing placed", p, s.kind)
		case !e.Dir && s.kind == "directory":
			return nil, fmt.Errorf("%s is a directory where the archive holds a file: refused, nothing placed", p)
		case !e.Dir && s.kind != "regular file" && s.kind != "symlink":
			return nil, fmt.Errorf("%s is a %s where the archive holds a file: refused, nothing placed", p, s.kind)
		}
		before[i] = s
	}
	return before, nil
}

// placeOne brings one entry's place to what the archive holds, s being what was there: a
// directory made or its attributes fixed, a file that differs renamed in from staging (placed:
// its directory gained an entry), one with the same bytes only its attributes fixed.
func placeOne(staging string, w archiveWant, e archive.Entry, s stat) (placed bool, err error) {
	p := filepath.Join(w.path, filepath.FromSlash(e.Name))
	mode := uint32(e.Mode)
	switch {
	case e.Dir && !s.exists:
		if err := os.Mkdir(p, 0o700); err != nil {
			return false, fmt.Errorf("extracting into %s: %w", w.path, err)
		}
		return true, fixAttrs(p, true, mode, w.id)
	case e.Dir:
		if len(attrDiffs("", s, mode, w.id)) > 0 {
			return false, fixAttrs(p, true, mode, w.id)
		}
		return false, nil
	}
	same := s.kind == "regular file" && s.size == e.Size
	if same {
		got, err := hashFile(p)
		if err != nil {
			return false, err
		}
		same = got == e.Digest
	}
	if same {
		if len(attrDiffs("", s, mode, w.id)) > 0 {
			return false, fixAttrs(p, false, mode, w.id)
		}
		return false, nil
	}
	from := filepath.Join(staging, filepath.FromSlash(e.Name))
	if err := fixAttrs(from, false, mode, w.id); err != nil {
		return false, err
	}
	// rename replaces a file or a symlink at p itself, never what a link points to.
	if err := os.Rename(from, p); err != nil {
		return false, fmt.Errorf("placing %s: %w", p, err)
	}
	return true, nil
}

// removeStale takes away what an earlier archive at the same path created and the new one no
// longer holds: files, then directories (only when empty). It is best effort: what it cannot
// remove stays, and the new manifest no longer lists it.
func (a archiveApplier) removeStale(path string, old, m *manifest) {
	keep := map[string]bool{}
	for _, e := range m.Entries {
		keep[e.Name] = true
	}
	var stale []manifestEntry
	for _, e := range old.Entries {
		if e.Created && !keep[e.Name] {
			stale = append(stale, e)
		}
	}
	removeEntries(path, stale)
}

// removeEntries removes, below path, the listed files, then the listed directories deepest
// first, each only if nothing along the way is a symlink and, for a directory, only if empty.
// It returns how many it left in place.
func removeEntries(path string, ents []manifestEntry) (left int) {
	for pass := 0; pass < 2; pass++ { // files first, then directories
		for i := len(ents) - 1; i >= 0; i-- {
			e := ents[i]
			if e.Dir != (pass == 1) {
				continue
			}
			p := filepath.Join(path, filepath.FromSlash(e.Name))
			if !realDirs(path, filepath.Dir(p)) {
				left++
				continue
			}
			s, err := lstat(p)
			switch {
			case err != nil:
				left++
				continue
			case !s.exists:
				continue
			}
			if e.Dir {
				if s.kind != "directory" || syscall.Rmdir(p) != nil {
					left++
				}
				continue
			}
			if s.kind != "regular file" || syscall.Unlink(p) != nil {
				left++
			}
		}
	}
	return left
}

// realDirs says whether every component from base down to dir is a directory, not a symlink:
// a removal below a symlink could reach somewhere the host never wrote.
func realDirs(base, dir string) bool {
	rel, err := filepath.Rel(base, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return false
	}
	p := base
	for _, c := range append([]string{""}, strings.Split(rel, string(filepath.Separator))...) {
		if c != "" && c != "." {
			p = filepath.Join(p, c)
		}
		s, err := lstat(p)
		if err != nil || s.kind != "directory" {
			return false
		}
	}
	return true
}

func (a archiveApplier) Remove(ctx context.Context, o apply.Owned) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	r := o.Resource()
	spec, err := specOf[wire.ArchiveSpec](r)
	if err != nil {
		return "", err
	}
	p, err := target(a.g, spec.Path, o.ID)
	if err != nil {
		return "", err
	}
	m, err := a.loadManifest(o.ID)
	if err != nil {
		return "", err
	}
	if m == nil || m.Path != p {
		if !o.Created {
			return "forgotten: it existed before the host managed it", nil
		}
		// Created by the host but no record: the archive itself says what was extracted.
		w, err := a.want(r)
		if err != nil {
			return "", err
		}
		ents, err := a.read(ctx, w.source, nil)
		if err != nil {
			return "", fmt.Errorf("no record of what was extracted into %s, and the archive could not be read: %w", p, err)
		}
		m = &manifest{Version: manifestVersion, ID: o.ID, Path: p, Source: string(w.source), Created: true}
		for _, e := range ents {
			m.Entries = append(m.Entries, manifestEntry{Entry: e, Created: true})
		}
	}
	var created []manifestEntry
	for _, e := range m.Entries {
		if e.Created {
			created = append(created, e)
		}
	}
	if s, err := lstat(p); err != nil {
		return "", err
	} else if s.exists && s.kind != "directory" {
		return fmt.Sprintf("forgotten: it is now a %s, not the directory the host extracted into", s.kind), a.dropManifest(o.ID)
	}
	left := removeEntries(p, created)
	msg := "removed"
	switch {
	case m.Created && left == 0:
		if err := syscall.Rmdir(p); err != nil && !errors.Is(err, syscall.ENOENT) {
			msg = "removed what it extracted; forgotten: " + p + " is not empty, holds things the host did not create"
		}
	case m.Created:
		msg = fmt.Sprintf("removed what it could; forgotten: %d entries changed or filled by others, and %s holds them", left, p)
	case len(created) == 0:
		msg = "forgotten: it existed before the host managed it"
	case left > 0:
		msg = fmt.Sprintf("removed what it extracted; forgotten: %d entries changed or filled by others", left)
	default:
		msg = "removed what it extracted; forgotten: " + p + " existed before the host managed it"
	}
	if err := syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	return msg, a.dropManifest(o.ID)
}

func (a archiveApplier) dropManifest(id string) error {
	p := a.manifestPath(id)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("dropping the record of archive %q: %w", text.Bound(id), err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
