package lab

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Issue 11: a release that starts fine but is wrong can be pulled back. `mesh-release withdraw`
// (the real command, signing with the release key) makes a node running it, confirmed, step
// down to the version it ran before — its launcher records the version bad "withdrawn: …", no
// failure is counted and no rollback recorded — and it never fetches it again; a node that never
// ran it is untouched; a target naming it is refused from then on, and `fleet` says what is
// withdrawn.
func TestWithdrawStepsAConfirmedNodeDownToItsPreviousVersion(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 3*time.Minute, FleetOptions{Nodes: 2})
	s.ship("v1.1.0", PkgHost)
	if err := s.f.Release.Target(s.ctx, "v1.1.0", "node-1"); err != nil {
		t.Fatal(err)
	}
	s.allOn([]string{"node-1"}, "v1.1.0")
	n1 := s.f.Node("node-1")

	// node-1 ran v1.0.0 confirmed before the rollout too: only a heartbeat after the withdrawal
	// shows it stepped back down.
	from := s.f.Beats.Len()
	out, err := s.f.Release.Withdraw(s.ctx, "v1.1.0", "leaks memory under load")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mesh-release withdraw printed:\n%s", out)
	if !strings.HasPrefix(out, `withdrew v1.1.0 (at `) || !strings.Contains(out, `"leaks memory under load"`) || !strings.Contains(out, "1 node runs it now: node-1") {
		t.Errorf("withdraw did not say what it did and which node runs it:\n%s", out)
	}
	if _, err := s.f.Beats.WaitAfter(s.ctx, from, "node-1 back on v1.0.0, confirmed", func(b Beat) bool {
		return b.Node == "node-1" && RunningConfirmed("v1.0.0")(b)
	}); err != nil {
		t.Fatal(err)
	}
	// It stays there: three heartbeats later it still runs v1.0.0 and reports no rollback.
	seen := 0
	if _, err := s.f.Beats.WaitAfter(s.ctx, s.f.Beats.Len(), "three more heartbeats of node-1", func(b Beat) bool {
		if b.Node == "node-1" {
			seen++
		}
		return seen >= 3
	}); err != nil {
		t.Fatal(err)
	}
	last, _ := s.f.Beats.Last("node-1")
	if !RunningConfirmed("v1.0.0")(last) || len(last.Rollbacks) != 0 {
		t.Errorf("node-1's last heartbeat: %s; want v1.0.0 confirmed and no rollback", Describe(last.Heartbeat))
	}
	rep, err := launcher.ReadStatus(s.ctx, n1.Root, rollback.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rollbacks) != 0 {
		t.Errorf("the launcher recorded a rollback: %+v", rep.Rollbacks)
	}
	for _, v := range rep.Versions {
		if v.Version == "v1.1.0" && (!v.Bad || !strings.HasPrefix(v.BadReason, "withdrawn: ") || v.Failures != 0 || v.FailuresTotal != 0) {
			t.Errorf("v1.1.0 in node-1's records: bad %v (%q), failures %d (%d in all); want bad \"withdrawn: …\" and no failure",
				v.Bad, v.BadReason, v.Failures, v.FailuresTotal)
		}
	}
	if rep.State != launcher.StateHealthy {
		t.Errorf("node-1 is %s (%s); want healthy", rep.State, rep.DegradedReason)
	}
	if s.touchedBy("node-2", "v1.1.0") {
		t.Errorf("node-2, never targeted, touched v1.1.0")
	}

	// From now on a target naming it is refused by mesh-release itself, and fleet says it.
	if _, err := s.f.Release.Run(s.ctx, "target", "node-2", "v1.1.0", "--key", s.f.Release.KeyPath(), "--nats", s.f.Bus.URL()); err == nil ||
		!strings.Contains(err.Error(), "v1.1.0 is withdrawn (at ") {
		t.Errorf("targeting the withdrawn version: %v", err)
	}
	table, err := s.f.FleetTable(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mesh-release fleet:\n%s", table)
	if !strings.HasPrefix(table, `withdrawn: v1.1.0 ("leaks memory under load")`) {
		t.Errorf("fleet does not say v1.1.0 is withdrawn:\n%s", table)
	}
	if reads, err := s.f.Reads.Count(s.ctx, "v1.1.0"); err != nil || reads != 1 {
		t.Errorf("the v1.1.0 archive was read %d times (%v); want once, by node-1 before the withdrawal", reads, err)
	}
}

// Two `mesh-release withdraw` processes at the same moment both land: the one whose
// compare-and-set loses reads the list again and adds its version to it. Several rounds make a
// lost race all but certain.
func TestTwoWithdrawProcessesAtOnceBothLand(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 2*time.Minute)
	dir := t.TempDir()
	b, err := StartBus(ctx, filepath.Join(dir, "bus"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rel := &Release{Bin: build(t, PkgRelease, ToolVersion), KeyDir: filepath.Join(dir, "keys"), Out: filepath.Join(dir, "out"), NATS: b.URL()}
	if _, err := rel.Keygen(ctx); err != nil {
		t.Fatal(err)
	}
	var want []string
	for round := range 5 {
		pair := []string{fmt.Sprintf("v1.%d.1", round), fmt.Sprintf("v1.%d.2", round)}
		want = append(want, pair...)
		var wg sync.WaitGroup
		for _, v := range pair {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if out, err := rel.Run(ctx, "withdraw", v, "--force", "--reason", "round "+v, "--key", rel.KeyPath(), "--nats", rel.NATS); err != nil || !strings.HasPrefix(out, "withdrew "+v) {
					t.Errorf("withdraw %s: %v\n%s", v, err, out)
				}
			}()
		}
		wg.Wait()
	}
	list, _, err := targets.ReadWithdrawals(ctx, b.Conn.JS, b.Names)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list.Withdrawn {
		got = append(got, e.Version)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("withdrawn %v; want all of %v", got, want)
	}
	if out, err := rel.Run(context.Background(), "withdraw", "--list", "--nats", rel.NATS); err != nil || !strings.HasPrefix(out, "10 versions withdrawn") {
		t.Errorf("withdraw --list: %v\n%s", err, out)
	}
}
