package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/apply/action"
	"github.com/novox/mesh-host/host/apply/containers"
	"github.com/novox/mesh-host/host/apply/debian"
	"github.com/novox/mesh-host/host/apply/files"
	"github.com/novox/mesh-host/host/apply/systemd"
	"github.com/novox/mesh-host/host/blobs"
	"github.com/novox/mesh-host/internal/ratelimit"
	"github.com/novox/mesh-host/wire"
)

// Appliers is every resource kind's applier for a host whose root is root, reading the blobs
// a declaration names from b; runtime is the container runtime the profile found working ("" for
// none), used for a container that names none. The service and `mesh-host apply` both use it
// (through NewEngine): one behaviour, two sources. A kind missing here is reported by each step
// as "no applier", never skipped.
func Appliers(root string, b apply.Blobs, runtime string) apply.Appliers {
	g := apply.NewGuard(root) // roots resolved once for this set of appliers
	return apply.Appliers{
		wire.KindDirectory: files.Directory(g),
		wire.KindFile:      files.File(g, b),
		wire.KindArchive:   files.Archive(g, b, root),
		wire.KindService:   systemd.Service(g),
		wire.KindPackage:   debian.Package(b),
		wire.KindContainer: containers.Container(containers.Options{Runtime: runtime}),
		// Only a trusted declaration (a local file or bundle) gets an action this far: the
		// link's parser refuses the kind.
		wire.KindAction: action.Action(),
	}
}

// NewEngine is the apply engine of a host at root: its appliers, its ledger (the store's owned
// table), its guard.
func NewEngine(root string, ledger apply.Ledger, b apply.Blobs, runtime string, log *slog.Logger, pulse func()) *apply.Engine {
	return &apply.Engine{Appliers: Appliers(root, b, runtime), Ledger: ledger, Guard: apply.NewGuard(root), Log: log, Pulse: pulse}
}

// NeedsRuntime says whether d declares a container, or the ledger still owns one: only then is
// the container runtime worth detecting (detection runs commands and may take seconds).
func NeedsRuntime(ctx context.Context, d wire.Declaration, ledger apply.Ledger) bool {
	for _, r := range d.Resources {
		if r.Type == wire.KindContainer {
			return true
		}
	}
	owned, err := ledger.Owned(ctx)
	if err != nil {
		return false // the apply reads the ledger again and says so
	}
	for _, o := range owned {
		if o.Type == wire.KindContainer {
			return true
		}
	}
	return false
}

// BlobsDir is the host's verified blob cache, ROOT/blobs.
func BlobsDir(root string) string { return filepath.Join(root, "blobs") }

// appliers' blobs: the cache under the root, filled over the link from the blobs object store,
// or, running disconnected, from nothing (a blob not cached yet cannot be had).
func (h *Host) blobs() apply.Blobs {
	var src blobs.Source = noSource{}
	if h.link != nil {
		src = blobs.Bus(h.link.JetStream(), wire.NamesFor(h.opts.Config.Prefix).Blobs(), h.link.LegacyCredentials)
		if rate := h.opts.Config.MaxFetchRate; rate > 0 {
			src = cappedSource{src: src, rate: rate}
		}
	}
	return blobs.New(BlobsDir(h.root), src, blobs.Config{})
}

// cappedSource fetches blobs no faster than max_fetch_rate: what it writes waits for the
// cap, which holds the fetch back (internal/ratelimit).
type cappedSource struct {
	src  blobs.Source
	rate int64
}

func (c cappedSource) Fetch(ctx context.Context, d digest.Digest, w io.Writer) (int64, error) {
	return c.src.Fetch(ctx, d, ratelimit.Writer(ctx, w, c.rate, nil))
}

// noSource is the blob source of a host with no bus configured.
type noSource struct{}

func (noSource) Fetch(_ context.Context, d digest.Digest, _ io.Writer) (int64, error) {
	return 0, fmt.Errorf("blob %s is not in the cache and this host has no bus to fetch it from (no nats_urls configured): %w", d, blobs.ErrNotFound)
}
