package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// waitEvent waits until ev holds an event of kind for which ok holds.
func waitEvent(t *testing.T, ev *events, kind string, ok func(Event) bool) Event {
	t.Helper()
	var got Event
	meshtest.Eventually(t, "a "+kind+" event", func() bool {
		for _, e := range ev.kinds(kind) {
			if ok == nil || ok(e) {
				got = e
				return true
			}
		}
		return false
	})
	return got
}

func TestASilentNodeIsLeftOutAndTakesTheFleetTargetWhenItReturns(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	s := startSim(t, b, sixNodes()...)
	s.with("node-6", func(n *simNode) { n.stopped = true })
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	ctx := meshtest.Context(t, 60*time.Second)
	o := testOptions("v1.1.0")
	o.CanaryNodes = []string{"node-1", "node-2"}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 6 {
		t.Fatalf("fleet = %v; node-6 was heard within --alive and belongs to it", st.Nodes)
	}
	st, err = c.Run(ctx, st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	if len(st.LeftOut) != 1 || st.LeftOut[0].Node != "node-6" || st.LeftOut[0].Batch == 0 || st.LeftOut[0].SilentSince.IsZero() {
		t.Fatalf("left out = %+v, want node-6 with since when", st.LeftOut)
	}
	if got := s.targeted("node-6"); len(got) != 0 {
		t.Errorf("node-6 was targeted with %v while silent", got)
	}
	if lo := ev.kinds(EventLeftOut); len(lo) != 1 || lo[0].Node != "node-6" || !strings.Contains(lo[0].Message, "node-6 left out of batch") {
		t.Errorf("left-out events = %+v", lo)
	}
	if c := ev.kinds(EventCompleted); len(c) != 1 || !strings.HasSuffix(c[0].Message, "(1 left out)") {
		t.Errorf("completed = %+v", c)
	}
	s.with("node-6", func(n *simNode) { n.stopped = false })
	meshtest.Eventually(t, "node-6 taking the fleet target", func() bool {
		var running string
		s.with("node-6", func(n *simNode) { running = n.running })
		return running == "v1.1.0"
	})
}

func TestTwoControllersStartingAtOnceOneActsTheOtherSaysWhoHoldsIt(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	startSim(t, b, sixNodes()...)
	ctx := meshtest.Context(t, 60*time.Second)
	cs := []*Controller{newController(t, connect(t, b), nil, "first"), newController(t, connect(t, b), nil, "second")}
	var wg sync.WaitGroup
	results := make([]error, 2)
	states := make([]State, 2)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], results[i] = c.Start(ctx, testOptions("v1.1.0"))
		}()
	}
	wg.Wait()
	var running *RunningError
	won := -1
	for i, err := range results {
		switch {
		case err == nil:
			won = i
		case errors.As(err, &running):
			if !strings.Contains(err.Error(), "is running (batch 1 of 3, held by ") || !strings.Contains(err.Error(), "add --supersede") {
				t.Errorf("running error = %v", err)
			}
		default:
			t.Errorf("controller %d: %v", i, err)
		}
	}
	if won < 0 || running == nil {
		t.Fatalf("results = %v; want one start and one RunningError", results)
	}
	// The other may not run it either while the lease is live.
	_, err := cs[1-won].Run(ctx, states[won].ID)
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.Extra != []string{"first", "second"}[won] {
		t.Fatalf("run by the other = %v, want a HeldError naming the holder", err)
	}
	for _, want := range []string{"is held by ", " pid ", "its lease runs until", "it lapses then if that controller is gone"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if _, err := cs[1-won].Resume(ctx); !errors.As(err, &held) {
		t.Errorf("resume by the other = %v, want a HeldError", err)
	}
}

// rewrite changes the stored state of rollout id (compare-and-set on its head), as a killed
// controller would have left it.
func rewrite(t *testing.T, b *meshtest.Bus, id string, change func(*State)) {
	t.Helper()
	ctx := meshtest.Context(t, 10*time.Second)
	s, err := openStore(ctx, connect(t, b), b.Names, targets.Signer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, rev, err := s.get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	change(&st)
	if _, err := s.saveState(ctx, st, rev); err != nil {
		t.Fatal(err)
	}
}

// asSchemaOne replaces rollout st's head and chunks by the one value the layout before decision
// 0021 wrote (compare-and-set on the head).
func asSchemaOne(t *testing.T, b *meshtest.Bus, st State) {
	t.Helper()
	ctx := meshtest.Context(t, 10*time.Second)
	kv := b.KV(b.Names.Rollouts())
	e, err := kv.Get(ctx, stateKey(st.ID))
	if err != nil {
		t.Fatal(err)
	}
	var h head
	if err := json.Unmarshal(e.Value(), &h); err != nil || h.NodeList == nil {
		t.Fatalf("the head %s names no chunks (%v)", e.Value(), err)
	}
	for k := range h.NodeList.Chunks {
		if err := kv.Purge(ctx, chunkKey(st.ID, k)); err != nil {
			t.Fatal(err)
		}
	}
	st.Schema = schemaOneValue
	v, _ := json.Marshal(st)
	if _, err := kv.Update(ctx, stateKey(st.ID), v, e.Revision()); err != nil {
		t.Fatal(err)
	}
}

// deadPID is the pid of a process that has exited.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		meshtest.SkipUnlessCI(t, "no `true` to run: %v", err)
	}
	return cmd.Process.Pid
}

func TestAResumedRolloutContinuesWithoutRepeatingAFinishedBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after func(t *testing.T, b *meshtest.Bus, c *Controller, st State)
		why   string
	}{
		{name: "the holder's context ended: its lease is released", why: "no controller held it"},
		{name: "the holder was killed: same host, its pid gone, its lease still running",
			after: func(t *testing.T, b *meshtest.Bus, c *Controller, st State) {
				rewrite(t, b, st.ID, func(s *State) {
					s.Holder = &Holder{ID: "killed", Host: c.host, PID: deadPID(t), Since: time.Now(), Until: time.Now().Add(time.Hour)}
				})
			}, why: "killed is gone"},
		// Decision 0021: a rollout a controller of the previous layout stopped (one value, schema
		// 1, no chunks) is resumed, and written back as a head and chunks.
		{name: "the holder wrote the state as one value (schema 1)",
			after: func(t *testing.T, b *meshtest.Bus, _ *Controller, st State) { asSchemaOne(t, b, st) },
			why:   "no controller held it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			publishRelease(t, b, "v1.1.0")
			s := startSim(t, b, sixNodes()...)
			ev1, ev2 := &events{}, &events{}
			c1 := newController(t, connect(t, b), ev1, "")
			ctx := meshtest.Context(t, 60*time.Second)
			st, err := c1.Start(ctx, testOptions("v1.1.0"))
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			go func() {
				waitEvent(t, ev1, EventBatchDone, nil)
				cancel()
			}()
			st, err = c1.Run(rctx, st.ID)
			if !errors.Is(err, context.Canceled) || st.Status != StatusRunning {
				t.Fatalf("cancelled run = %s, %v", st.Status, err)
			}
			stored, err := Get(ctx, b.Conn.JS, b.Names, st.ID)
			if err != nil || stored.Holder != nil || stored.Current < 1 || stored.Batches[0].Done.IsZero() {
				t.Fatalf("stored after the cancel = %+v, %v; want batch 1 done and the lease released", stored, err)
			}
			if tc.after != nil {
				tc.after(t, b, c1, stored)
			}
			c2 := newController(t, connect(t, b), ev2, "")
			st, err = c2.Resume(ctx)
			ev1.dump(t)
			ev2.dump(t)
			if err != nil || st.Status != StatusCompleted {
				t.Fatalf("resume = %s, %v", st.Status, err)
			}
			if r := ev2.kinds(EventResumed); len(r) != 1 || !strings.Contains(r[0].Message, tc.why) {
				t.Errorf("resumed events = %+v, want one saying %q", r, tc.why)
			}
			for _, e := range ev2.kinds(EventBatch) {
				if e.Batch == 1 {
					t.Errorf("the resumed controller began batch 1 again: %s", e.Message)
				}
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, n := range st.Nodes {
				if p := s.puts[wire.NodeTargetKey(n)]; p != 1 {
					t.Errorf("node.%s was written %d times; each target is set once", n, p)
				}
			}
		})
	}
}

func TestAbortStopsTheRolloutAndSetsTheBatchBack(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	ctx := meshtest.Context(t, 60*time.Second)
	if _, err := Abort(ctx, b.Conn.JS, b.Names, "alice", testSigner); !errors.Is(err, ErrNoRollout) {
		t.Fatalf("abort with no rollout = %v", err)
	}
	ns := sixNodes()
	ns[0].takes["v1.1.0"] = hangs
	startSim(t, b, ns...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	if _, err := c.Resume(ctx); !errors.Is(err, ErrNoRollout) {
		t.Fatalf("resume with no rollout = %v", err)
	}
	o := testOptions("v1.1.0")
	o.CanaryNodes, o.Window = []string{"node-1", "node-2"}, 30*time.Second
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	done := runAsync(ctx, c, st.ID)
	waitEvent(t, ev, EventConfirmed, func(e Event) bool { return e.Node == "node-2" })
	ab, err := Abort(ctx, b.Conn.JS, b.Names, "alice@web-01", testSigner)
	if err != nil || ab.Status != StatusAborted || ab.AbortedBy != "alice@web-01" || !ab.Restored {
		t.Fatalf("abort = %+v, %v", ab, err)
	}
	res := <-done
	ev.dump(t)
	if res.err != nil || res.st.Status != StatusAborted {
		t.Fatalf("run after the abort = %s, %v", res.st.Status, res.err)
	}
	if a := ev.kinds(EventAborted); len(a) != 1 || !strings.Contains(a[0].Message, "ABORTED by alice@web-01") {
		t.Errorf("aborted events = %+v", a)
	}
	for _, n := range []string{"node-1", "node-2"} {
		if v, _, _ := targetKey(t, b, wire.NodeTargetKey(n)); v != "v1.0.0" {
			t.Errorf("target of %s = %q, want v1.0.0", n, v)
		}
	}
	if _, _, ok := targetKey(t, b, wire.FleetTargetKey); ok {
		t.Error("an aborted rollout set the fleet key")
	}
	var nr *NotRunningError
	if _, err := Abort(ctx, b.Conn.JS, b.Names, "bob", testSigner); !errors.As(err, &nr) || !strings.Contains(err.Error(), "is aborted (ended ") {
		t.Errorf("abort again = %v", err)
	}
	if _, err := c.Resume(ctx); !errors.As(err, &nr) {
		t.Errorf("resume of an aborted rollout = %v", err)
	}
}

func TestAHaltLeftUnrestoredIsRestoredByTheNextController(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	ns := sixNodes()
	ns[0].takes["v1.1.0"] = rollsBack
	startSim(t, b, ns...)
	ctx := meshtest.Context(t, 60*time.Second)
	c := newController(t, connect(t, b), nil, "")
	o := testOptions("v1.1.0")
	o.CanaryNodes = []string{"node-1", "node-2"}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if st, err = c.Run(ctx, st.ID); err != nil || st.Status != StatusHalted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	// As if the controller died between writing halted and setting the targets back.
	rewrite(t, b, st.ID, func(s *State) { s.Restored = false })
	putTarget(t, b, wire.NodeTargetKey("node-2"), "v1.1.0")
	var nr *NotRunningError
	got, err := newController(t, connect(t, b), nil, "").Resume(ctx)
	if !errors.As(err, &nr) || !got.Restored || !strings.Contains(err.Error(), "is halted") {
		t.Fatalf("resume = %+v, %v", got.Restored, err)
	}
	if v, _, _ := targetKey(t, b, wire.NodeTargetKey("node-2")); v != "v1.0.0" {
		t.Errorf("node-2's target = %q, want it set back", v)
	}
}

func TestSupersedeReplacesARunningRollout(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	publishRelease(t, b, "v1.2.0")
	ns := sixNodes()
	ns[0].takes["v1.1.0"] = hangs
	startSim(t, b, ns...)
	ctx := meshtest.Context(t, 60*time.Second)
	ev1, ev2 := &events{}, &events{}
	c1, c2 := newController(t, connect(t, b), ev1, ""), newController(t, connect(t, b), ev2, "")
	o := testOptions("v1.1.0")
	o.CanaryNodes, o.Window = []string{"node-1", "node-2"}, 30*time.Second
	first, err := c1.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan State, 1)
	go func() {
		st, err := c1.Run(ctx, first.ID)
		if err != nil {
			t.Errorf("the superseded run: %v", err)
		}
		done <- st
	}()
	waitEvent(t, ev1, EventBatch, nil)
	var running *RunningError
	if _, err := c2.Start(ctx, testOptions("v1.2.0")); !errors.As(err, &running) || running.State.ID != first.ID {
		t.Fatalf("start without --supersede = %v", err)
	}
	o2 := testOptions("v1.2.0")
	o2.Supersede = true
	second, err := c2.Start(ctx, o2)
	if err != nil {
		t.Fatal(err)
	}
	old := <-done
	if old.Status != StatusSuperseded || old.SupersededBy != second.ID {
		t.Fatalf("old = %s by %q", old.Status, old.SupersededBy)
	}
	if s := ev1.kinds(EventSuperseded); len(s) != 1 || !strings.Contains(s[0].Message, second.ID) {
		t.Errorf("superseded events = %+v", s)
	}
	st, err := c2.Run(ctx, second.ID)
	ev1.dump(t)
	ev2.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("the new rollout = %s, %v", st.Status, err)
	}
	if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.2.0" {
		t.Errorf("fleet key = %q", v)
	}
	if cur, ok, err := Current(ctx, b.Conn.JS, b.Names); err != nil || !ok || cur.ID != second.ID {
		t.Errorf("current = %s, %v, %v", cur.ID, ok, err)
	}
}

func TestRolloutsThatNeedNoBatchCompleteAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		nodes  []*simNode
		count  int
	}{
		{"policy immediate: the fleet key at once", PolicyImmediate, sixNodes(), 6},
		{"no node needs it", PolicyCanary, []*simNode{node("a", "v1.1.0"), node("b", "v1.2.0")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			publishRelease(t, b, "v1.1.0")
			putTarget(t, b, wire.NodeTargetKey("node-1"), "v1.0.0")
			startSim(t, b, tc.nodes...)
			ev := &events{}
			c := newController(t, connect(t, b), ev, "")
			o := testOptions("v1.1.0")
			o.Policy = tc.policy
			st, err := c.Start(meshtest.Context(t, 30*time.Second), o)
			ev.dump(t)
			if err != nil || st.Status != StatusCompleted || len(st.Nodes) != tc.count || len(st.Batches) != 0 {
				t.Fatalf("start = %+v, %v", st, err)
			}
			if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.1.0" {
				t.Errorf("fleet key = %q", v)
			}
			if _, _, ok := targetKey(t, b, wire.NodeTargetKey("node-1")); ok == (tc.count > 0) {
				t.Errorf("node-1's own key present = %v", ok)
			}
			if len(ev.kinds(EventStarted)) != 1 || len(ev.kinds(EventCompleted)) != 1 {
				t.Errorf("events = %+v", ev.all)
			}
		})
	}
}

func TestStartRefusesAVersionNotPublished(t *testing.T) {
	b := meshtest.StartBus(t)
	startSim(t, b, sixNodes()...)
	c := newController(t, connect(t, b), nil, "")
	_, err := c.Start(meshtest.Context(t, 10*time.Second), testOptions("v9.9.9"))
	if err == nil || !strings.Contains(err.Error(), "v9.9.9 is not published in mesh_host_releases") {
		t.Fatalf("err = %v", err)
	}
}

// A rollout superseding the current one of its own version within the same second (its id is
// that second and the version) still starts, under the next second's id.
func TestSupersedingARolloutOfTheSameVersionInTheSameSecondStarts(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	startSim(t, b, sixNodes()...)
	ctx := t.Context()
	c := newController(t, connect(t, b), nil, "")
	o := testOptions("v1.1.0")
	o.Window = 30 * time.Second
	// Both starts take a few milliseconds on loopback: begun just after a second ticks, they
	// share it (the test logs whether they did; sharing it is the case that failed).
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	first, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Supersede = true
	second, err := c.Start(ctx, o)
	if err != nil {
		t.Fatalf("superseding %s within its second: %v", first.ID, err)
	}
	t.Logf("first %s (created %s), second %s (created %s)", first.ID, first.Created.Format(time.StampMilli), second.ID, second.Created.Format(time.StampMilli))
	if second.ID == first.ID || second.Supersedes != first.ID {
		t.Fatalf("second rollout %s supersedes %q; want a new id superseding %s", second.ID, second.Supersedes, first.ID)
	}
	if cur, ok, err := Current(ctx, b.Conn.JS, b.Names); err != nil || !ok || cur.ID != second.ID {
		t.Errorf("current = %s, %v, %v; want %s", cur.ID, ok, err, second.ID)
	}
}
