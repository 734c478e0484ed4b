package web

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The page read from the real bus: with roots on it, a trust column and the trust line as
// `fleet` says them (a node behind, one whose trust expired, its STATE); without roots, neither.
func TestFleetPageShowsTheNodesBehindTheNewestRootAndTheExpired(t *testing.T) {
	expired := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		roots   int
		want    []string
		wantNot []string
	}{
		{"roots on the bus", 2, []string{
			`<p class="trust-counts" id="fleet-trust">trust: 1 on root v2, 1 behind (v1), 1 expired</p>`,
			`<th>trust</th>`, `<td class="node-trust">root v2</td>`, `<td class="node-trust behind">root v1 (behind, expired)</td>`,
			`<td>trust expired since 2026-12-01T00:00:00Z</td>`,
		}, nil},
		{"no roots", 0, nil, []string{`<th>trust</th>`, `id="fleet-trust"`, `node-trust`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			ctx := meshtest.Context(t, time.Minute)
			if tc.roots > 0 {
				b.PutRoots(meshtest.RootChain(t, tc.roots, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))...)
			}
			for node, f := range map[string]func(*wire.Heartbeat){
				"on-new": func(hb *wire.Heartbeat) { hb.TrustRoot = uint64(tc.roots) },
				"on-old": func(hb *wire.Heartbeat) {
					if tc.roots > 0 {
						hb.TrustRoot, hb.TrustExpiredSince = 1, &expired
					}
				},
			} {
				hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", SentAt: time.Now()}
				f(&hb)
				if _, err := b.Conn.JS.Publish(ctx, b.Names.Heartbeat(node), hb.Marshal()); err != nil {
					t.Fatal(err)
				}
			}
			s := New(Config{JS: b.Conn.JS, Names: b.Names, Every: 100 * time.Millisecond})
			go s.Run(ctx)
			hs := httptest.NewServer(s.Handler())
			defer hs.Close()
			var body string
			meshtest.Eventually(t, "the page lists both nodes, the buckets read", func() bool {
				_, _, body = fetch(t, "GET", hs.URL+"/")
				return strings.Contains(body, `href="/node/on-new"`) && strings.Contains(body, `href="/node/on-old"`) && s.reads.Load() > 0 &&
					(tc.roots == 0 || strings.Contains(body, `id="fleet-trust"`))
			})
			for _, want := range tc.want {
				if !strings.Contains(body, want) {
					t.Errorf("the page lacks %q:\n%s", want, body)
				}
			}
			for _, not := range tc.wantNot {
				if strings.Contains(body, not) {
					t.Errorf("the page holds %q:\n%s", not, body)
				}
			}
		})
	}
}
