package files

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// File is the applier of "file" resources (wire.FileSpec): a regular file at path (default:
// the id) holding content, or the blob source names (verified against its digest while it is
// copied), with mode (default 0644) and, when declared, owner and group. Content is replaced
// atomically; a symlink at path is replaced (never followed); a directory there is refused.
func File(g apply.Guard, b apply.Blobs) apply.Applier { return file{g: g, b: b, fs: osFS()} }

type file struct {
	g  apply.Guard
	b  apply.Blobs
	fs fsOps
}

type fileWant struct {
	path    string
	content string        // when declared inline
	source  digest.Digest // when declared by digest
	mode    uint32
	id      ids
}

func (a file) want(r wire.Resource) (fileWant, error) {
	spec, err := specOf[wire.FileSpec](r)
	if err != nil {
		return fileWant{}, err
	}
	p, err := target(a.g, spec.Path, r.ID)
	if err != nil {
		return fileWant{}, err
	}
	w := fileWant{path: p}
	switch {
	case spec.Content != nil && spec.Source != "":
		return fileWant{}, fmt.Errorf("file %s: both content and source are set; declare one", p)
	case spec.Content != nil:
		w.content = *spec.Content
	case spec.Source != "":
		if w.source, err = parseSource(spec.Source); err != nil {
			return fileWant{}, err
		}
	default:
		return fileWant{}, fmt.Errorf("file %s: neither content nor source is set; declare one", p)
	}
	if w.mode, err = parseMode(spec.Mode, 0o644); err != nil {
		return fileWant{}, err
	}
	if w.id, err = lookupIDs(spec.Owner, spec.Group); err != nil {
		return fileWant{}, err
	}
	return w, nil
}

func parseSource(s string) (digest.Digest, error) {
	d, err := digest.Parse(s)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("source %q is not a sha256:<64 hex> digest", text.Bound(s))
	}
	return d, nil
}

func (a file) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w, err := a.want(r)
	if err != nil {
		return nil, err
	}
	s, err := lstat(w.path)
	if err != nil {
		return nil, err
	}
	diffs, _, err := a.inspect(w, s)
	return diffs, err
}

// inspect compares what s and the file's bytes say with w; same reports whether the content
// is already what is declared. The bytes are read only when they could match: inline content
// of another size differs without reading.
func (a file) inspect(w fileWant, s stat) (diffs []string, same bool, err error) {
	switch {
	case !s.exists:
		return []string{"absent"}, false, nil
	case s.kind != "regular file":
		return []string{fmt.Sprintf("is a %s, declared a regular file", s.kind)}, false, nil
	}
	switch {
	case w.source == "" && s.size != int64(len(w.content)):
		diffs = append(diffs, fmt.Sprintf("content differs (%d bytes on disk, %d declared)", s.size, len(w.content)))
	default:
		f, err := openNoFollow(w.path, false)
		if err != nil {
			return nil, false, err
		}
		defer f.Close()
		var got digest.Digest
		if w.source == "" {
			same, err = sameContent(f, w.content)
		} else {
			got, err = hashOf(f, s.size)
			same = got == w.source
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading %s: %w", w.path, err)
		}
		if !same && got == "" {
			// Only on drift: read again for a digest to name what is there.
			if got, err = hashFile(w.path); err != nil {
				return nil, false, err
			}
		}
		if !same {
			diffs = append(diffs, fmt.Sprintf("content differs (%s on disk)", short(got)))
		}
	}
	return append(diffs, attrDiffs("", s, w.mode, w.id)...), same, nil
}

// hashOf digests what r yields, with a buffer no bigger than the file (sizeHint) needs: the
// drift check hashes many small files, and io.Copy's 32 KiB each is most of its garbage.
func hashOf(r io.Reader, sizeHint int64) (digest.Digest, error) {
	h := sha256.New()
	buf := make([]byte, max(512, min(sizeHint+1, 32<<10)))
	for {
		n, err := r.Read(buf)
		h.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
	}
	return digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil)), nil
}

func hashFile(p string) (digest.Digest, error) {
	f, err := openNoFollow(p, false)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	d, err := hashOf(f, fi.Size())
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", p, err)
	}
	return d, nil
}

// short is a digest cut for a one-line message.
func short(d digest.Digest) string {
	s := string(d)
	if i := strings.IndexByte(s, ':'); i >= 0 && len(s) > i+13 {
		return s[:i+13] + "…"
	}
	return s
}

// Apply is a batch of one (batch.go): the content written to a temp file beside the path,
// synced, renamed over it, and the directory synced.
func (a file) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	created, err := a.ApplyBatch(ctx, []wire.Resource{r})
	return len(created) == 1 && created[0], err
}

// applyTo changes what differs from r's spec, the content through b (in place once b is
// committed); at is r's index in b's run.
func (a file) applyTo(ctx context.Context, at int, r wire.Resource, b *batch) (bool, error) {
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
	if s.exists && s.kind != "regular file" && s.kind != "symlink" {
		return false, fmt.Errorf("%s is a %s, declared a regular file: the host does not replace what it did not create; remove it first", w.path, s.kind)
	}
	diffs, same, err := a.inspect(w, s)
	if err != nil {
		return false, err
	}
	if len(diffs) == 0 {
		return false, nil
	}
	if same {
		return false, fixAttrs(w.path, false, w.mode, w.id)
	}
	id := w.id
	if s.kind == "regular file" {
		// Owner and group not declared are left as they were, even though the file is new.
		if id.uid < 0 {
			id.uid = s.uid
		}
		if id.gid < 0 {
			id.gid = s.gid
		}
	}
	err = b.write(at, w.path, w.mode, id, func(out io.Writer) error {
		if w.source == "" {
			_, err := io.WriteString(out, w.content)
			return err
		}
		return a.copyBlob(ctx, w.source, out)
	})
	return !s.exists, err
}

// copyBlob copies the blob named d to out, verifying it against d as it goes: a blob that does
// not match fails the write before anything is renamed into place.
func (a file) copyBlob(ctx context.Context, d digest.Digest, out io.Writer) error {
	if a.b == nil {
		return fmt.Errorf("source %s: no blob source is configured on this host", d)
	}
	rc, err := a.b.Open(ctx, string(d))
	if err != nil {
		return fmt.Errorf("source %s: %w", d, err)
	}
	defer rc.Close()
	v := d.Verifier()
	if _, err := io.Copy(io.MultiWriter(out, v), rc); err != nil {
		return fmt.Errorf("source %s: %w", d, err)
	}
	if !v.Verified() {
		return fmt.Errorf("source %s: the blob read does not match it; refused, nothing written", d)
	}
	return nil
}

func (a file) Remove(ctx context.Context, o apply.Owned) (string, error) {
	spec, err := specOf[wire.FileSpec](o.Resource())
	if err != nil {
		return "", err
	}
	return removeCreated(ctx, a.g, o, spec.Path, "regular file", func(p string) (string, error) {
		if err := syscall.Unlink(p); err != nil && !errors.Is(err, syscall.ENOENT) {
			return "", fmt.Errorf("removing %s: %w", p, err)
		}
		return "removed", nil
	})
}
