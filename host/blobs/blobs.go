// Package blobs gives the host the content a declaration names by digest, verified, from a local
// cache.
//
// That is a file's, an archive's or a package's source, "sha256:<hex>" — verified, from a local
// cache filled from one Source: the bus's blobs object store over the host's one link (Bus), or a
// bundle's blobs/ directory (Dir).
//
// The cache is DIR/sha256/<hex> (the host uses ROOT/blobs). A blob is written there only
// after its bytes were hashed on the way in and matched the digest that names it: written to a
// temporary file in the same directory, fsynced, renamed into place and the directory fsynced,
// so a crash leaves a whole verified blob or none. A cached blob is not hashed again when it is
// opened: it lies under the host's root (0700, root's), and whoever can change files there can
// change the host's own binary and credentials too.
//
// A blob that is missing, larger than the cache's limit or whose bytes do not match its digest
// is the fault of the declaration or of whoever published it, never of the host release: the
// errors wrap ErrNotFound, ErrTooLarge and ErrDigestMismatch so a caller can tell.
package blobs

import (
	"context"
	_ "crypto/sha256" // go-digest verifies sha256 only once it is linked in
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
)

// DefaultMaxSize is the largest blob a cache fetches unless told otherwise (Config.MaxSize).
const DefaultMaxSize int64 = 1 << 30

// DefaultStall is how long a fetch may go without a byte before it fails (Config.Stall): a link that
// died mid-fetch must fail the resource, not hold the reconcile — and with it the confirmation
// of a new host version — until the link returns.
const DefaultStall = 30 * time.Second

// tempPrefix starts the names of blobs being fetched (atomicfile.Create's names).
const tempPrefix = ".tmp-"

var (
	// ErrNotFound: the source does not hold the blob.
	ErrNotFound = errors.New("not found")
	// ErrDigestMismatch: the bytes the source gave do not match the digest that names them.
	ErrDigestMismatch = errors.New("does not match its digest")
	// ErrTooLarge: the blob is larger than the cache accepts.
	ErrTooLarge = errors.New("too large")
	// ErrBadDigest: the name is not a sha256 digest "sha256:<64 lowercase hex>".
	ErrBadDigest = errors.New("not a sha256 digest")
	// ErrStalled: no byte came for the stall limit; the link's fault, not the blob's.
	ErrStalled = errors.New("fetch stalled")
)

// Source gives a blob's bytes by its digest. Fetch writes the blob named d (already checked to
// be a sha256 digest) to w and returns how many bytes it wrote; a blob it does not hold is an
// error wrapping ErrNotFound, worded for an operator (where it looked, how to put it there; the
// cache's error names the digest before it).
// It need not verify the bytes: the cache does. An error from w must be returned as it is (the
// cache stops an oversized blob through it).
type Source interface {
	Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error)
}

// Cache is a verified local cache of blobs filled from one Source. It implements apply.Blobs
// and is safe for concurrent use: concurrent Opens of one digest fetch it once.
type Cache struct {
	dir   string
	src   Source
	max   int64
	stall time.Duration

	mu       sync.Mutex
	inflight map[digest.Digest]*fetch
}

// fetch is one fetch in progress; done closes when err is set.
type fetch struct {
	done chan struct{}
	err  error
}

// Config is what New takes; a zero field means its default (withDefaults).
type Config struct {
	// MaxSize is the largest blob the cache fetches (default DefaultMaxSize).
	MaxSize int64
	// Stall is how long a fetch may go without a byte before it fails (default DefaultStall).
	Stall time.Duration
}

// withDefaults returns c with every zero (or negative) field at its default.
func (c Config) withDefaults() Config {
	if c.MaxSize <= 0 {
		c.MaxSize = DefaultMaxSize
	}
	if c.Stall <= 0 {
		c.Stall = DefaultStall
	}
	return c
}

// New is the cache in dir (created, 0700, when a blob is first fetched) filled from src. A nil
// src fetches nothing: every blob not already cached is reported missing.
func New(dir string, src Source, cfg Config) *Cache {
	cfg = cfg.withDefaults()
	return &Cache{dir: dir, src: src, max: cfg.MaxSize, stall: cfg.Stall, inflight: map[digest.Digest]*fetch{}}
}

// Parse checks that s is a sha256 digest, "sha256:" and 64 lowercase hex digits, the only kind
// a declaration may name.
func Parse(s string) (digest.Digest, error) {
	d, err := digest.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w (want sha256:<64 lowercase hex digits>): %v", text.Bound(s), ErrBadDigest, err)
	}
	if d.Algorithm() != digest.SHA256 {
		return "", fmt.Errorf("%q: %w: algorithm %s is not accepted, only sha256", text.Bound(s), ErrBadDigest, text.Bound(d.Algorithm().String()))
	}
	return d, nil
}

// Path is where the cache keeps the blob named d (which Open validated).
func (c *Cache) Path(d digest.Digest) string {
	return filepath.Join(c.dir, d.Algorithm().String(), d.Encoded())
}

// Open returns the blob named digest, from the cache, or fetched from the source, verified and
// cached first. The caller closes it. It is an *os.File: a caller that needs a path (dpkg -i)
// may use its Name, the cached copy, while it holds it open.
func (c *Cache) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	d, err := Parse(name)
	if err != nil {
		return nil, fmt.Errorf("blob %w", err)
	}
	for {
		if f, err := os.Open(c.Path(d)); err == nil {
			return f, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("blob %s: open the cached copy: %w", d, err)
		}
		c.mu.Lock()
		f, ok := c.inflight[d]
		if !ok {
			f = &fetch{done: make(chan struct{})}
			c.inflight[d] = f
			c.mu.Unlock()
			f.err = c.fetch(ctx, d)
			c.mu.Lock()
			delete(c.inflight, d)
			c.mu.Unlock()
			close(f.done)
		} else {
			c.mu.Unlock()
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("blob %s: %w", d, ctx.Err())
		}
		if f.err != nil {
			// Another caller's fetch ended with its own context: ours may still try.
			if ok && ctx.Err() == nil && (errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded)) {
				continue
			}
			return nil, f.err
		}
		// Fetched and renamed into place: open it on the next turn.
	}
}

// fetch copies the blob named d from the source into the cache, verified.
func (c *Cache) fetch(ctx context.Context, d digest.Digest) error {
	if c.src == nil {
		return fmt.Errorf("blob %s: %w: it is not in the cache %s and there is no source to fetch it from", d, ErrNotFound, c.dir)
	}
	dir := filepath.Dir(c.Path(d))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("blob %s: create the cache directory: %w", d, err)
	}
	tmp, err := atomicfile.Create(dir, 0o600)
	if err != nil {
		return fmt.Errorf("blob %s: create a file in the cache: %w", d, err)
	}
	w := &limited{w: tmp, v: d.Verifier(), max: c.max}
	n, err := c.watched(ctx, d, w)
	switch {
	case errors.Is(err, ErrStalled):
		tmp.Abort()
		return fmt.Errorf("blob %s: %w: no byte for %s after %d bytes; the link may be down, and the next reconcile tries again", d, ErrStalled, c.stall, w.n)
	case w.over:
		tmp.Abort()
		return fmt.Errorf("blob %s: %w: more than %d bytes, the most this host fetches", d, ErrTooLarge, c.max)
	case errors.Is(err, ErrTooLarge): // the source knew the size first
		tmp.Abort()
		return fmt.Errorf("blob %s: %w, more than %d bytes, the most this host fetches", d, err, c.max)
	case err != nil:
		tmp.Abort()
		return fmt.Errorf("blob %s: %w", d, err)
	case w.err != nil:
		tmp.Abort()
		return fmt.Errorf("blob %s: write the cache: %w", d, w.err)
	}
	if !w.v.Verified() || n != w.n {
		// Only bytes that do not match are hashed again, to name them: the digest a
		// declaration or a bundle's lock should have named is what the operator needs.
		got := readDigest(tmp.Name())
		tmp.Abort()
		return fmt.Errorf("blob %s: %w: the %d bytes fetched are %s; put the right file in the source again, or fix the digest the declaration names", d, ErrDigestMismatch, w.n, got)
	}
	if err := tmp.Commit(c.Path(d)); err != nil {
		return fmt.Errorf("blob %s: write the cache: %w", d, err)
	}
	return nil
}

// readDigest is the digest of the file at path, or "unreadable" and why.
func readDigest(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("unreadable (%v)", err)
	}
	defer f.Close()
	d, err := digest.SHA256.FromReader(f)
	if err != nil {
		return fmt.Sprintf("unreadable (%v)", err)
	}
	return d.String()
}

// watched runs the source's fetch, cancelling it when no byte arrives for the stall limit; the
// error then wraps ErrStalled.
func (c *Cache) watched(ctx context.Context, d digest.Digest, w *limited) (int64, error) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w.touch()
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(max(c.stall/4, time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if time.Since(time.Unix(0, w.last.Load())) >= c.stall {
					cancel(ErrStalled)
					return
				}
			}
		}
	}()
	n, err := c.src.Fetch(fctx, d, w)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(fctx), ErrStalled) {
		return n, ErrStalled
	}
	return n, err
}

// limited writes to w while verifying, and fails once more than max bytes come.
type limited struct {
	w    io.Writer
	v    digest.Verifier
	max  int64
	n    int64
	over bool
	err  error        // w's own error, which the source may hide behind its own
	last atomic.Int64 // when the last byte came, Unix nanoseconds
}

func (l *limited) touch() { l.last.Store(time.Now().UnixNano()) }

func (l *limited) Write(p []byte) (int, error) {
	if l.n+int64(len(p)) > l.max {
		l.over = true
		return 0, ErrTooLarge
	}
	l.touch()
	n, err := l.w.Write(p)
	l.v.Write(p[:n])
	l.n += int64(n)
	if err != nil {
		l.err = err
	}
	return n, err
}

// Prune removes every cached blob whose digest keep does not hold (keys "sha256:<hex>"), and
// temporary files a crash left, unless a fetch is under way. It returns how many blobs it
// removed. A removed blob is fetched again if it is named later.
func (c *Cache) Prune(keep map[string]bool) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	dir := filepath.Join(c.dir, digest.SHA256.String())
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("prune blobs: %w", err)
	}
	removed := 0
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tempPrefix) {
			if len(c.inflight) > 0 {
				continue // it may be a fetch's
			}
		} else if keep[digest.SHA256.String()+":"+name] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if !strings.HasPrefix(name, tempPrefix) {
			removed++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("prune blobs: %w", err)
	}
	return removed, nil
}
