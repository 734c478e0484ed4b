package blobs_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"

	"github.com/novox/mesh-host/host/blobs"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A node fetches a blob with the credentials it has: with those from before decision 0022 by
// nats.go's obs.Get, whose consumer the server removes since the node may not (the one thing
// refused), and with today's by direct gets of the chunks, leaving no consumer and refused
// nothing (decision 0024).
func TestANodeFetchesABlobByConsumerWithLegacyCredentialsAndByDirectGetsWithTodays(t *testing.T) {
	for _, tc := range []struct {
		name      string
		perms     func(wire.Names, string) jwt.Permissions
		legacy    bool
		consumers int
	}{
		{"legacy credentials", meshtest.LegacyNodePermissions, true, 1},
		{"today's credentials", trust.NodePermissions, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartOperatorBus(t)
			creds, _ := b.NodeCreds(t, t.TempDir(), "n1", tc.perms(b.Names, "n1"))
			node := b.ConnectNode(t, creds, "n1")
			js := node.JS
			body := bytes.Repeat([]byte("legacy "), 100_000) // several chunks
			d := put(t, b.Admin.JS, body)
			c := blobs.New(t.TempDir(), blobs.Bus(js, b.Names.Blobs(), func() bool { return tc.legacy }), blobs.Config{})
			if got := read(t, c, d); !bytes.Equal(got, body) {
				t.Fatalf("read %d bytes, want the %d put", len(got), len(body))
			}
			for _, r := range node.Refused(t) {
				if !(tc.legacy && strings.Contains(r, ".API.CONSUMER.DELETE.")) {
					t.Errorf("the fetch used a subject the node may not: %s", r)
				}
			}
			st, err := b.Admin.JS.Stream(t.Context(), "OBJ_"+b.Names.Blobs())
			if err != nil {
				t.Fatal(err)
			}
			if info, err := st.Info(t.Context()); err != nil || info.State.Consumers != tc.consumers {
				t.Errorf("consumers on the blobs store after the fetch: %+v %v, want %d", info.State, err, tc.consumers)
			}
		})
	}
}
