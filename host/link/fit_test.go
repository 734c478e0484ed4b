package link

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// hugeHeartbeat is a heartbeat of about 3 MB: five rollbacks with 500 KB of output each, and
// long errors. (A host bounds these texts before it sends; the cutting must not rely on it.)
func hugeHeartbeat() wire.Heartbeat {
	at := time.Date(2026, 11, 29, 7, 12, 3, 0, time.UTC)
	hb := wire.Heartbeat{
		Node: "web-01", State: wire.StateStandingAside, Running: "v1.4.0", StandingAsideFor: "v1.5.0",
		KnownGood: "v1.3.0", Staged: []string{"v1.6.0", "v1.5.0"}, Target: "v1.6.0", DeclarationRevision: 42,
		LastReconcile: &wire.LastReconcile{At: at, Trigger: wire.TriggerTimer, Error: strings.Repeat("e", 300_000), DurationMS: 7},
		Refused:       &wire.Refusal{What: "declaration", Revision: 43, Error: strings.Repeat("r", 300_000), At: at},
		Fetch:         &wire.Fetch{State: "failed", Version: "v1.6.0", Error: strings.Repeat("f", 100_000)},
		UptimeS:       86400, SentAt: at,
	}
	for i := 0; i < 5; i++ {
		hb.Rollbacks = append(hb.Rollbacks, wire.Rollback{From: fmt.Sprintf("v1.%d.1", i), To: "v1.3.0", At: at,
			Reason: strings.Repeat("why ", 1000), Output: strings.Repeat("panic: ", 500_000/7)})
	}
	return hb
}

func TestFitHeartbeatCutsAThreeMegabyteHeartbeatToFitAndKeepsItsIdentity(t *testing.T) {
	in := hugeHeartbeat()
	if n := len(in.Marshal()); n < 3_000_000 {
		t.Fatalf("the heartbeat is %d bytes; the test wants about 3 MB", n)
	}
	fitsEachBoundKeepingIdentity(t, in)
	if len(in.Rollbacks[0].Output) < 400_000 || in.LastReconcile.Error == "" {
		t.Fatal("FitHeartbeat changed the caller's heartbeat")
	}
}

// fitParsed cuts in to max bytes and parses what the cut gives.
func fitParsed(t *testing.T, in wire.Heartbeat, max int) wire.Heartbeat {
	t.Helper()
	b, _, err := FitHeartbeat(in, max)
	if err != nil {
		t.Fatal(err)
	}
	out, err := wire.ParseHeartbeat(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fitsEachBoundKeepingIdentity cuts in to each of a range of bounds and checks the result fits,
// parses, keeps what identifies the node and its state, and is the same when cut again.
func fitsEachBoundKeepingIdentity(t *testing.T, in wire.Heartbeat) {
	t.Helper()
	for _, max := range []int{1 << 20, 64 << 10, 4 << 10, 1 << 10} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			b, truncated, err := FitHeartbeat(in, max)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > max || !truncated {
				t.Fatalf("%d bytes, truncated=%v; want at most %d, truncated", len(b), truncated, max)
			}
			out, err := wire.ParseHeartbeat(b)
			if err != nil {
				t.Fatalf("the cut heartbeat does not parse: %v", err)
			}
			if !out.Truncated || out.Node != in.Node || out.State != in.State || out.Running != in.Running ||
				out.KnownGood != in.KnownGood || out.StandingAsideFor != in.StandingAsideFor || !out.SentAt.Equal(in.SentAt) ||
				out.UptimeS != in.UptimeS || out.DeclarationRevision != in.DeclarationRevision {
				t.Fatalf("identity lost: %+v", out)
			}
			if again, _, _ := FitHeartbeat(in, max); !bytes.Equal(b, again) {
				t.Fatal("cutting the same heartbeat twice gave different bytes")
			}
		})
	}
}

// The steps run in the documented order: what is cut first goes first, and only as much as needed.
func TestFitHeartbeatCutsInTheDocumentedOrder(t *testing.T) {
	in := hugeHeartbeat()
	// 1 MiB: the outputs are cut to 512 bytes; all five rollbacks stay; errors are not touched.
	out := fitParsed(t, in, 1<<20)
	if len(out.Rollbacks) != 5 || len(out.Rollbacks[0].Output) > 512 || out.Rollbacks[0].Output == "" || len(out.LastReconcile.Error) != 300_000 {
		t.Errorf("1 MiB: %d rollbacks, output %d bytes, error %d bytes", len(out.Rollbacks), len(out.Rollbacks[0].Output), len(out.LastReconcile.Error))
	}
	// 64 KiB: no rollbacks are left (the errors alone are 700 KB); the newest went last, so the
	// errors are cut only after every rollback is gone.
	out = fitParsed(t, in, 64<<10)
	if len(out.Rollbacks) != 0 || len(out.LastReconcile.Error) > 512 || len(out.Staged) != 2 || out.Refused == nil || out.Fetch == nil {
		t.Errorf("64 KiB: %+v", out)
	}
	// Just under what the identity and one rollback need: the newest rollback stays.
	small := in
	small.LastReconcile, small.Refused, small.Fetch = nil, nil, nil
	withOne := small
	withOne.Rollbacks = []wire.Rollback{{From: in.Rollbacks[0].From, To: in.Rollbacks[0].To, At: in.Rollbacks[0].At, Reason: in.Rollbacks[0].Reason[:256]}}
	withOne.Truncated = true
	b, _, err := FitHeartbeat(small, len(withOne.Marshal())+10)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := wire.ParseHeartbeat(b)
	if len(got.Rollbacks) != 1 || got.Rollbacks[0].From != in.Rollbacks[0].From {
		t.Errorf("the newest rollback should stay: %+v", got.Rollbacks)
	}
}

func TestFitHeartbeatLeavesAHeartbeatThatFitsAlone(t *testing.T) {
	in := wire.Heartbeat{Node: "n1", State: wire.StateRunning, Running: "v1.0.0", Rollbacks: []wire.Rollback{{Output: "x"}}}
	b, truncated, err := FitHeartbeat(in, 1<<20)
	if err != nil || truncated || !bytes.Equal(b, in.Marshal()) || bytes.Contains(b, []byte("truncated")) {
		t.Fatalf("got %s, truncated=%v, %v", b, truncated, err)
	}
}

func TestFitHeartbeatSaysWhenEvenTheIdentityIsTooBig(t *testing.T) {
	_, _, err := FitHeartbeat(hugeHeartbeat(), 100)
	if err == nil || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("err = %v", err)
	}
}

// Through a real server whose max_payload is 8 KiB: a heartbeat of about 3 MB is published,
// cut, and stored as the node's last word.
func TestLinkPublishesAHeartbeatOverTheServersMaxPayloadCutToFit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const maxPayload = 8 << 10
	b := meshtest.StartBus(t, meshtest.MaxPayload(maxPayload))
	l := openLink(t, b.URL(), "web-01")
	waitFor[Connected](t, l, "connected", nil)
	if err := l.PublishHeartbeat(ctx, hugeHeartbeat()); err != nil {
		t.Fatalf("publish: %v", err)
	}
	stored := b.LastHeartbeat("web-01")
	hb, err := wire.ParseHeartbeat(stored)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) > maxPayload || !hb.Truncated || hb.Running != "v1.4.0" || hb.KnownGood != "v1.3.0" {
		t.Fatalf("stored %d bytes: %+v", len(stored), hb)
	}
}

// An operator's error says what failed at its start and what to do at its end: a heartbeat cut
// to fit keeps both, for each error it carries.
func TestFitHeartbeatKeepsTheStartAndTheEndOfEachError(t *testing.T) {
	const head, fix = "resources[1] file \"/srv/app/config.toml\": apply:", "declare it as a directory resource before this one"
	long := head + strings.Repeat(" because", 40_000) + ": " + fix
	in := hugeHeartbeat()
	in.LastReconcile.Error, in.Refused.Error, in.Fetch.Error = long, long, long
	for _, max := range []int{64 << 10, 8 << 10} {
		out := fitParsed(t, in, max)
		for what, got := range map[string]string{"last_reconcile": out.LastReconcile.Error, "refused": out.Refused.Error, "fetch": out.Fetch.Error} {
			if len(got) > fitErrorBytes || !strings.HasPrefix(got, "resources[1]") || !strings.HasSuffix(got, fix) {
				t.Errorf("cut to %d bytes, %s.error is %d bytes: %q; want at most %d, its start and its end", max, what, len(got), got, fitErrorBytes)
			}
		}
	}
}

// A rollout judges a node by its launcher (docs/wire.md, "Heartbeat size"): cutting never drops
// it, and only its rollback reason is cut, with the rollbacks' reasons (step 7).
func TestFitHeartbeatKeepsTheLauncherAndCutsOnlyItsRollbackReason(t *testing.T) {
	at := time.Date(2026, 11, 29, 7, 12, 3, 0, time.UTC)
	launcher := wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: wire.LauncherFloor, RolledBackFrom: "v1.1.0",
		RolledBackAt: at, RollbackReason: strings.Repeat("r", wire.MaxReasonBytes)}
	for _, tc := range []struct {
		name       string
		max        int
		wantReason int // bytes of the reason left
	}{
		{"a heartbeat that fits keeps the whole reason", 1 << 20, wire.MaxReasonBytes},
		{"a heartbeat cut past the rollbacks' reasons has the launcher's cut too", 4 << 10, len(rollbackCut256())},
		{"a heartbeat cut to its identity still names the launcher", 1 << 10, len(rollbackCut256())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := hugeHeartbeat()
			if tc.max == 1<<20 {
				in = wire.Heartbeat{Node: "web-01", State: wire.StateRunning, Running: "v1.4.0", SentAt: at}
			}
			l := launcher
			in.Launcher = &l
			out := fitParsed(t, in, tc.max)
			got := out.Launcher
			if got == nil || got.Version != "v1.0.0" || got.Floor != "v1.0.0" || got.State != wire.LauncherFloor ||
				got.RolledBackFrom != "v1.1.0" || !got.RolledBackAt.Equal(at) {
				t.Fatalf("launcher = %+v, want %+v with its reason cut", got, launcher)
			}
			if len(got.RollbackReason) != tc.wantReason || !strings.HasPrefix(got.RollbackReason, "rrr") {
				t.Errorf("rollback reason is %d bytes, want %d", len(got.RollbackReason), tc.wantReason)
			}
			if in.Launcher.RollbackReason != launcher.RollbackReason {
				t.Error("FitHeartbeat changed the caller's launcher")
			}
		})
	}
}

// rollbackCut256 is a launcher reason as step 7 leaves it.
func rollbackCut256() string {
	return text.Cut(strings.Repeat("r", wire.MaxReasonBytes), fitReasonBytes)
}

// A rescue's names go before anything of the launcher's or the rollbacks' (docs/wire.md step 4):
// its counts stay, and the caller's heartbeat keeps its names.
func TestFitHeartbeatDropsTheRescuesNamesBeforeTheRollbacksAndKeepsItsCounts(t *testing.T) {
	in := hugeHeartbeat()
	in.Rescue = &wire.Rescue{Reason: "mesh-host rescue", OK: true, Adopted: 7, Changed: 20}
	for i := 0; i < wire.MaxRescueNames; i++ {
		in.Rescue.NotAdopted = append(in.Rescue.NotAdopted, fmt.Sprintf("created file /etc/%0290d", i))
	}
	out := fitParsed(t, in, 1<<20)
	if out.Rescue == nil || out.Rescue.NotAdopted != nil || out.Rescue.Adopted != 7 || out.Rescue.Changed != 20 || len(out.Rollbacks) != 5 {
		t.Errorf("1 MiB: rescue %+v, %d rollbacks; want the names dropped, the counts and every rollback kept", out.Rescue, len(out.Rollbacks))
	}
	if len(in.Rescue.NotAdopted) != wire.MaxRescueNames {
		t.Error("FitHeartbeat changed the caller's rescue")
	}
}
