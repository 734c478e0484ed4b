package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The releases bucket holds roots (root.<n>) and the bus document beside the manifests: the
// watch takes neither for an announcement.
func TestWatchRollsOutEachNewerAnnouncementSupersedingAndSkipping(t *testing.T) {
	b := meshtest.StartBus(t)
	ns := sixNodes()
	ns[0].takes["v1.3.0"] = rollsBack
	startSim(t, b, ns...)
	publishRelease(t, b, "v1.0.0")
	publishRelease(t, b, "v1.1.0")
	ev := &events{}
	c := newController(t, connect(t, b), ev, "watch")
	o := testOptions("")
	o.CanaryNodes, o.Soak = []string{"node-1", "node-2"}, 2*time.Second
	ctx := meshtest.Context(t, 90*time.Second)
	watch := func() (context.CancelFunc, chan error) {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Watch(wctx, o) }()
		return cancel, done
	}
	stop, done := watch()
	defer func() { ev.dump(t) }()

	// On start: the newest announced, v1.1.0, is rolled out.
	waitEvent(t, ev, EventBatch, func(e Event) bool { return e.Version == "v1.1.0" })
	// A root and the bus document are put first: the watch reads the bucket in order, so by
	// v1.2.0's events it has passed them.
	b.Put(b.Names.Releases(), wire.RootKey(1), []byte("{}"))
	b.Put(b.Names.Releases(), "bus", []byte("{}"))
	// A newer announcement supersedes it.
	publishRelease(t, b, "v1.2.0")
	waitEvent(t, ev, EventSuperseded, func(e Event) bool { return e.Version == "v1.1.0" })
	waitEvent(t, ev, EventCompleted, func(e Event) bool { return e.Version == "v1.2.0" })
	if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.2.0" {
		t.Fatalf("fleet key = %q, want v1.2.0", v)
	}
	ev.mu.Lock()
	for _, e := range ev.all {
		if e.Version == wire.RootKey(1) || e.Version == "bus" {
			t.Errorf("an event about the key %s, which is no release: %s", e.Version, e.Message)
		}
	}
	ev.mu.Unlock()
	// An older one is skipped; a bad one halts.
	publishRelease(t, b, "v1.1.1")
	waitEvent(t, ev, EventSkipped, func(e Event) bool {
		return e.Version == "v1.1.1" && strings.Contains(e.Message, "not newer than the fleet target v1.2.0")
	})
	publishRelease(t, b, "v1.3.0")
	waitEvent(t, ev, EventHalted, func(e Event) bool { return e.Version == "v1.3.0" })
	stop()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	// Started again, it considers the newest announced, v1.3.0, and skips it: it halted.
	stop, done = watch()
	waitEvent(t, ev, EventSkipped, func(e Event) bool {
		return e.Version == "v1.3.0" && strings.Contains(e.Message, "halted it; a halted version is not rolled out again")
	})
	stop()
	if err := <-done; err != nil {
		t.Fatalf("watch ended with %v", err)
	}
	if p := ev.kinds(EventPublished); len(p) < 4 {
		t.Errorf("published events = %+v", p)
	}
	if v, _, _ := targetKey(t, b, wire.FleetTargetKey); v != "v1.2.0" {
		t.Errorf("fleet key = %q after the halt, want v1.2.0", v)
	}
}

func TestWatchResumesTheCurrentRolloutWhenItsLeaseLapsed(t *testing.T) {
	b := meshtest.StartBus(t)
	startSim(t, b, sixNodes()...)
	publishRelease(t, b, "v1.1.0")
	ctx := meshtest.Context(t, 60*time.Second)
	first := newController(t, connect(t, b), nil, "")
	st, err := first.Start(ctx, testOptions("v1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	// Its controller vanished on another host; its lease has run out.
	rewrite(t, b, st.ID, func(s *State) {
		s.Holder = &Holder{ID: "elsewhere pid 1", Host: "elsewhere", PID: 1, Since: time.Now().Add(-time.Hour), Until: time.Now().Add(-time.Minute)}
	})
	ev := &events{}
	c := newController(t, connect(t, b), ev, "watch")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Watch(wctx, testOptions("")) }()
	r := waitEvent(t, ev, EventResumed, nil)
	if !strings.Contains(r.Message, "the lease of elsewhere pid 1 lapsed") {
		t.Errorf("resumed = %s", r.Message)
	}
	waitEvent(t, ev, EventCompleted, nil)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(ev.kinds(EventStarted)); n != 0 {
		t.Errorf("%d rollouts started; the running one should have been resumed", n)
	}
	ev.dump(t)
}
