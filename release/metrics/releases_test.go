package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The releases bucket holds roots (root.<n>) and the bus document beside the manifests: only a
// version's key counts as a release published.
func TestReleasesPublishedCountsVersionsNotRootsOrTheBusDocument(t *testing.T) {
	b := meshtest.StartBus(t)
	for _, k := range []string{"v1.2.0", "v1.3.0", wire.RootKey(1), wire.RootKey(2), "bus"} {
		b.Put(b.Names.Releases(), k, []byte("{}"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := countReleases(ctx, b.Conn.JS, b.Names)
	if err != nil || n != 2 {
		t.Fatalf("countReleases = %d, %v; want the 2 versions", n, err)
	}
}
