package blobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/ctxio"
	"github.com/novox/mesh-host/internal/objfetch"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// limiter is what the cache's writer tells a source that can learn a blob's size before
// fetching it: the most it accepts, so an oversized blob is refused without being fetched.
type limiter interface{ Limit() int64 }

// Limit is the most bytes l accepts.
func (l *limited) Limit() int64 { return l.max }

// Bus is the blobs object store bucket (wire.Names.Blobs) read through js, the host's link:
// the object named by the digest string ("sha256:<hex>"), as `mesh-release blob put` stores
// it. A node reads it with the same permissions as the archives bucket (stream info, a direct
// get of its metadata, direct gets of its chunks, no consumer (internal/objfetch); release/trust.NodePermissions).
// Before fetching it checks the object store's own record of the object's size and digest;
// nats.go checks the chunks against that digest as they arrive, and the cache checks them
// against the name. legacy (nil: never) reports whether the node's user still has the
// permissions from before decision 0022 (link.Link.LegacyCredentials): then the chunks come
// with nats.go's obs.Get, an ordered consumer, the one way such a user may read them.
func Bus(js jetstream.JetStream, bucket string, legacy func() bool) Source {
	return busSource{js: js, bucket: bucket, legacy: legacy}
}

type busSource struct {
	js     jetstream.JetStream
	bucket string
	legacy func() bool
}

func (b busSource) Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	obs, err := b.js.ObjectStore(ctx, b.bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("%w: object store %s does not exist on the bus; create it with `mesh-release init` and publish the blob with `mesh-release blob put FILE`: %w", ErrNotFound, b.bucket, err)
	}
	if err != nil && ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)) {
		// The server drops a request the user may not make and answers nothing.
		return 0, fmt.Errorf("open object store %s: no answer; if the link is up, this node's user may not read it — a node enrolled before blobs existed must enrol again (`mesh-host enrol --replace TOKEN`): %w", b.bucket, err)
	}
	if err != nil {
		return 0, fmt.Errorf("open object store %s: %w", b.bucket, err)
	}
	info, err := obs.GetInfo(ctx, d.String())
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, fmt.Errorf("%w: object store %s has no object of that name; publish it with `mesh-release blob put FILE`", ErrNotFound, b.bucket)
	}
	if err != nil {
		return 0, fmt.Errorf("get it from object store %s: %w", b.bucket, err)
	}
	if want, _ := wire.ObjectStoreDigest(d); info.Digest != want {
		return 0, fmt.Errorf("%w: object store %s holds other bytes under that name (the store's digest of them is %s, the name's %s); it was not put by `mesh-release blob put` — put the file again", ErrDigestMismatch, b.bucket, text.Bound(info.Digest), want)
	}
	if l, ok := w.(limiter); ok && int64(info.Size) > l.Limit() {
		return 0, fmt.Errorf("%w: object store %s holds it as %d bytes", ErrTooLarge, b.bucket, info.Size)
	}
	res, err := b.open(ctx, obs, info)
	if err != nil {
		return 0, fmt.Errorf("get it from object store %s: %w", b.bucket, err)
	}
	defer res.Close()
	n, err := io.Copy(w, res)
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		return n, fmt.Errorf("%w: its chunks in object store %s do not match the store's own digest of it; put the file again", ErrDigestMismatch, b.bucket)
	}
	if err != nil {
		return n, fmt.Errorf("fetch it from object store %s: %w", b.bucket, err)
	}
	return n, nil
}

// open starts reading the object info describes: by direct gets of its chunks, no consumer, as a
// node may create none (docs/security.md); with legacy credentials, by obs.Get (decision 0024).
func (b busSource) open(ctx context.Context, obs jetstream.ObjectStore, info *jetstream.ObjectInfo) (io.ReadCloser, error) {
	if b.legacy != nil && b.legacy() {
		return obs.Get(ctx, info.Name)
	}
	return objfetch.Open(ctx, b.js, b.bucket, info)
}

// Dir is a bundle directory's blobs: path/blobs/sha256/<hex>, beside the bundle's
// substrate.lock. The cache verifies what it reads.
func Dir(path string) Source { return dirSource(path) }

type dirSource string

func (s dirSource) Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	p := filepath.Join(string(s), "blobs", d.Algorithm().String(), d.Encoded())
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%w: the bundle has no %s; put the file the declaration names there", ErrNotFound, p)
	}
	if err != nil {
		return 0, fmt.Errorf("read the bundle's blob: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return 0, fmt.Errorf("read the bundle's blob: %w", err)
	} else if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, p)
	} else if l, ok := w.(limiter); ok && fi.Size() > l.Limit() {
		return 0, fmt.Errorf("%w: %s is %d bytes", ErrTooLarge, p, fi.Size())
	}
	n, err := io.Copy(w, ctxio.Reader(ctx, f))
	if err != nil {
		return n, fmt.Errorf("read %s: %w", p, err)
	}
	return n, nil
}
