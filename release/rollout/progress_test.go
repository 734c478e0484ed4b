package rollout

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Issue 18, item 4: `--follow` while soaking printed "0/1 soaked" every 2s and ran 30s past the
// soak, waiting for a heartbeat, without saying so. A progress line says the time left in the
// soak, and once that is over by the controller's clock, whose heartbeat it waits for.
func TestProgressSaysTheTimeLeftInTheSoakAndWhoseHeartbeatItWaitsFor(t *testing.T) {
	st := sampleRunning()
	nine := []string{"n02", "n03", "n04", "n05", "n06", "n07", "n08", "n09"}
	for _, tc := range []struct {
		name string
		v    progressView
		want string
	}{
		{"confirming", progressView{confirmed: 1, nodes: 2, elapsed: 40 * time.Second, windowLeft: 9*time.Minute + 20*time.Second},
			"batch 2/3 (50%): 1/2 confirmed, 0/2 soaked; 40s elapsed, 9m20s left in the window"},
		{"soaking", progressView{confirmed: 1, nodes: 1, elapsed: 40 * time.Second, soaking: 1, soakLeft: 80 * time.Second},
			"batch 2/3 (50%): 1/1 confirmed, 0/1 soaked; 40s elapsed; about 1m20s of the soak left"},
		{"soak over, one node heard again soon", progressView{confirmed: 1, nodes: 1, elapsed: 2*time.Minute + 5*time.Second,
			waiting: []string{"n02"}, waitingN: 1, heardAgo: 12 * time.Second, every: 30 * time.Second},
			"batch 2/3 (50%): 1/1 confirmed, 0/1 soaked; 2m5s elapsed; soak over, waiting for the next heartbeat of n02 (last heard 12s ago; it heartbeats every 30s, so a soak can last up to 30s more)"},
		{"soak over, a host that does not say its interval", progressView{confirmed: 1, nodes: 1, elapsed: 2*time.Minute + 5*time.Second,
			waiting: []string{"n02"}, waitingN: 1, heardAgo: 12 * time.Second},
			"batch 2/3 (50%): 1/1 confirmed, 0/1 soaked; 2m5s elapsed; soak over, waiting for the next heartbeat of n02 (last heard 12s ago)"},
		{"soaking and waiting, many nodes", progressView{confirmed: 12, soaked: 2, nodes: 13, elapsed: time.Minute, windowLeft: 9 * time.Minute,
			soaking: 1, soakLeft: 3 * time.Second, waiting: nine, waitingN: 9},
			"batch 2/3 (50%): 12/13 confirmed, 2/13 soaked; 1m elapsed, 9m left in the window; about 3s of the soak left; " +
				"soak over, waiting for the next heartbeat of n02, n03, n04, n05, n06, n07, n08, n09 and 1 more"},
		{"nodes waiting for their maintenance windows, each with its opening", progressView{confirmed: 0, nodes: 2, elapsed: time.Minute, windowLeft: 9 * time.Minute,
			windows: []NodeWindow{{Node: "n02", Opens: time.Date(2026, 12, 2, 2, 0, 0, 0, time.FixedZone("CET", 3600))},
				{Node: "n03", Opens: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}}, windowsN: 2},
			"batch 2/3 (50%): 0/2 confirmed, 0/2 soaked; 1m elapsed, 9m left in the window; 2 staged and waiting for their maintenance window: " +
				"n02 (opens 2026-12-02T02:00+01:00), n03 (opens 2026-12-02T03:00Z)"},
		{"the bus away", progressView{confirmed: 0, nodes: 1, elapsed: time.Minute, windowLeft: 9 * time.Minute, busAway: true},
			"batch 2/3 (50%): 0/1 confirmed, 0/1 soaked; 1m elapsed, 9m left in the window; judging paused: the bus is away"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressMessage(st, 1, tc.v); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// A progress line is not printed again while it would say the same but for the clock: only
// when it says something new, or once the last is quietProgress intervals old.
func TestProgressIsDueWhenItSaysSomethingNewOrTheLastIsQuietOld(t *testing.T) {
	t0 := at(13, 0, 0)
	said := progressSaid{gist: "1/0/1 soaking 1", at: t0}
	for _, tc := range []struct {
		name string
		said progressSaid
		gist string
		now  time.Time
		want bool
	}{
		{"the first of a batch", progressSaid{}, "1/0/1 soaking 1", t0, true},
		{"the same, soon after", said, "1/0/1 soaking 1", t0.Add(2 * time.Second), false},
		{"the same, just before the quiet interval", said, "1/0/1 soaking 1", t0.Add(10*time.Second - time.Millisecond), false},
		{"the same, after the quiet interval", said, "1/0/1 soaking 1", t0.Add(10 * time.Second), true},
		{"something new", said, "1/0/1 soaking 0 waiting 1 [n1]", t0.Add(2 * time.Second), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.said.due(tc.gist, tc.now, 10*time.Second); got != tc.want {
				t.Errorf("due = %v, want %v", got, tc.want)
			}
		})
	}
}

// With the bus and a node that heartbeats every 2s, a batch soaking for 1s: the controller's
// progress events say the soak's time left, then that it waits for the node's next heartbeat,
// naming it; the JSON fields say the same.
func TestFollowWhileSoakingSaysTheTimeLeftThenWaitsForTheNextHeartbeatByName(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	startSimEvery(t, b, 2*time.Second, node("n1", "v1.0.0"))
	ev := &events{}
	c, err := New(Config{JS: connect(t, b), Events: ev.add, Tick: 50 * time.Millisecond, Progress: 100 * time.Millisecond, Key: testSigner.Key})
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions("v1.1.0")
	o.CanaryNodes, o.Steps, o.Window, o.Soak = []string{"n1"}, []int{100}, 30*time.Second, time.Second
	st, err := c.Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.Run(t.Context(), st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	p := ev.kinds(EventProgress)
	soaking := slices.IndexFunc(p, func(e Event) bool {
		return strings.HasSuffix(e.Message, " of the soak left") && e.SoakLeftS > 0 && e.Confirmed == 1
	})
	waiting := slices.IndexFunc(p, func(e Event) bool {
		return strings.Contains(e.Message, "; soak over, waiting for the next heartbeat of n1 (last heard ") &&
			slices.Equal(e.Waiting, []string{"n1"}) && e.SoakLeftS == 0
	})
	if soaking < 0 || waiting < 0 || waiting < soaking {
		t.Errorf("progress events %d (the soak's time left) and %d (waiting for n1's heartbeat); want both, in that order", soaking, waiting)
	}
}

// A running rollout that no controller drives — none holds it, or its holder's lease lapsed —
// says paused, not running, in `rollout status`, the line on top of `fleet`, and the refusal to
// start another.
func TestARolloutNoControllerDrivesSaysPaused(t *testing.T) {
	now := at(13, 16, 0)
	released := sampleRunning()
	released.Holder = nil
	lapsed := sampleRunning()
	lapsed.Holder.Until = at(13, 15, 0)
	for _, tc := range []struct {
		name                  string
		st                    State
		status, summary, errs string
	}{
		{"a live lease", sampleRunning(), "  status      running, batch 2/3 (50%)\n",
			"): running, batch 2/3 (50%), started 4m ago", "is running (batch 2 of 3, held by build-01 pid 4242)"},
		{"released (the controller stopped by a signal)", released, "  status      paused, batch 2/3 (50%)\n",
			"): paused, batch 2/3 (50%), started 4m ago; no controller drives it", "is paused (batch 2 of 3, held by no controller: `mesh-release rollout resume` continues it)"},
		{"its lease lapsed (the controller killed)", lapsed, "  status      paused, batch 2/3 (50%)\n",
			"): paused, batch 2/3 (50%), started 4m ago; no controller drives it", "is paused (batch 2 of 3, no controller since the lease of build-01 pid 4242 lapsed at 2026-11-29T13:15:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteStatus(&b, tc.st, now); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tc.status) {
				t.Errorf("status has no %q:\n%s", tc.status, b.String())
			}
			if got := Summary(tc.st, now); !strings.Contains(got, tc.summary) {
				t.Errorf("summary %q has no %q", got, tc.summary)
			}
			if tc.st.Paused(now) != (tc.name != "a live lease") {
				t.Errorf("Paused = %v", tc.st.Paused(now))
			}
			// The refusal is judged as of when it is said: live leases end in the samples' past.
			st := tc.st
			if st.Holder != nil && st.Holder.Until.After(now) {
				st.Holder.Until = time.Now().Add(time.Hour)
			}
			var err error = &RunningError{State: st}
			var re *RunningError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.errs) {
				t.Errorf("refusal %q has no %q", err, tc.errs)
			}
		})
	}
}

// Issue 27 §4: `--follow` said `waiting for the next heartbeat of web-01 (last heard 21s ago,
// every 100ms)`: the gap between the node's last two heartbeats, both sent on events, not how
// often it heartbeats. A node that heartbeats every 2s and again on an event 100ms after each:
// the line says every 2s, and that the soak can last that much more.
func TestFollowSaysTheNodesHeartbeatIntervalNotTheGapBetweenItsLastTwo(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.1.0")
	startSimEchoing(t, b, 2*time.Second, 100*time.Millisecond, node("n1", "v1.0.0"))
	ev := &events{}
	c, err := New(Config{JS: connect(t, b), Events: ev.add, Tick: 50 * time.Millisecond, Progress: 100 * time.Millisecond, Key: testSigner.Key})
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions("v1.1.0")
	o.CanaryNodes, o.Steps, o.Window, o.Soak = []string{"n1"}, []int{100}, 30*time.Second, time.Second
	st, err := c.Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	st, err = c.Run(t.Context(), st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusCompleted {
		t.Fatalf("run = %s, %v", st.Status, err)
	}
	var waiting []string
	for _, e := range ev.kinds(EventProgress) {
		if strings.Contains(e.Message, "waiting for the next heartbeat of n1") {
			waiting = append(waiting, e.Message)
		}
	}
	if len(waiting) == 0 {
		t.Fatal("no progress line said it waits for n1's next heartbeat")
	}
	for _, m := range waiting {
		if !strings.Contains(m, "; it heartbeats every 2s, so a soak can last up to 2s more)") {
			t.Errorf("progress %q does not give n1's heartbeat interval (2s) and what it costs the soak", m)
		}
	}
}

// The interval a heartbeat states is read only when it is one a person waits on: none, a
// negative, NaN or one past a week (which would overflow) is unknown.
func TestAHeartbeatsStatedIntervalIsReadWithinBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    float64
		err  error
		want time.Duration
	}{
		{"thirty seconds", 30, nil, 30 * time.Second},
		{"under a second", 0.25, nil, 250 * time.Millisecond},
		{"not said (an older host)", 0, nil, 0},
		{"negative", -5, nil, 0},
		{"NaN", math.NaN(), nil, 0},
		{"past a week", 1e300, nil, 0},
		{"an unreadable heartbeat", 30, errors.New("bad"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := track{heard: true, last: fleet.Entry{Heartbeat: wire.Heartbeat{IntervalS: tc.s}, Err: tc.err}}
			if got := tr.interval(); got != tc.want {
				t.Errorf("interval = %s, want %s", got, tc.want)
			}
		})
	}
}
