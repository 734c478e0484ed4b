package blobs_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/host/blobs"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// nodeConn starts a server in one account whose node user n1 may publish exactly publish (and
// receive below its inbox prefix), makes the mesh's buckets as admin, and returns the node's
// JetStream, the admin's, and the violations the server reported to the node.
func nodeConn(t *testing.T, publish []string) (node, admin jetstream.JetStream, violations func() []string) {
	t.Helper()
	b := meshtest.StartNodeUserBus(t, wire.NamesFor(""), publish, []string{wire.NodeInboxPrefix("n1") + ".>"})
	js, refused := b.ConnectNode(t)
	return js, b.Admin, refused
}

// nodePublish is what release/trust gives a node's user, in the one account of this server: the
// same subjects, with the account's own JetStream API prefix for the imported one.
func nodePublish() []string {
	var out []string
	for _, s := range trust.NodePermissions(wire.NamesFor(""), "n1").Pub.Allow {
		out = append(out, strings.Replace(s, wire.NodeJSAPIPrefix+".", "$JS.API.", 1))
	}
	return out
}

// A node fetches a blob with only its user's permissions and is refused nothing: the chunks come
// by direct gets, with no consumer to create or delete, and nothing is left on the server.
func TestANodeFetchesABlobWithOnlyItsPermissions(t *testing.T) {
	js, admin, violations := nodeConn(t, nodePublish())
	body := bytes.Repeat([]byte("node "), 100_000)
	d := put(t, admin, body)
	c := blobs.New(t.TempDir(), blobs.Bus(js, wire.NamesFor("").Blobs(), nil), blobs.Config{})
	r, err := c.Open(t.Context(), d)
	if err != nil {
		t.Fatalf("fetch with a node's permissions: %v", err)
	}
	r.Close()
	if err := js.Conn().Flush(); err != nil { // a refusal comes back before the flush does
		t.Fatal(err)
	}
	for _, v := range violations() {
		t.Errorf("the fetch used a subject a node may not: %s", v)
	}
	st, err := admin.Stream(t.Context(), "OBJ_"+wire.NamesFor("").Blobs())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Consumers != 0 {
		t.Errorf("the blobs store has consumers after the fetch: %v %v", info, err)
	}
}

// A node whose user predates the blobs bucket (archives only) is told why its fetch gets no
// answer, and what to do.
func TestANodeWithoutThePermissionIsToldToEnrolAgain(t *testing.T) {
	var old []string
	for _, s := range nodePublish() {
		if !strings.Contains(s, wire.NamesFor("").Blobs()) {
			old = append(old, s)
		}
	}
	js, admin, _ := nodeConn(t, old)
	d := put(t, admin, []byte("x"))
	c := blobs.New(t.TempDir(), blobs.Bus(js, wire.NamesFor("").Blobs(), nil), blobs.Config{})
	_, err := c.Open(context.Background(), d) // no deadline: jetstream's own timeout ends the request
	if err == nil || !strings.Contains(err.Error(), "mesh-host enrol --replace") {
		t.Errorf("error %v; want it to say the node must enrol again", err)
	}
}
