package deliver

import (
	"context"
	"crypto/ed25519"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A node fetches an archive with the credentials it has: with those from before decision 0022
// (LegacyCredentials) by nats.go's obs.Get, whose consumer the server removes since the node
// may not (the one thing refused), and with today's by direct gets of the chunks, leaving no
// consumer and refused nothing (decision 0024).
func TestANodeFetchesAnArchiveByConsumerWithLegacyCredentialsAndByDirectGetsWithTodays(t *testing.T) {
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
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			root := t.TempDir()
			rec, _, err := rollback.OpenForLauncher(ctx, root)
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Close()
			h := &harness{t: t, js: b.Admin.JS, root: root, priv: meshtest.ReleaseKey.Private, records: rec}
			h.release(v1, fakehost(t, v1, "ok", runtime.GOARCH))
			d, err := New(Config{Root: root, JS: js, TrustedKeys: []ed25519.PublicKey{meshtest.ReleaseKey.Public}, Records: rec,
				PreflightTimeout: 5 * time.Second, LegacyCredentials: func() bool { return tc.legacy }})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Deliver(ctx, v1, nil); err != nil {
				t.Fatalf("deliver: %v", err)
			}
			if !d.Have(v1) {
				t.Fatal("not staged")
			}
			for _, r := range node.Refused(t) {
				if !(tc.legacy && strings.Contains(r, ".API.CONSUMER.DELETE.")) {
					t.Errorf("the fetch used a subject the node may not: %s", r)
				}
			}
			st, err := b.Admin.JS.Stream(ctx, "OBJ_"+b.Names.Archives())
			if err != nil {
				t.Fatal(err)
			}
			if info, err := st.Info(ctx); err != nil || info.State.Consumers != tc.consumers {
				t.Errorf("consumers on the archive store after the fetch: %+v %v, want %d", info.State, err, tc.consumers)
			}
		})
	}
}
