package archive

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/opencontainers/go-digest"
)

// A tree archive is what an `archive` resource names: a tar+zstd archive of regular files and
// directories, read with the same strict rules as a host archive (no links, devices, FIFOs,
// PAX global headers, absolute names, "..", setuid/setgid/sticky; bounded decoding; nothing
// but zero padding after the end), but holding many entries.

// DefaultMaxTreeBytes is the default cap on the total size of a tree archive's files.
const DefaultMaxTreeBytes = 1 << 30

// DefaultMaxTreeEntries is the default cap on the number of entries in a tree archive.
const DefaultMaxTreeEntries = 10000

// entryFraming is what the tar framing of one entry may add to the decoded stream beyond its
// content: a header, padding and a PAX header with a long name.
const entryFraming = 4 << 10

// TreeLimits bound what ReadTree and ExtractTree decode. Zero fields take the defaults.
type TreeLimits struct {
	MaxBytes   int64  // total size of all files (DefaultMaxTreeBytes)
	MaxEntries int    // number of entries, directories included (DefaultMaxTreeEntries)
	MaxWindow  uint64 // largest zstd window (DefaultMaxWindow)
}

func (l TreeLimits) withDefaults() TreeLimits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxTreeBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxTreeEntries
	}
	if l.MaxWindow == 0 {
		l.MaxWindow = DefaultMaxWindow
	}
	return l
}

// Entry is one file or directory of a tree archive.
type Entry struct {
	Name   string        `json:"name"` // relative, clean, slash-separated; never "." or with ".."
	Dir    bool          `json:"dir,omitempty"`
	Mode   fs.FileMode   `json:"mode"`             // permission bits only
	Size   int64         `json:"size,omitempty"`   // files only
	Digest digest.Digest `json:"digest,omitempty"` // files only: sha256 of the content
}

// ReadTree reads a tree archive from r and calls each for every entry in archive order, a
// directory always before what it holds (a parent the archive does not list is given as a
// directory of mode 0755 first). For a file, content yields its bytes; what each does not read
// is read for it, since the digest covers all of it. It returns every entry with its digest.
// Refusals wrap ErrUnsafe and name the entry; an error from each is returned as it is. It
// reads r to its end, so the zstd checksum is verified; a "." entry is accepted and skipped.
func ReadTree(ctx context.Context, r io.Reader, lim TreeLimits, each func(e Entry, content io.Reader) error) ([]Entry, error) {
	lim = lim.withDefaults()
	capBytes := lim.MaxBytes + int64(lim.MaxEntries)*entryFraming + tarSlack
	zr, tr, capped, err := openCapped(ctx, r, lim.MaxWindow, capBytes)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	t := &treeReader{lim: lim, each: each, kinds: map[string]bool{}, left: lim.MaxBytes}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readErr(err)
		}
		if err := t.entry(hdr, tr); err != nil {
			return nil, err
		}
	}
	if len(t.out) == 0 {
		return nil, fmt.Errorf("%w: the archive is empty", ErrUnsafe)
	}
	if err := drainZeros(capped); err != nil {
		return nil, err
	}
	return t.out, nil
}

// treeReader is ReadTree's state between entries: one handler per tar header (entry), which
// checks it, gives its missing parents, then the directory or the file.
type treeReader struct {
	lim   TreeLimits
	each  func(e Entry, content io.Reader) error
	out   []Entry
	kinds map[string]bool // name → is a directory
	left  int64           // bytes of content the limit still allows
}

// emit gives e (and content, for a file) to each and adds it to what ReadTree returns.
func (t *treeReader) emit(e Entry, content io.Reader) error {
	if len(t.out) >= t.lim.MaxEntries {
		return fmt.Errorf("%w: it holds more than %d entries", ErrUnsafe, t.lim.MaxEntries)
	}
	t.kinds[e.Name] = e.Dir
	if t.each != nil {
		if err := t.each(e, content); err != nil {
			return err
		}
	}
	t.out = append(t.out, e)
	return nil
}

// entry handles one tar header: refused, skipped (".") or emitted after its parents, its
// content (a file's) read from tr.
func (t *treeReader) entry(hdr *tar.Header, tr io.Reader) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: entry %q %s; an archive resource holds only regular files and directories",
			ErrUnsafe, hdr.Name, fmt.Sprintf(format, args...))
	}
	if p := kindProblem(hdr, true); p != "" {
		return refuse("%s", p)
	}
	if p := modeProblem(hdr); p != "" {
		return refuse("%s", p)
	}
	name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
	if name == "." || name == "" {
		if hdr.Typeflag != tar.TypeDir {
			return refuse("is a file named as the extraction directory itself")
		}
		return nil
	}
	if strings.ContainsRune(name, 0) {
		return refuse("has a NUL in its name")
	}
	if _, seen := t.kinds[name]; seen {
		return refuse("appears twice")
	}
	if err := t.parents(name, refuse); err != nil {
		return err
	}
	e := Entry{Name: name, Mode: fs.FileMode(hdr.Mode) & fs.ModePerm}
	if hdr.Typeflag == tar.TypeDir {
		e.Dir = true
		return t.emit(e, nil)
	}
	if hdr.Size < 0 || hdr.Size > t.left {
		return refuse("is %d bytes, over what is left of the %d-byte limit for the whole archive", hdr.Size, t.lim.MaxBytes)
	}
	t.left -= hdr.Size
	return t.file(e, hdr.Size, tr)
}

// parents emits name's parents the archive did not list, outermost first, as directories of
// mode 0755; a listed one must be a directory.
func (t *treeReader) parents(name string, refuse func(string, ...any) error) error {
	var parents []string
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		parents = append(parents, p)
	}
	for i := len(parents) - 1; i >= 0; i-- {
		isDir, seen := t.kinds[parents[i]]
		switch {
		case seen && !isDir:
			return refuse("lies under %q, which the archive holds as a file", parents[i])
		case !seen:
			if err := t.emit(Entry{Name: parents[i], Dir: true, Mode: 0o755}, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// file emits a regular file of size bytes read from tr, hashing all of them (what each does not
// read is read here): its digest is known, and filled in, only once they are.
func (t *treeReader) file(e Entry, size int64, tr io.Reader) error {
	h := sha256.New()
	body := io.TeeReader(tr, h)
	e.Size = size
	if err := t.emit(e, &readErrReader{r: body}); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, body); err != nil {
		return readErr(err)
	}
	t.out[len(t.out)-1].Digest = digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))
	return nil
}

// readErrReader words a decoding error met while a caller reads an entry's content, so that a
// bomb or a corrupt stream reads as the archive's fault wherever it is found.
type readErrReader struct{ r io.Reader }

func (r *readErrReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = readErr(err)
	}
	return n, err
}

// ExtractTree reads a tree archive from r into dir, which must exist and be empty (a staging
// directory: the caller moves what it holds into place once all of it is there, and removes
// dir on error — ExtractTree may have left part of the tree in it). Files are written with
// their mode from the archive (permission bits only), synced, and directories synced after
// them. A failure to write is the machine's and is returned wrapping the *os.PathError, never
// ErrUnsafe.
func ExtractTree(ctx context.Context, r io.Reader, dir string, lim TreeLimits) ([]Entry, error) {
	var dirs []string
	entries, err := ReadTree(ctx, r, lim, func(e Entry, content io.Reader) error {
		p := filepath.Join(dir, filepath.FromSlash(e.Name))
		if e.Dir {
			if err := os.Mkdir(p, 0o700); err != nil {
				return fmt.Errorf("extract: %w", err)
			}
			dirs = append(dirs, p)
			return nil
		}
		return writeTreeFile(p, e.Mode, content)
	})
	if err != nil {
		return nil, err
	}
	// Directory modes last, deepest first, so a read-only directory does not stop its own
	// extraction; then each is synced so the renames that follow find the entries durable.
	modes := make(map[string]fs.FileMode, len(entries))
	for _, e := range entries {
		if e.Dir {
			modes[filepath.Join(dir, filepath.FromSlash(e.Name))] = e.Mode
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syncDir(dirs[i], modes[dirs[i]], true); err != nil {
			return nil, err
		}
	}
	if err := syncDir(dir, 0, false); err != nil {
		return nil, err
	}
	return entries, nil
}

func writeTreeFile(p string, mode fs.FileMode, content io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	w := &WriteRecorder{W: f}
	if _, err := io.Copy(w, content); err != nil {
		f.Close()
		if w.Err != nil {
			return fmt.Errorf("extract: %w", w.Err)
		}
		return err // already worded by readErrReader
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("extract: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("extract: sync %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	return nil
}

// syncDir sets a directory's mode (if set) and syncs it.
func syncDir(p string, mode fs.FileMode, set bool) error {
	d, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("extract: %w", err)
	}
	defer d.Close()
	if set {
		if err := d.Chmod(mode); err != nil {
			return fmt.Errorf("extract: %w", err)
		}
	}
	if err := d.Sync(); err != nil {
		return fmt.Errorf("extract: sync %s: %w", p, err)
	}
	return nil
}
