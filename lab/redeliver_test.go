package lab

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// countFetches counts the archive fetches the bus serves: each starts with a direct get of the
// object's first chunk, from sequence 1, on the archives' stream (internal/objfetch), and the
// test's own subscription sees the request.
func countFetches(t *testing.T, b *meshtest.Bus) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	stream := "OBJ_" + b.Names.Archives()
	sub, err := b.Conn.NC.Subscribe("$JS.API.DIRECT.GET."+stream, func(m *nats.Msg) {
		var req struct {
			Seq  uint64 `json:"seq"`
			Next string `json:"next_by_subj"`
		}
		if json.Unmarshal(m.Data, &req) == nil && req.Seq == 1 && req.Next != "" {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := b.Conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// A refusal is of the bytes refused, not of the version for the life of the host process: the
// same bytes targeted again (a new target revision) are refused again at that revision without
// being fetched again, and once the operator puts the real release under the version and signs
// a fresh target, the running host fetches, stages and runs it, and the heartbeat of the version
// it delivered no longer shows the old refusal.
func TestARefusedVersionIsRefusedAgainUnfetchedThenTakenOnceItsReleaseIsPutRight(t *testing.T) {
	t.Parallel()
	// Built before any clock runs: the builds are what takes long on a busy machine.
	build(t, PkgRelease, "v0.0.0-lab")
	build(t, PkgLauncher, "v0.0.0-lab")
	for _, v := range []string{"v1.1.0", "v1.2.0", "v1.3.0"} {
		build(t, PkgHost, v)
	}
	build(t, PkgExit1, "v1.3.0")
	for _, tc := range []struct {
		name    string
		kind    string // as the refusal names it
		fetches int64  // of the refused bytes: 0 when refused before fetching
		// put puts the refused release under v1.3.0.
		put func(t *testing.T, ctx context.Context, b *meshtest.Bus, rel *Release)
	}{
		{name: "another version's manifest under its key", kind: "(bad-manifest)", put: func(t *testing.T, ctx context.Context, b *meshtest.Bus, rel *Release) {
			dir, err := rel.Build(ctx, "v1.1.0", build(t, PkgHost, "v1.1.0"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
			if err != nil {
				t.Fatal(err)
			}
			b.Put(b.Names.Releases(), "v1.3.0", m)
		}},
		{name: "signed by a key the node does not trust", kind: "(signature)", put: func(t *testing.T, ctx context.Context, b *meshtest.Bus, rel *Release) {
			stranger := &Release{Bin: rel.Bin, KeyDir: t.TempDir(), Out: t.TempDir(), NATS: rel.NATS}
			if _, err := stranger.Keygen(ctx); err != nil {
				t.Fatal(err)
			}
			if err := stranger.Ship(ctx, "v1.3.0", build(t, PkgHost, "v1.3.0")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "a binary whose preflight fails", kind: "(preflight)", fetches: 1, put: func(t *testing.T, ctx context.Context, b *meshtest.Bus, rel *Release) {
			if err := rel.Ship(ctx, "v1.3.0", build(t, PkgExit1, "v1.3.0")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 240*time.Second)
			defer cancel()
			b, rel, n, hbs := deliveringNode(t, ctx, "v1.2.0")
			fetches := countFetches(t, b)
			tc.put(t, ctx, b, rel)
			refusedOnce := func(after uint64) func(wire.Heartbeat) bool {
				return func(hb wire.Heartbeat) bool {
					r := hb.Refused
					return r != nil && r.What == "target" && r.Revision > after && strings.Contains(r.Error, "v1.3.0 refused "+tc.kind)
				}
			}
			if err := rel.Target(ctx, "v1.3.0", "lab"); err != nil {
				t.Fatal(err)
			}
			first := meshtest.WaitHeartbeat(t, hbs, "v1.3.0 refused "+tc.kind, refusedOnce(0))

			// The same bytes under a fresh target: refused again, at the new target's revision
			// (a rollout judges the refusal by it), and not fetched again.
			if err := rel.Target(ctx, "v1.3.0", "lab"); err != nil {
				t.Fatal(err)
			}
			again := meshtest.WaitHeartbeat(t, hbs, "v1.3.0 refused again at the fresh target's revision", refusedOnce(first.Refused.Revision))
			if again.Running != "v1.2.0" {
				t.Errorf("running %s after the refusal, want v1.2.0", again.Running)
			}
			if got := fetches.Load(); got != tc.fetches {
				t.Errorf("the refused bytes were fetched %d times, want %d: the same bytes are not fetched again", got, tc.fetches)
			}

			// The operator puts the real release under v1.3.0 and signs a fresh target.
			b.Delete(b.Names.Releases(), "v1.3.0")
			if err := rel.Ship(ctx, "v1.3.0", build(t, PkgHost, "v1.3.0")); err != nil {
				t.Fatal(err)
			}
			if err := rel.Target(ctx, "v1.3.0", "lab"); err != nil {
				t.Fatal(err)
			}
			hb := meshtest.WaitHeartbeat(t, hbs, "v1.3.0 delivered, running and confirmed", func(hb wire.Heartbeat) bool {
				return hb.Running == "v1.3.0" && hb.KnownGood == "v1.3.0"
			})
			if hb.Refused != nil {
				t.Errorf("the heartbeat of v1.3.0 still shows a refusal: %+v", hb.Refused)
			}
			if got := n.Staged("v1.3.0"); got != 1 {
				t.Errorf("v1.3.0 staged %d times, want once", got)
			}
			if got := fetches.Load(); got != tc.fetches+1 {
				t.Errorf("%d fetches in all, want %d: the refused bytes' and the real release's", got, tc.fetches+1)
			}
		})
	}
}
