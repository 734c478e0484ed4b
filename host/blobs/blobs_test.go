package blobs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/blobs"
	rblobs "github.com/novox/mesh-host/release/blobs"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// counting wraps a real source and counts its fetches; gate, when set, holds each fetch until
// it is closed (to have callers meet one fetch in progress).
type counting struct {
	src     blobs.Source
	fetches atomic.Int32
	gate    chan struct{}
}

func (c *counting) Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	c.fetches.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return c.src.Fetch(ctx, d, w)
}

// put stores body on the bus as `mesh-release blob put` does and returns its digest.
func put(t *testing.T, js jetstream.JetStream, body []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(f, body, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := rblobs.PutFile(t.Context(), js, wire.NamesFor(""), f)
	if err != nil {
		t.Fatal(err)
	}
	return p.Digest.String()
}

func read(t *testing.T, c *blobs.Cache, d string) []byte {
	t.Helper()
	r, err := c.Open(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// files lists every file below dir (relative), temporary ones included.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

// A blob on the bus is fetched once, verified, and kept as dir/sha256/<hex> (0600); the next
// Open reads the cache and does not ask the bus.
func TestABlobIsFetchedFromTheBusOnceAndThenReadFromTheCache(t *testing.T) {
	b := meshtest.StartBus(t)
	body := bytes.Repeat([]byte("0123456789"), 50_000) // several chunks
	d := put(t, b.Conn.JS, body)
	src := &counting{src: blobs.Bus(b.Conn.JS, b.Names.Blobs(), nil)}
	dir := t.TempDir()
	c := blobs.New(dir, src, blobs.Config{})
	if got := read(t, c, d); !bytes.Equal(got, body) {
		t.Fatalf("read %d bytes, want the %d put", len(got), len(body))
	}
	hex := strings.TrimPrefix(d, "sha256:")
	if got := files(t, dir); len(got) != 1 || got[0] != filepath.Join("sha256", hex) {
		t.Errorf("the cache holds %q, want only sha256/%s", got, hex)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sha256", hex)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the cached blob: %v, %v; want mode 0600", fi, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "sha256")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the cache directory: %v, %v; want mode 0700", fi, err)
	}
	if got := read(t, c, d); !bytes.Equal(got, body) {
		t.Fatal("the second read differs")
	}
	// A new cache on the same directory (the host restarted) reads it too.
	if got := read(t, blobs.New(dir, src, blobs.Config{}), d); !bytes.Equal(got, body) {
		t.Fatal("the read after a restart differs")
	}
	if n := src.fetches.Load(); n != 1 {
		t.Errorf("%d fetches from the bus, want 1", n)
	}
}

// Every way a blob can be wrong is refused with an error naming the digest, wrapping the kind of
// fault, and nothing is left in the cache.
func TestAWrongBlobIsRefusedAndLeavesNothing(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := t.Context()
	small := put(t, b.Conn.JS, []byte("small"))
	large := put(t, b.Conn.JS, bytes.Repeat([]byte("x"), 4096))
	// An object put by hand under a digest that is not its own.
	forged := digest.FromString("what the declaration pins").String()
	obs, err := b.Conn.JS.ObjectStore(ctx, b.Names.Blobs())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, forged, []byte("something else")); err != nil {
		t.Fatal(err)
	}
	missing := digest.FromString("never put").String()
	bundle := t.TempDir()
	bundleForged := digest.FromString("the bundle's pin").String()
	writeBundleBlob(t, bundle, bundleForged, []byte("not it"))
	bus := blobs.Bus(b.Conn.JS, b.Names.Blobs(), nil)

	for _, tc := range []struct {
		name   string
		src    blobs.Source
		cfg    blobs.Config
		digest string
		kind   error
		says   []string
	}{
		{"an object whose store digest is not its name", bus, blobs.Config{}, forged, blobs.ErrDigestMismatch,
			[]string{forged, b.Names.Blobs(), "put the file again"}},
		{"a bundle file whose bytes are not its name", blobs.Dir(bundle), blobs.Config{}, bundleForged, blobs.ErrDigestMismatch,
			[]string{bundleForged, digest.FromString("not it").String()}},
		{"a blob not on the bus", bus, blobs.Config{}, missing, blobs.ErrNotFound,
			[]string{missing, b.Names.Blobs(), "mesh-release blob put FILE"}},
		{"a blob not in the bundle", blobs.Dir(bundle), blobs.Config{}, missing, blobs.ErrNotFound,
			[]string{missing, filepath.Join(bundle, "blobs", "sha256", strings.TrimPrefix(missing, "sha256:"))}},
		{"a bus blob over the limit, refused before it is fetched", bus, blobs.Config{MaxSize: 1000}, large, blobs.ErrTooLarge,
			[]string{large, "4096 bytes", "more than 1000 bytes"}},
		{"a blob over the limit from a source that cannot tell its size first", streamOnly{bus}, blobs.Config{MaxSize: 1000}, large, blobs.ErrTooLarge,
			[]string{large, "more than 1000 bytes"}},
		{"no source and not cached", nil, blobs.Config{}, small, blobs.ErrNotFound, []string{small, "no source"}},
		{"a digest of another algorithm", bus, blobs.Config{}, "sha512:" + strings.Repeat("ab", 64), blobs.ErrBadDigest, []string{"sha512", "only sha256"}},
		{"a digest in upper case", bus, blobs.Config{}, strings.ToUpper(small), blobs.ErrBadDigest, []string{"sha256:<64 lowercase hex digits>"}},
		{"no digest at all", bus, blobs.Config{}, "../../etc/passwd", blobs.ErrBadDigest, []string{`"../../etc/passwd"`}},
		{"a digest too long, bounded in the error", bus, blobs.Config{}, small + strings.Repeat("f", 10_000), blobs.ErrBadDigest, []string{"sha256:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := blobs.New(dir, tc.src, tc.cfg)
			r, err := c.Open(ctx, tc.digest)
			if err == nil {
				r.Close()
				t.Fatal("opened")
			}
			t.Logf("%v", err)
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %v, want one wrapping %v", err, tc.kind)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if len(err.Error()) > 2000 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			if got := files(t, dir); len(got) != 0 {
				t.Errorf("left in the cache: %q", got)
			}
		})
	}
}

// streamOnly hides the cache's limit from the source, as a source that cannot learn a blob's
// size before sending it: the cache's own bound stops the copy.
type streamOnly struct{ src blobs.Source }

func (s streamOnly) Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	return s.src.Fetch(ctx, d, struct{ io.Writer }{w})
}

func writeBundleBlob(t *testing.T, bundle, d string, body []byte) {
	t.Helper()
	p := filepath.Join(bundle, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A bundle's blobs come from <bundle>/blobs/sha256/<hex>, beside substrate.lock, verified and
// cached like the bus's.
func TestABundleBlobIsReadFromTheBundleDirectory(t *testing.T) {
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "substrate.lock"), []byte(`{"version": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	body := []byte("#!/bin/sh\necho hello\n")
	d := digest.FromBytes(body).String()
	writeBundleBlob(t, bundle, d, body)
	src := &counting{src: blobs.Dir(bundle)}
	dir := t.TempDir()
	c := blobs.New(dir, src, blobs.Config{})
	for range 2 {
		if got := read(t, c, d); !bytes.Equal(got, body) {
			t.Fatalf("read %q, want %q", got, body)
		}
	}
	if n := src.fetches.Load(); n != 1 {
		t.Errorf("%d reads of the bundle, want 1", n)
	}
	if got := files(t, dir); len(got) != 1 {
		t.Errorf("the cache holds %q, want the one blob", got)
	}
}

// Many Opens of one blob at once fetch it once, and each gets the whole blob.
func TestConcurrentOpensOfOneBlobFetchItOnce(t *testing.T) {
	b := meshtest.StartBus(t)
	body := bytes.Repeat([]byte("concurrent "), 30_000)
	d := put(t, b.Conn.JS, body)
	src := &counting{src: blobs.Bus(b.Conn.JS, b.Names.Blobs(), nil), gate: make(chan struct{})}
	c := blobs.New(t.TempDir(), src, blobs.Config{})
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			r, err := c.Open(t.Context(), d)
			if err != nil {
				errs <- err
				return
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err == nil && !bytes.Equal(got, body) {
				err = errors.New("a reader got other bytes")
			}
			if err != nil {
				errs <- err
			}
		})
	}
	// The first fetch is held until every caller has started; the rest wait on it or, coming
	// later, find the blob cached.
	meshtest.Eventually(t, "the first fetch to start", func() bool { return src.fetches.Load() == 1 })
	close(src.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := src.fetches.Load(); got != 1 {
		t.Errorf("%d fetches, want 1", got)
	}
}

// A caller waiting on another's fetch is not failed by that caller giving up: it fetches itself.
func TestAWaiterFetchesItselfWhenTheFetchItWaitedOnIsCancelled(t *testing.T) {
	b := meshtest.StartBus(t)
	body := []byte("patience")
	d := put(t, b.Conn.JS, body)
	src := &counting{src: blobs.Bus(b.Conn.JS, b.Names.Blobs(), nil), gate: make(chan struct{})}
	dir := t.TempDir()
	c := blobs.New(dir, src, blobs.Config{})
	first, cancel := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Open(first, d)
		firstErr <- err
	}()
	meshtest.Eventually(t, "the first fetch to start", func() bool { return src.fetches.Load() == 1 })
	second := make(chan []byte, 1)
	go func() {
		r, err := c.Open(t.Context(), d)
		if err != nil {
			t.Error(err)
			second <- nil
			return
		}
		defer r.Close()
		got, _ := io.ReadAll(r)
		second <- got
	}()
	cancel()
	if err := <-firstErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled Open: %v, want context.Canceled", err)
	}
	// The second caller may have joined the cancelled fetch or started its own; either way it
	// fetches (held by the gate until released).
	meshtest.Eventually(t, "the second fetch to start", func() bool { return src.fetches.Load() == 2 })
	close(src.gate)
	if got := <-second; !bytes.Equal(got, body) {
		t.Errorf("the waiter read %q, want %q", got, body)
	}
}

// Prune removes the blobs no longer named and temporary files a crash left, and keeps the rest.
func TestPruneRemovesWhatIsNoLongerNamed(t *testing.T) {
	bundle := t.TempDir()
	keep, drop := []byte("keep me"), []byte("drop me")
	dk, dd := digest.FromBytes(keep).String(), digest.FromBytes(drop).String()
	writeBundleBlob(t, bundle, dk, keep)
	writeBundleBlob(t, bundle, dd, drop)
	dir := t.TempDir()
	c := blobs.New(dir, blobs.Dir(bundle), blobs.Config{})
	read(t, c, dk)
	read(t, c, dd)
	crash := filepath.Join(dir, "sha256", ".tmp-123")
	if err := os.WriteFile(crash, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := c.Prune(map[string]bool{dk: true})
	if err != nil || n != 1 {
		t.Fatalf("pruned %d, %v; want 1", n, err)
	}
	if got := files(t, dir); len(got) != 1 || got[0] != filepath.Join("sha256", strings.TrimPrefix(dk, "sha256:")) {
		t.Errorf("left %q, want only the kept blob", got)
	}
	if n, err := blobs.New(t.TempDir(), nil, blobs.Config{}).Prune(nil); n != 0 || err != nil {
		t.Errorf("prune of an empty cache: %d, %v", n, err)
	}
}

// The release side warns about blobs hosts refuse by default: its figure is the host's.
func TestTheReleaseSideKnowsTheHostsLimit(t *testing.T) {
	if rblobs.HostMaxSize != blobs.DefaultMaxSize {
		t.Errorf("release/blobs.HostMaxSize %d, host/blobs.DefaultMaxSize %d", rblobs.HostMaxSize, blobs.DefaultMaxSize)
	}
}

// sourceFunc is a source made of a function: a link that stalls, or trickles, which a real bus
// cannot be made to do on cue.
type sourceFunc func(ctx context.Context, d digest.Digest, w io.Writer) (int64, error)

func (f sourceFunc) Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	return f(ctx, d, w)
}

// A fetch that stops sending fails as stalled (the link's fault, not the blob's) and leaves
// nothing; one that keeps sending, however slowly, is not cut off.
func TestAStalledFetchFailsAndASlowOneDoesNot(t *testing.T) {
	body := []byte("0123456789")
	d := digest.FromBytes(body).String()
	stalled := sourceFunc(func(ctx context.Context, _ digest.Digest, w io.Writer) (int64, error) {
		n, _ := w.Write(body[:3])
		<-ctx.Done() // a link gone quiet
		return int64(n), ctx.Err()
	})
	dir := t.TempDir()
	_, err := blobs.New(dir, stalled, blobs.Config{Stall: 100 * time.Millisecond}).Open(t.Context(), d)
	if !errors.Is(err, blobs.ErrStalled) || errors.Is(err, blobs.ErrDigestMismatch) || !strings.Contains(err.Error(), "after 3 bytes") {
		t.Errorf("stalled: %v, want ErrStalled after 3 bytes", err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Errorf("left in the cache: %q", got)
	}
	slow := sourceFunc(func(ctx context.Context, _ digest.Digest, w io.Writer) (int64, error) {
		for i := range body {
			time.Sleep(60 * time.Millisecond) // in all twice the stall limit, each gap well under it
			if _, err := w.Write(body[i : i+1]); err != nil {
				return int64(i), err
			}
		}
		return int64(len(body)), nil
	})
	if got := read(t, blobs.New(t.TempDir(), slow, blobs.Config{Stall: 300 * time.Millisecond}), d); !bytes.Equal(got, body) {
		t.Errorf("slow: read %q", got)
	}
}
