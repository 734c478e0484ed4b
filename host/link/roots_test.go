package link

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A node reads root.<n> by direct get. Where its user may subscribe to the roots' subject it
// is told when one is written; where it may not, the refusal is logged once and the root is
// still read (the host follows by polls).
func TestRootsAreReadDirectlyAndNoticedWhereTheUserMaySubscribe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		subscribe bool
	}{{"a user that may subscribe to root notices", true}, {"a user signed before that permission", false}} {
		t.Run(tc.name, func(t *testing.T) {
			pub, sub := nodePermissions("n1")
			releases := names.Releases()
			pub = append(pub, "$JS.API.STREAM.INFO."+kvStream(releases), "$JS.API.DIRECT.GET."+kvStream(releases)+"."+kvSubject(releases, ">"))
			if tc.subscribe {
				sub = append(sub, kvSubject(releases, "root.>"))
			}
			b := meshtest.StartNodeUserBus(t, names, pub, sub)
			withdrawalsBucket(t, b.Admin)
			l, logs := openLogged(t, Options{URLs: []string{b.NodeURL()}})
			waitFor[RootNoticed](t, l, "the session's first notice", nil)
			ctx := context.Background()
			if _, _, found, err := l.Root(ctx, 1); err != nil || found {
				t.Fatalf("root v1 before it is published: found %v, %v", found, err)
			}
			r := meshtest.SignRoot(t, meshtest.NewRoot(t, 1, time.Now().Add(time.Hour), meshtest.ReleaseKey, meshtest.ReleaseKey), meshtest.RootKeys[0], meshtest.RootKeys[1])
			kv, err := b.Admin.KeyValue(ctx, releases)
			if err != nil {
				t.Fatal(err)
			}
			rev, err := kv.Put(ctx, wire.RootKey(1), r.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if tc.subscribe {
				waitFor[RootNoticed](t, l, "the notice of root v1", nil)
			} else {
				meshtest.Eventually(t, "the refused subscription logged", func() bool {
					return strings.Contains(logs.String(), "may not subscribe to notices of new roots")
				})
			}
			raw, got, found, err := l.Root(ctx, 1)
			if err != nil || !found || got != rev || string(raw) != string(r.Marshal()) {
				t.Fatalf("root v1: found %v at revision %d (want %d), %v", found, got, rev, err)
			}
			if n := strings.Count(logs.String(), "may not subscribe to notices of new roots"); tc.subscribe != (n == 0) || n > 1 {
				t.Errorf("the refusal logged %d times", n)
			}
		})
	}
}
