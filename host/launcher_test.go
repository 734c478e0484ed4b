package host

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The heartbeat names the launcher running the host as records.db says it (issue 19, 6): its
// version, the floor's, its state, and the launcher rollback it came back from with when and
// why, each bounded. Records older than launcher versions (schema 6) give no launcher object.
func TestHeartbeatCarriesTheLauncherTheRecordsName(t *testing.T) {
	longReason := "v1.2.0 exited with status 2 before confirming: " + strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, ctx context.Context, r *rollback.Records)
		old   bool // the records are made older than schema 6 after setup
		want  *wire.Launcher
	}{
		{name: "nothing recorded of the launcher: no launcher object", setup: func(*testing.T, context.Context, *rollback.Records) {}},
		{name: "the floor runs", setup: func(t *testing.T, ctx context.Context, r *rollback.Records) {
			must(t, r.UnitStarted(ctx, "v1.0.0", rollback.DefaultFloor))
			must(t, r.SetCurrentLauncher(ctx, "v1.0.0", true, false))
		}, want: &wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: wire.LauncherFloor}},
		{name: "a delivered launcher on trial", setup: func(t *testing.T, ctx context.Context, r *rollback.Records) {
			must(t, r.UnitStarted(ctx, "v1.0.0", rollback.DefaultFloor))
			must(t, r.RecordLauncher(ctx, launcherVersion("v1.1.0")))
			must(t, r.SetCurrentLauncher(ctx, "v1.1.0", false, true))
		}, want: &wire.Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: wire.LauncherTrial}},
		{name: "a delivered launcher confirmed", setup: func(t *testing.T, ctx context.Context, r *rollback.Records) {
			must(t, r.UnitStarted(ctx, "v1.0.0", rollback.DefaultFloor))
			must(t, r.RecordLauncher(ctx, launcherVersion("v1.1.0")))
			must(t, r.SetCurrentLauncher(ctx, "v1.1.0", false, true))
			must(t, r.ConfirmLauncher(ctx, "v1.1.0"))
		}, want: &wire.Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: wire.LauncherConfirmed}},
		{name: "rolled back from a launcher that failed: when and why, the reason bounded", setup: func(t *testing.T, ctx context.Context, r *rollback.Records) {
			must(t, r.UnitStarted(ctx, "v1.0.0", rollback.DefaultFloor))
			for _, v := range []string{"v1.1.0", "v1.2.0"} {
				must(t, r.RecordLauncher(ctx, launcherVersion(v)))
			}
			must(t, r.SetCurrentLauncher(ctx, "v1.1.0", false, true))
			must(t, r.ConfirmLauncher(ctx, "v1.1.0"))
			must(t, r.SetCurrentLauncher(ctx, "v1.2.0", false, true))
			must(t, r.MarkLauncherBad(ctx, "v1.2.0", longReason, "panic: boom"))
			must(t, r.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: "v1.2.0", To: "v1.1.0", Reason: longReason, Output: "panic: boom"}))
			must(t, r.SetCurrentLauncher(ctx, "v1.1.0", false, false))
		}, want: &wire.Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: wire.LauncherConfirmed, RolledBackFrom: "v1.2.0",
			RollbackReason: text.Cut(text.Cut(longReason, 2048), wire.MaxReasonBytes)}},
		{name: "a rollback followed by a newer launcher taken: no longer rolled back", setup: func(t *testing.T, ctx context.Context, r *rollback.Records) {
			must(t, r.UnitStarted(ctx, "v1.0.0", rollback.DefaultFloor))
			for _, v := range []string{"v1.1.0", "v1.2.0", "v1.3.0"} {
				must(t, r.RecordLauncher(ctx, launcherVersion(v)))
			}
			must(t, r.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: "v1.2.0", To: "v1.1.0", Reason: "crashed"}))
			must(t, r.SetCurrentLauncher(ctx, "v1.3.0", false, true))
		}, want: &wire.Launcher{Version: "v1.3.0", Floor: "v1.0.0", State: wire.LauncherTrial}},
		{name: "records older than launcher versions: no launcher object", old: true, setup: func(t *testing.T, ctx context.Context, r *rollback.Records) {
			must(t, r.UnitStarted(ctx, "v1.0.0", rollback.DefaultFloor))
			must(t, r.SetCurrentLauncher(ctx, "v1.0.0", true, false))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := meshtest.Context(t, 60*time.Second)
			root := newRoot(t, "v1.0.0")
			r, _, err := rollback.OpenForLauncher(ctx, root)
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(t, ctx, r)
			must(t, r.Close())
			if tc.old {
				makeSchema(t, root, 5)
			}
			b := meshtest.StartBus(t)
			hbs := b.Heartbeats("n1")
			startHost(t, root, "n1", b.URL())
			hb := meshtest.WaitHeartbeat(t, hbs, "the first heartbeat", func(wire.Heartbeat) bool { return true })
			got := hb.Launcher
			if tc.want == nil {
				if got != nil {
					t.Fatalf("launcher = %+v, want none", got)
				}
				return
			}
			if got == nil {
				t.Fatalf("no launcher in the heartbeat, want %+v", tc.want)
			}
			if tc.want.RolledBackFrom != "" && got.RolledBackAt.IsZero() {
				t.Errorf("rolled_back_at is not set: %+v", got)
			}
			got.RolledBackAt = tc.want.RolledBackAt // when, by the records' clock
			if *got != *tc.want {
				t.Errorf("launcher = %+v\nwant       %+v", got, tc.want)
			}
			if len(got.RollbackReason) > wire.MaxReasonBytes {
				t.Errorf("rollback_reason is %d bytes, over %d", len(got.RollbackReason), wire.MaxReasonBytes)
			}
		})
	}
}

func launcherVersion(v string) rollback.LauncherVersion {
	return rollback.LauncherVersion{Version: v, Digest: digest.FromString("mesh-launcher " + v), Size: 1,
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: "82912897d4beaa3c"}, CarriedBy: "v1.4.0"}
}

// makeSchema sets records.db's schema number back to n, as a launcher of that schema left it.
func makeSchema(t *testing.T, root string, n int) {
	t.Helper()
	db, err := sql.Open("sqlite", rollback.RecordsPath(root))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", n)); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
