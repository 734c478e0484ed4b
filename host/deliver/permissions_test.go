package deliver

import (
	"context"
	"crypto/ed25519"
	"runtime"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// deliveryPermissions are the subjects decisions 0011 and 0022 let a node use to deliver a
// release, and no others: stream info of the releases bucket and the archive store, direct gets
// of a manifest, of an archive's metadata and of the archive store's messages (the chunks), and
// receiving on its own inbox prefix. No consumer: a node creates none.
func deliveryPermissions(n wire.Names, node string) (publish, subscribe []string) {
	releases, archives := "KV_"+n.Releases(), "OBJ_"+n.Archives()
	return []string{
			"$JS.API.STREAM.INFO." + releases,
			"$JS.API.DIRECT.GET." + releases + ".$KV." + n.Releases() + ".>",
			"$JS.API.STREAM.INFO." + archives,
			"$JS.API.DIRECT.GET." + archives + ".$O." + n.Archives() + ".M.*",
			"$JS.API.DIRECT.GET." + archives,
		},
		[]string{wire.NodeInboxPrefix(node) + ".>"}
}

// A node delivers a release with only the permissions its user has, and is refused nothing: the
// archive comes by direct gets of its chunks, with no consumer to create or delete.
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
	if err := js.Conn().Flush(); err != nil { // a refusal comes back before the flush does
		t.Fatal(err)
	}
	for _, r := range refused() {
		t.Errorf("delivery used a subject a node may not: %s", r)
	}
	st, err := b.Admin.Stream(ctx, "OBJ_"+n.Archives())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Consumers != 0 {
		t.Errorf("the archive store has consumers after the fetch: %v %v", info, err)
	}
}
