// Package blobs puts files on the bus for declarations to name by digest.
//
// They are a file's, an archive's or a package's `source`. Each goes into the blobs object store
// (wire.Names.Blobs) under the name of its own digest, "sha256:<hex>", where a host's cache
// (host/blobs) fetches and verifies it.
package blobs

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/ctxio"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// HostMaxSize is the largest blob a host fetches by default (host/blobs.DefaultMaxSize; a test
// there keeps the two equal). Put says so when a file is larger.
const HostMaxSize int64 = 1 << 30

// Put is what Put did.
type Put struct {
	Digest  digest.Digest // the object's name, what a declaration's source names
	Size    int64
	Bucket  string
	Already bool // the store held exactly these bytes already; nothing was sent
}

// PutFile puts the file at path into names.Blobs(), creating the object store if it is missing
// (bus.BlobsConfig), under the name of its sha256 digest. It is idempotent: an object of that
// name holding the same bytes (the object store's own size and digest say so) is left alone. The
// file is hashed once to learn its name and again as it is sent; if it changed in between, the
// object is removed again and the put refused.
func PutFile(ctx context.Context, js jetstream.JetStream, names wire.Names, path string) (Put, error) {
	f, err := os.Open(path)
	if err != nil {
		return Put{}, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return Put{}, err
	} else if !fi.Mode().IsRegular() {
		return Put{}, fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	size, err := io.Copy(h, ctxio.Reader(ctx, f))
	if err != nil {
		return Put{}, fmt.Errorf("read %s: %w", path, err)
	}
	d := digest.NewDigestFromBytes(digest.SHA256, h.Sum(nil))
	want, _ := wire.ObjectStoreDigest(d)
	p := Put{Digest: d, Size: size, Bucket: names.Blobs()}

	obs, err := Store(ctx, js, names, true)
	if err != nil {
		return p, err
	}
	info, err := obs.GetInfo(ctx, d.String())
	switch {
	case err == nil && info.Digest == want && int64(info.Size) == size:
		p.Already = true
		return p, nil
	case err != nil && !errors.Is(err, jetstream.ErrObjectNotFound):
		return p, fmt.Errorf("look up %s in object store %s: %w", d, p.Bucket, err)
	}
	// Absent, or an object under this name that does not hold these bytes: (re)place it.
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return p, fmt.Errorf("read %s: %w", path, err)
	}
	v := d.Verifier()
	info, err = obs.Put(ctx, jetstream.ObjectMeta{Name: d.String(), Description: "mesh blob"}, io.TeeReader(ctxio.Reader(ctx, f), v))
	if err != nil {
		return p, fmt.Errorf("put %s into object store %s: %w", path, p.Bucket, err)
	}
	if !v.Verified() || info.Digest != want || int64(info.Size) != size {
		_ = obs.Delete(ctx, d.String())
		return p, fmt.Errorf("%s changed while it was put (it was %s, %d bytes; then other bytes, %d); put it again once it is written", path, d, size, info.Size)
	}
	return p, nil
}

// Store is the blobs object store, created first (bus.BlobsConfig) when create is set and it is
// missing.
func Store(ctx context.Context, js jetstream.JetStream, names wire.Names, create bool) (jetstream.ObjectStore, error) {
	obs, err := js.ObjectStore(ctx, names.Blobs())
	if create && (errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound)) {
		cfg := bus.BlobsConfig(names)
		if cfg.Replicas, err = bus.Replicas(ctx, js, names); err != nil {
			return nil, err
		}
		obs, err = js.CreateObjectStore(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // made meanwhile by another put
			obs, err = js.ObjectStore(ctx, names.Blobs())
		}
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("object store %s does not exist on this bus; `mesh-release blob put FILE` or `mesh-release init` creates it: %w", names.Blobs(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", names.Blobs(), err)
	}
	return obs, nil
}

// Blob is one object in the blobs store.
type Blob struct {
	Name     string `json:"name"` // the digest, for a blob put by PutFile
	Size     uint64 `json:"size"`
	Modified string `json:"modified"`
}

// List is every blob in names.Blobs(), sorted by name; none when the store does not exist.
func List(ctx context.Context, js jetstream.JetStream, names wire.Names) ([]Blob, error) {
	obs, err := js.ObjectStore(ctx, names.Blobs())
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", names.Blobs(), err)
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list object store %s: %w", names.Blobs(), err)
	}
	out := make([]Blob, 0, len(infos))
	for _, i := range infos {
		out = append(out, Blob{Name: i.Name, Size: i.Size, Modified: i.ModTime.UTC().Format("2006-01-02T15:04:05Z")})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}
