package lab

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/release/rollout"
)

// The scenarios of issue 9, each with real processes: every node a mesh-launcher process with
// its own root and its hosts, every controller a `mesh-release rollout` process, one embedded
// NATS server with JetStream on disk. Clocks are scaled: heartbeats every second, a launcher
// rolls back a version that has not confirmed in 10s (ScaledLauncherArgs), a batch must confirm
// within a window of seconds and soak for two.

// A good release reaches every node, one batch after the other: the heartbeat history shows no
// node of a batch touching it before every node of the batch before had confirmed it; then the
// fleet key names it and the nodes' own keys are gone.
func TestRolloutOfAGoodReleaseReachesEveryNodeInBatchOrder(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 90*time.Second, FleetOptions{Nodes: 4})
	s.ship("v1.1.0", PkgHost)

	c := s.rollout(append([]string{"start", "v1.1.0", "--json"}, rolloutFlags(20*time.Second, 2*time.Second)...)...)
	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d, want 0 (completed)", code)
	}
	st := s.waitState("v1.1.0 completed", func(st rollout.State) bool { return st.Version == "v1.1.0" && st.Status.Final() })
	if st.Status != rollout.StatusCompleted || len(st.Batches) != 3 || len(st.LeftOut) != 0 {
		t.Fatalf("the rollout ended %s with %d batches and left out %+v; want completed in 3 (canary, 50%%, 100%%), none left out",
			st.Status, len(st.Batches), st.LeftOut)
	}
	for i, b := range st.Batches {
		if b.Started.IsZero() || b.Done.IsZero() {
			t.Errorf("batch %d (%s) started %s, done %s", i+1, b.Name, b.Started, b.Done)
		}
	}
	s.allOn(s.f.Names(), "v1.1.0")
	s.inBatchOrder(st, "v1.1.0")
	s.targetsAfterCompletion("v1.1.0", s.f.Names())
	if e := c.Events(); len(e) == 0 || e[len(e)-1].Kind != rollout.EventCompleted {
		t.Errorf("the controller's last event is not %q:\n%s", rollout.EventCompleted, c.Output())
	}
}

// A release that crashes when run halts the rollout after the canaries: each canary's launcher
// rolls back by itself (its status says so), the report names the canaries that had rolled back
// when it halted "rolled-back" with the release's last output lines (it halts at the first), the
// controller exits 3, and no other node ever fetched it — the object store served it only to the
// canaries.
func TestRolloutOfACrashingReleaseHaltsAfterTheCanariesWhichRollBack(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 90*time.Second, FleetOptions{Nodes: 4})
	s.ship("v1.1.0", PkgCrashRun)

	// Text output, as a person reads it; the state tells the test what happened.
	st, c := s.halted("v1.1.0", "--canary", "2", "--steps", "50%,100%", "--window", "20s", "--soak", "2s")
	canaries := BatchNodes(st, 0)
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != 0 || len(canaries) != 2 {
		t.Fatalf("the rollout ended %s (halt %+v, canaries %v); want halted in the canary batch of 2", st.Status, st.Halt, canaries)
	}
	if st.Current != 0 || !st.Batches[1].Started.IsZero() || !st.Restored {
		t.Errorf("after the halt: current batch %d, batch 2 started %s, targets restored %v", st.Current, st.Batches[1].Started, st.Restored)
	}
	out := c.Output()
	t.Logf("the controller printed:\n%s", out)
	for _, r := range st.Halt.Nodes {
		if !strings.Contains(strings.Join(canaries, " "), r.Node) || r.Why != rollout.WhyRolledBack {
			t.Errorf("the halt names %s %s; want only canaries, rolled-back", r.Node, r.Why)
		}
		if !strings.Contains(r.Output, "(lab fixture crashrun)") {
			t.Errorf("the halt's output lines for %s do not quote the release: %q", r.Node, r.Output)
		}
		// The report a person reads: the node, why, and the release's last words.
		if !strings.Contains(out, r.Node+": rolled back from v1.1.0") || !strings.Contains(out, "| mesh-host v1.1.0: panic: nil map") {
			t.Errorf("the controller's report does not name %s rolled back with its output lines:\n%s", r.Node, out)
		}
	}
	if len(st.Halt.Nodes) == 0 {
		t.Errorf("the halt names no node")
	}

	// Every canary rolled back by itself, its launcher says so, and runs the previous version.
	for _, n := range canaries {
		rep, err := s.f.Node(n).WaitStatus(s.ctx, "rolled back from v1.1.0 to v1.0.0", func(rep launcher.Report) bool {
			return len(rep.Rollbacks) > 0 && rep.Rollbacks[0].From == "v1.1.0" && rep.Rollbacks[0].To == "v1.0.0" &&
				runningConfirmedReport("v1.0.0")(rep)
		})
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := Version(rep, "v1.1.0"); !v.Bad {
			t.Errorf("%s: v1.1.0 is not marked bad after the rollback: %+v", n, v)
		}
	}
	s.allOn(canaries, "v1.0.0")

	// No other node fetched it: not targeted, nothing fetched or staged, two reads in all.
	for _, n := range s.others(canaries) {
		if s.touchedBy(n, "v1.1.0") {
			t.Errorf("%s, not a canary, was targeted at, fetched or staged v1.1.0", n)
		}
	}
	if reads, err := s.f.Reads.Count(s.ctx, "v1.1.0"); err != nil || reads != len(canaries) {
		t.Errorf("the v1.1.0 archive was read %d times (%v), want %d: once by each canary", reads, err, len(canaries))
	}
	if v, ok, _ := s.f.Target(s.ctx, "fleet"); ok {
		t.Errorf("the halted release touched the fleet key: it names %s", v)
	}
}

// A release that hangs before confirming halts the rollout when the window ends (the canaries
// not confirmed, or silent while it hangs), before any other node is targeted; and each
// canary's launcher kills it at its confirm deadline and rolls back by itself. The window
// (8s) is shorter than the launchers' confirm deadline (10s): the controller must not wait for
// a rollback to judge.
func TestRolloutOfAReleaseThatHangsHaltsAtTheWindowAndTheLaunchersRollBack(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 90*time.Second, FleetOptions{Nodes: 3})
	s.ship("v1.1.0", PkgHangRun)

	st, _ := s.halted("v1.1.0", "--json", "--canary", "2", "--steps", "100%", "--window", "8s", "--soak", "2s")
	canaries := BatchNodes(st, 0)
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != 0 || len(st.Halt.Nodes) == 0 {
		t.Fatalf("the rollout ended %s (halt %+v); want halted in the canary batch", st.Status, st.Halt)
	}
	for _, r := range st.Halt.Nodes {
		if r.Why != rollout.WhyNotConfirmed && r.Why != rollout.WhySilent {
			t.Errorf("the halt names %s %s (%s); want not-confirmed or silent: it halts at the window, not at a rollback", r.Node, r.Why, r.Detail)
		}
	}
	for _, n := range canaries {
		rep, err := s.f.Node(n).WaitStatus(s.ctx, "rolled back from v1.1.0 at the confirm deadline", func(rep launcher.Report) bool {
			return len(rep.Rollbacks) > 0 && rep.Rollbacks[0].From == "v1.1.0" && runningConfirmedReport("v1.0.0")(rep)
		})
		if err != nil {
			t.Fatal(err)
		}
		if rb := rep.Rollbacks[0]; !strings.Contains(rb.Reason, "did not confirm within the confirm deadline") {
			t.Errorf("%s rolled back for another reason: %s", n, rb.Reason)
		}
		if !strings.Contains(s.f.Node(n).Log(), "(lab fixture hangrun)") {
			t.Errorf("%s never ran v1.1.0", n)
		}
	}
	s.allOn(canaries, "v1.0.0")
	for _, n := range s.others(canaries) {
		if s.touchedBy(n, "v1.1.0") {
			t.Errorf("%s, not a canary, was targeted at, fetched or staged v1.1.0", n)
		}
	}
}

// A release that confirms and then crashes every few seconds passes the window but not the
// soak: the rollout halts, naming the canary "restarted", though its launcher never rolls it
// back (a confirmed version is restarted, not judged).
func TestRolloutOfAReleaseThatCrashesAfterConfirmingHaltsInTheSoak(t *testing.T) {
	t.Parallel()
	// The release crashes 3s into each run; the soak asks for 6s.
	s := newScenario(t, 90*time.Second, FleetOptions{Nodes: 3, Env: []string{"MESH_LAB_CRASH_AFTER=3s"}})
	s.ship("v1.1.0", PkgCrashLater)

	c := s.rollout(append([]string{"start", "v1.1.0", "--json", "--follow"}, rolloutFlags(20*time.Second, 6*time.Second)...)...)
	if code := s.exit(c); code != 3 {
		t.Fatalf("rollout start exited %d, want 3 (halted)", code)
	}
	st := s.waitState("v1.1.0 halted", func(st rollout.State) bool { return st.Version == "v1.1.0" && st.Status.Final() })
	if st.Halt != nil {
		t.Logf("halted: %s", whys(st.Halt.Nodes))
	}
	canary := BatchNodes(st, 0)
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != 0 || len(st.Halt.Nodes) != 1 {
		t.Fatalf("the rollout ended %s (halt %+v); want halted in the canary batch, naming the canary", st.Status, st.Halt)
	}
	if r := st.Halt.Nodes[0]; r.Node != canary[0] || r.Why != rollout.WhyRestarted {
		t.Errorf("the halt names %s %s (%s); want %s restarted", r.Node, r.Why, r.Detail, canary[0])
	}
	// It halted in the soak: the canary had confirmed, and had not soaked.
	var confirmed, soaked bool
	for _, e := range c.Events() {
		confirmed = confirmed || e.Kind == rollout.EventConfirmed && e.Node == canary[0]
		soaked = soaked || e.Kind == rollout.EventSoaked
	}
	if !confirmed || soaked {
		t.Errorf("the canary confirmed: %v, soaked: %v; want confirmed and not soaked", confirmed, soaked)
	}
	rep, _, err := s.f.Node(canary[0]).Status(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(rep, "v1.1.0"); !v.Confirmed || v.Bad || v.FailuresTotal == 0 || len(rep.Rollbacks) != 0 {
		t.Errorf("%s's launcher: v1.1.0 %+v, rollbacks %+v; want confirmed, failed, never rolled back", canary[0], v, rep.Rollbacks)
	}
	for _, n := range s.others(canary) {
		if s.touchedBy(n, "v1.1.0") {
			t.Errorf("%s, not a canary, was targeted at, fetched or staged v1.1.0", n)
		}
	}
}

// A node whose launcher stops during a good rollout is left out of its batch (the state names
// it) rather than holding the rollout; when it starts again after the rollout completed, it
// takes the fleet key and upgrades alone.
func TestRolloutLeavesOutAStoppedNodeWhichUpgradesAloneWhenItReturns(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 90*time.Second, FleetOptions{Nodes: 4})
	s.ship("v1.1.0", PkgHost)

	// A soak of 6s makes the two batches before the last take longer than --silent-after (5s):
	// a node stopped as the rollout starts is silent long enough, when the last batch begins,
	// to be left out.
	c := s.rollout(append([]string{"start", "v1.1.0", "--json"}, rolloutFlags(20*time.Second, 6*time.Second)...)...)
	st := s.waitState("v1.1.0 planned", func(st rollout.State) bool { return st.Version == "v1.1.0" && len(st.Batches) == 3 })
	last := BatchNodes(st, 2)
	gone := s.f.Node(last[len(last)-1])
	if _, err := gone.Stop(s.ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()

	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d, want 0 (completed)", code)
	}
	st = s.waitState("v1.1.0 completed", func(st rollout.State) bool { return st.Version == "v1.1.0" && st.Status.Final() })
	if st.Status != rollout.StatusCompleted || len(st.LeftOut) != 1 || st.LeftOut[0].Node != gone.Name || st.LeftOut[0].Batch != 2 {
		t.Fatalf("the rollout ended %s, left out %+v; want completed, %s left out of batch 3", st.Status, st.LeftOut, gone.Name)
	}
	if lo := st.LeftOut[0]; lo.SilentSince.IsZero() || lo.SilentSince.After(stopped) {
		t.Errorf("%s left out, silent since %s; it stopped at %s", gone.Name, lo.SilentSince, stopped)
	}
	s.event(c, rollout.EventLeftOut, 3)
	up := s.others([]string{gone.Name})
	s.allOn(up, "v1.1.0")
	s.targetsAfterCompletion("v1.1.0", s.f.Names())
	if s.touchedBy(gone.Name, "v1.1.0") {
		t.Fatalf("%s, stopped, was targeted at or fetched v1.1.0", gone.Name)
	}

	// Back after the rollout: the fleet key, alone.
	s.startAgain(gone, gone.Name+" on v1.1.0", RunningConfirmed("v1.1.0"))
	if got, err := s.f.Reads.Count(s.ctx, "v1.1.0"); err != nil || got != len(s.f.Nodes) {
		t.Errorf("the v1.1.0 archive was read %d times (%v), want once by each of the %d nodes", got, err, len(s.f.Nodes))
	}
}

// Two controllers started at once: one acts, the other exits 1 naming the one that holds the
// rollout. The one acting, killed with SIGKILL in the middle of a batch, is resumed by
// `rollout resume`, which continues that batch at once (the holder's pid is gone) and completes:
// no finished batch is set again and none is skipped — the plan was raised once per batch (its
// history in the bucket), batch after batch, and every batch is done.
func TestRolloutResumedAfterSIGKILLNeitherRepeatsNorSkipsABatchAndOnlyOneOfTwoControllersActs(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 4})
	s.ship("v1.1.0", PkgHost)

	args := append([]string{"start", "v1.1.0", "--json"}, rolloutFlags(20*time.Second, 4*time.Second)...)
	a, b := s.f.Rollout(args...), s.f.Rollout(args...)
	s.ctls = append(s.ctls, a, b)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	// The loser exits at once; the winner runs until it is killed.
	var winner, loser *Controller
	for winner == nil {
		select {
		case <-s.ctx.Done():
			t.Fatal("neither controller exited: both act on the rollout")
		case <-time.After(50 * time.Millisecond):
		}
		if done, _ := a.Exited(); done {
			winner, loser = b, a
		} else if done, _ := b.Exited(); done {
			winner, loser = a, b
		}
	}
	if code := s.exit(loser); code != 1 {
		t.Errorf("the second controller exited %d, want 1", code)
	}
	st := s.waitState("v1.1.0 planned", func(st rollout.State) bool { return st.Version == "v1.1.0" && len(st.Batches) == 3 })
	out := loser.Output()
	if !strings.Contains(out, "is running") || !strings.Contains(out, fmt.Sprintf("pid %d", winner.PID())) {
		t.Errorf("the second controller does not say that a rollout runs, held by pid %d:\n%s", winner.PID(), out)
	}
	if st.Holder == nil || st.Holder.PID != winner.PID() {
		t.Errorf("the rollout is held by %+v, want the winner, pid %d", st.Holder, winner.PID())
	}
	if len(loser.Events()) != 0 {
		t.Errorf("the second controller acted: %+v", loser.Events())
	}

	// Killed in the middle of batch 2: its targets set, its node not yet soaked.
	s.event(winner, rollout.EventBatch, 2)
	if err := winner.Kill(s.ctx); err != nil {
		t.Fatal(err)
	}
	killed := s.waitState("killed in batch 2", func(st rollout.State) bool { return true })
	if killed.Status != rollout.StatusRunning || killed.Current != 1 || killed.Batches[0].Done.IsZero() || killed.Batches[1].Started.IsZero() || !killed.Batches[1].Done.IsZero() {
		t.Fatalf("when killed, the rollout is %s at batch %d: %+v; want running in batch 2, batch 1 done", killed.Status, killed.Current+1, killed.Batches)
	}

	r := s.rollout("resume", "--json")
	if code := s.exit(r); code != 0 {
		t.Fatalf("rollout resume exited %d, want 0 (completed)", code)
	}
	if e := s.event(r, rollout.EventResumed, 2); !strings.Contains(e.Message, "is gone") {
		t.Errorf("resumed: %q; want it to say the holder is gone", e.Message)
	}
	var begun []int
	for _, e := range r.Events() {
		if e.Kind == rollout.EventBatch {
			begun = append(begun, e.Batch)
		}
	}
	if fmt.Sprint(begun) != "[2 3]" {
		t.Errorf("the resumed controller began batches %v, want [2 3]: batch 1 was done", begun)
	}
	st = s.waitState("v1.1.0 completed", func(st rollout.State) bool { return st.Version == "v1.1.0" && st.Status.Final() })
	if st.Status != rollout.StatusCompleted || st.Batches[0].Started != killed.Batches[0].Started || st.Batches[0].Done != killed.Batches[0].Done ||
		st.Batches[1].Started != killed.Batches[1].Started {
		t.Errorf("after the resume: %s, batches %+v; before it: %+v", st.Status, st.Batches, killed.Batches)
	}
	for i, b := range st.Batches {
		if b.Done.IsZero() {
			t.Errorf("batch %d (%s) was never done", i+1, b.Name)
		}
	}
	s.allOn(s.f.Names(), "v1.1.0")
	s.inBatchOrder(st, "v1.1.0")
	s.targetsAfterCompletion("v1.1.0", s.f.Names())

	// Every node's host reads plans (decision 0047): the plan was raised once per batch, in
	// order — the resumed controller found it holding batch 2 and wrote nothing for it — then
	// written completed, and no node was given a target of its own.
	var ins []int
	for _, p := range s.planHistory() {
		if p.Rollout == st.ID {
			ins = append(ins, p.In)
		}
	}
	if want := []int{st.Batches[0].In, st.Batches[1].In, st.Batches[2].In, st.Batches[2].In}; !slices.Equal(ins, want) {
		t.Errorf("the plan's writes held %v batches; want %v: each batch raised once, then completed", ins, want)
	}
	for _, n := range s.f.Names() {
		if h := s.targetHistory(n); len(h) != 0 {
			t.Errorf("%s, whose host reads plans, was given a target of its own: %+v", n, h)
		}
	}
}

// The NATS server restarts in the middle of a rollout, on the same address with JetStream's
// data on disk: the controller and every host reconnect and carry on, and the rollout
// completes with every node confirmed on the release.
func TestRolloutCarriesOnAcrossANATSServerRestart(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 4})
	s.ship("v1.1.0", PkgHost)

	c := s.rollout(append([]string{"start", "v1.1.0", "--json"}, rolloutFlags(20*time.Second, 3*time.Second)...)...)
	s.event(c, rollout.EventBatch, 2)
	s.f.Bus.StopServer()
	time.Sleep(2 * time.Second) // down for a while, as a real restart is
	if err := s.f.Bus.StartServer(s.ctx); err != nil {
		t.Fatal(err)
	}
	restarted := s.f.Beats.Len()

	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d across the restart, want 0 (completed)", code)
	}
	st := s.waitState("v1.1.0 completed", func(st rollout.State) bool { return st.Version == "v1.1.0" && st.Status.Final() })
	if st.Status != rollout.StatusCompleted || len(st.LeftOut) != 0 {
		t.Fatalf("the rollout ended %s, left out %+v; want completed, none left out", st.Status, st.LeftOut)
	}
	s.allOn(s.f.Names(), "v1.1.0")
	for _, n := range s.f.Names() {
		if _, err := s.f.Beats.WaitAfter(s.ctx, restarted, n+" heard after the restart", func(b Beat) bool {
			return b.Node == n && RunningConfirmed("v1.1.0")(b) && len(b.Rollbacks) == 0
		}); err != nil {
			t.Fatal(err)
		}
	}
	s.inBatchOrder(st, "v1.1.0")
	s.targetsAfterCompletion("v1.1.0", s.f.Names())
}

// A node where the release is already marked bad — it got it earlier by its own target and
// its launcher rolled it back — refuses it when the rollout targets it, and the rollout halts
// naming it. The release is good elsewhere: that node's launcher ran it with a confirm deadline
// too short to confirm in.
func TestRolloutHaltsNamingTheNodeThatRefusesAReleaseMarkedBadThere(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 3})
	s.ship("v1.1.0", PkgHost)

	bad := s.f.Node("node-1")
	if _, err := bad.Stop(s.ctx); err != nil {
		t.Fatal(err)
	}
	if err := bad.Start("--confirm-deadline", "1ms"); err != nil {
		t.Fatal(err)
	}
	if err := s.f.Release.Target(s.ctx, "v1.1.0", bad.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.WaitStatus(s.ctx, "v1.1.0 marked bad", func(rep launcher.Report) bool {
		v, _ := Version(rep, "v1.1.0")
		return v.Bad && runningConfirmedReport("v1.0.0")(rep)
	}); err != nil {
		t.Fatal(err)
	}
	// Its launcher as every node's again. Its own target still names v1.1.0, which it refuses.
	if _, err := bad.Stop(s.ctx); err != nil {
		t.Fatal(err)
	}
	s.startAgain(bad, "node-1 back on v1.0.0, refusing v1.1.0", func(b Beat) bool {
		return RunningConfirmed("v1.0.0")(b) && b.Refused != nil && b.Refused.What == "target"
	})

	st, _ := s.halted("v1.1.0", "--json", "--canary-nodes", "node-2,node-1", "--steps", "100%", "--window", "20s", "--soak", "2s")
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != 0 {
		t.Fatalf("the rollout ended %s (halt %+v); want halted in the canary batch", st.Status, st.Halt)
	}
	var named bool
	for _, r := range st.Halt.Nodes {
		if r.Node != bad.Name {
			t.Errorf("the halt names %s %s (%s); only %s showed trouble", r.Node, r.Why, r.Detail, bad.Name)
			continue
		}
		named = true
		switch {
		case r.Why == rollout.WhyRefused && strings.Contains(r.Detail, "marked bad"):
			// The node's heartbeat still lists the rollback it made before this rollout began;
			// that is history (decision 0006), and the refusal is what it is judged on.
		default:
			t.Errorf("the halt names %s %s: %s; want refused, marked bad", r.Node, r.Why, r.Detail)
		}
	}
	if !named {
		t.Errorf("the halt does not name %s: %s", bad.Name, whys(st.Halt.Nodes))
	}
	// And it did refuse: from the rollout's start on, its heartbeats say so (the halt may come
	// before the next one: the refusal of its key's revision was in the last word before).
	wctx, cancel := context.WithTimeout(s.ctx, 15*time.Second)
	defer cancel()
	if _, err := s.f.Beats.Wait(wctx, "node-1 refusing v1.1.0, marked bad", func(b Beat) bool {
		return b.Node == bad.Name && b.At.After(st.Batches[0].Started) && b.Refused != nil && b.Refused.What == "target" &&
			strings.Contains(b.Refused.Error, "marked bad")
	}); err != nil {
		t.Errorf("%s never heartbeat that it refused v1.1.0, marked bad, once the rollout began: %v", bad.Name, err)
	}
	if bad.Staged("v1.1.0") != 1 {
		t.Errorf("%s staged v1.1.0 %d times; once (before the rollout), never again", bad.Name, bad.Staged("v1.1.0"))
	}
	if s.touchedBy("node-3", "v1.1.0") {
		t.Errorf("node-3, not a canary, was targeted at, fetched or staged v1.1.0")
	}
}

// `rollout watch` upgrades the fleet by build announcement: v1.1.0 published starts a rollout;
// v1.1.1 published while it runs supersedes it (its state says superseded, by the new one), and
// the fleet ends on v1.1.1.
func TestRolloutWatchSupersedesARunningRolloutWhenANewerReleaseIsPublished(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 4})
	newer, err := s.f.BuildRelease(s.ctx, "v1.1.1", PkgHost)
	if err != nil {
		t.Fatal(err)
	}
	w := s.rollout(append([]string{"watch", "--json"}, rolloutFlags(20*time.Second, 3*time.Second)...)...)
	s.ship("v1.1.0", PkgHost)
	// v1.1.1 comes out while v1.1.0 is half-way: its canary runs it, the next batch is targeted.
	first := s.waitState("v1.1.0 running its second batch", func(st rollout.State) bool {
		return st.Version == "v1.1.0" && st.Status == rollout.StatusRunning && st.Current == 1 && !st.Batches[1].Started.IsZero()
	})
	if err := s.f.Release.Publish(s.ctx, newer); err != nil {
		t.Fatal(err)
	}
	second := s.waitState("v1.1.1 completed", func(st rollout.State) bool { return st.Version == "v1.1.1" && st.Status.Final() })
	if second.Status != rollout.StatusCompleted {
		t.Fatalf("the rollout of v1.1.1 ended %s, want completed", second.Status)
	}
	if old := s.stateOf(first.ID); old.Status != rollout.StatusSuperseded || old.SupersededBy != second.ID {
		t.Errorf("the rollout of v1.1.0 is %s, superseded by %q; want superseded by %s", old.Status, old.SupersededBy, second.ID)
	}
	s.allOn(s.f.Names(), "v1.1.1")
	s.targetsAfterCompletion("v1.1.1", s.f.Names())
	// The watch says so, for the person following it.
	if _, err := w.WaitEvent(s.ctx, "v1.1.0's rollout superseded", func(e rollout.Event) bool {
		return e.Kind == rollout.EventSuperseded && e.Rollout == first.ID
	}); err != nil {
		t.Error(err)
	}
	if code, err := w.Stop(s.ctx); err != nil || code != 0 {
		t.Errorf("the watch stopped with exit %d (%v), want 0", code, err)
	}
}

// The refusal the host answers a target with halts a rollout too, naming the node "refused"
// and why: here a node that does not trust the key the release is signed with (it fails
// verification there), so it never stages it.
func TestRolloutHaltsNamingTheNodeThatRefusesAReleaseItCannotVerify(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 90*time.Second, FleetOptions{Nodes: 2})
	s.ship("v1.1.0", PkgHost)

	// node-2 trusts another release key only.
	other := &Release{Bin: s.f.Release.Bin, KeyDir: t.TempDir()}
	key, err := other.Keygen(s.ctx)
	if err != nil {
		t.Fatal(err)
	}
	wary := s.f.Node("node-2")
	if _, err := wary.Stop(s.ctx); err != nil {
		t.Fatal(err)
	}
	wary.Env = append(wary.Env, "MESH_HOST_TRUSTED_KEYS="+key) // the last value of a variable wins
	// Both nodes' platforms known (a profile is detected after the host starts): a node whose
	// heartbeat names none counts as a platform of its own, which the canary batch would cover
	// with node-1 too.
	profiled := func(b Beat) bool { return b.Profile != nil }
	s.startAgain(wary, "node-2 back on v1.0.0 with its profile", func(b Beat) bool { return RunningConfirmed("v1.0.0")(b) && profiled(b) })
	if _, err := s.f.Beats.Wait(s.ctx, "node-1's profile", func(b Beat) bool { return b.Node == "node-1" && profiled(b) }); err != nil {
		t.Fatal(err)
	}

	st, _ := s.halted("v1.1.0", "--json", "--canary-nodes", "node-2", "--steps", "100%", "--window", "20s", "--soak", "2s")
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != 0 || len(st.Halt.Nodes) != 1 {
		t.Fatalf("the rollout ended %s (halt %+v); want halted in the canary batch, naming node-2", st.Status, st.Halt)
	}
	t.Logf("halted: %s: %s", whys(st.Halt.Nodes), st.Halt.Nodes[0].Detail)
	if r := st.Halt.Nodes[0]; r.Node != wary.Name || r.Why != rollout.WhyRefused || r.Detail == "" {
		t.Errorf("the halt names %s %s: %q; want node-2 refused, and why", r.Node, r.Why, r.Detail)
	}
	if wary.Has("v1.1.0") || wary.Staged("v1.1.0") != 0 {
		t.Errorf("node-2 staged v1.1.0, which it cannot verify")
	}
	if s.touchedBy("node-1", "v1.1.0") {
		t.Errorf("node-1, not a canary, was targeted at, fetched or staged v1.1.0")
	}
	if v, ok, _ := s.f.Target(s.ctx, "node.node-2"); ok && v != "v1.0.0" {
		t.Errorf("node-2's target names %s after the halt, want it set back to v1.0.0", v)
	}
}
