package deliver

import (
	"context"
	"crypto/ed25519"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// deliveryPermissions are the subjects decision 0011 lets a node use to deliver a release, and
// no others: stream info of the releases bucket and the archive store, direct gets of a
// manifest and of an archive's metadata, a consumer filtered to an archive's chunks, flow
// control replies, and receiving on its own inbox prefix.
func deliveryPermissions(n wire.Names, node string) (publish, subscribe []string) {
	releases, archives := "KV_"+n.Releases(), "OBJ_"+n.Archives()
	return []string{
			"$JS.API.STREAM.INFO." + releases,
			"$JS.API.DIRECT.GET." + releases + ".$KV." + n.Releases() + ".>",
			"$JS.API.STREAM.INFO." + archives,
			"$JS.API.DIRECT.GET." + archives + ".$O." + n.Archives() + ".M.*",
			"$JS.API.CONSUMER.CREATE." + archives + ".*.$O." + n.Archives() + ".C.*",
			"$JS.FC." + archives + ".>",
		},
		[]string{wire.NodeInboxPrefix(node) + ".>"}
}

// A node delivers a release with only the permissions its user has. The one request it makes
// and may not (nats.go deletes an object fetch's consumer when the fetch ends) is refused, and
// holds nothing up: nats.go makes it from the subscription's own goroutine after the reader had
// the last chunk. The server removes the consumer itself.
func TestDeliverWorksWithOnlyANodesPermissions(t *testing.T) {
	n := wire.NamesFor("")
	pub, sub := deliveryPermissions(n, "n1")
	b := meshtest.StartNodeUserBus(t, n, pub, sub)
	js, refused := b.ConnectNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := t.TempDir()
	rec, _, err := rollback.OpenForLauncher(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	h := &harness{t: t, js: b.Admin, root: root, priv: meshtest.ReleaseKey.Private, records: rec}
	h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
	d, err := New(Config{Root: root, JS: js, TrustedKeys: []ed25519.PublicKey{meshtest.ReleaseKey.Public}, Records: rec, PreflightTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Deliver(ctx, v1, nil); err != nil {
		t.Fatalf("deliver with a node's permissions: %v", err)
	}
	if !d.Have(v1) {
		t.Fatal("not staged")
	}
	time.Sleep(200 * time.Millisecond) // the fetch's consumer delete, refused, is reported asynchronously
	for _, r := range refused() {
		if !strings.Contains(r, `"$JS.API.CONSUMER.DELETE.OBJ_`+n.Archives()+`.`) {
			t.Errorf("delivery used a subject a node may not: %s", r)
		}
	}
}
