package host

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// clock is an injected clock the test moves.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.at = t; c.mu.Unlock() }

func kept(t *testing.T, key string, nodes []string, spec string, expires time.Time) *keptWindow {
	t.Helper()
	s, err := wire.ParseWindowSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wire.NewWindow(key, nodes, s, 0, expires.Add(-time.Hour), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	return &keptWindow{Key: key, Window: w, spec: s}
}

func at(t *testing.T, zone, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// The judgement of a stand-aside by the node's clock: an upgrade waits outside the window and
// goes inside it; a step down, a withdrawn running version and an urgent target never wait; an
// expired window is not kept.
func TestJudgeWindowHoldsOnlyAnUpgradeOutsideTheWindow(t *testing.T) {
	far := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	weekdays := kept(t, wire.FleetWindowKey, nil, "mon-fri 02:00-04:00 Europe/Brussels", far)
	sunday := kept(t, wire.FleetWindowKey, nil, "sun 02:00-04:00 Europe/Brussels", far)
	for _, tc := range []struct {
		name  string
		in    windowInput
		now   time.Time
		hold  bool
		opens string // the heartbeat's opening, as WaitingLine writes it ("" for no window)
	}{
		{"no window: never waits", windowInput{running: "v1.0.0", choice: "v1.1.0"}, at(t, "UTC", "2026-12-02 12:00"), false, ""},
		{"an upgrade before the window opens waits for today's opening", windowInput{kept: weekdays, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "Europe/Brussels", "2026-12-02 01:59"), true, "2026-12-02T02:00+01:00"},
		{"the window opening: goes", windowInput{kept: weekdays, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "Europe/Brussels", "2026-12-02 02:00"), false, "2026-12-02T02:00+01:00"},
		{"the window closed: waits for tomorrow's", windowInput{kept: weekdays, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "Europe/Brussels", "2026-12-02 04:00"), true, "2026-12-03T02:00+01:00"},
		{"staged on friday night after it closed: waits for monday", windowInput{kept: weekdays, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "Europe/Brussels", "2026-12-04 23:00"), true, "2026-12-07T02:00+01:00"},
		{"nothing newer: waits for nothing", windowInput{kept: weekdays, running: "v1.1.0", choice: "v1.1.0"},
			at(t, "Europe/Brussels", "2026-12-02 12:00"), false, "2026-12-03T02:00+01:00"},
		{"a step down (a version marked bad) never waits", windowInput{kept: weekdays, running: "v1.1.0", choice: "v1.0.0"},
			at(t, "Europe/Brussels", "2026-12-02 12:00"), false, "2026-12-03T02:00+01:00"},
		{"a withdrawn running version never waits", windowInput{kept: weekdays, running: "v1.1.0", choice: "v1.2.0", runningWithdrawn: true},
			at(t, "Europe/Brussels", "2026-12-02 12:00"), false, "2026-12-03T02:00+01:00"},
		{"an urgent target never waits", windowInput{kept: weekdays, running: "v1.0.0", choice: "v1.1.0", urgent: true},
			at(t, "Europe/Brussels", "2026-12-02 12:00"), false, "2026-12-03T02:00+01:00"},
		{"an expired window is not kept", windowInput{kept: kept(t, wire.FleetWindowKey, nil, "mon-fri 02:00-04:00 Europe/Brussels", at(t, "UTC", "2026-12-01 00:00")), running: "v1.0.0", choice: "v1.1.0"},
			at(t, "Europe/Brussels", "2026-12-02 12:00"), false, ""},
		// Europe/Brussels skips 02:00-03:00 on 2027-03-28: the window opens at 03:00 CEST.
		{"DST spring forward: waits until 03:00 CEST", windowInput{kept: sunday, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "UTC", "2027-03-28 00:59"), true, "2027-03-28T03:00+02:00"},
		{"DST spring forward: open at 03:00 CEST", windowInput{kept: sunday, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "UTC", "2027-03-28 01:00"), false, "2027-03-28T03:00+02:00"},
		{"DST spring forward: closed at 04:00 CEST, an hour later", windowInput{kept: sunday, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "UTC", "2027-03-28 02:00"), true, "2027-04-04T02:00+02:00"},
		// And 2027-10-31 has 02:00-03:00 twice: the window opens at the second.
		{"DST fall back: the first 02:00 is not yet the window", windowInput{kept: sunday, running: "v1.0.0", choice: "v1.1.0"},
			at(t, "UTC", "2027-10-31 00:30"), true, "2027-10-31T02:00+01:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judgeWindow(tc.in, tc.now)
			if v.hold != tc.hold {
				t.Errorf("hold = %v, want %v", v.hold, tc.hold)
			}
			if tc.opens == "" {
				if v.state != nil && v.state.ExpiredSince == nil {
					t.Errorf("window state %+v, want none (or expired)", v.state)
				}
				return
			}
			if v.state == nil {
				t.Fatal("no window state")
			}
			if got := v.state.Opens.Format(wire.WindowTimeLayout); got != tc.opens {
				t.Errorf("opens %s, want %s", got, tc.opens)
			}
			if tc.hold {
				want := "staged " + tc.in.choice + ", waiting for the window (opens " + tc.opens + ")"
				if v.state.WaitingFor != tc.in.choice || v.state.Waiting != want {
					t.Errorf("waiting for %q: %q, want %q", v.state.WaitingFor, v.state.Waiting, want)
				}
			} else if v.state.WaitingFor != "" {
				t.Errorf("waiting for %q while not holding", v.state.WaitingFor)
			}
		})
	}
}

// stagedRoot is a root where v1.0.0 runs confirmed and v1.1.0 is staged beside it.
func stagedRoot(t *testing.T) string {
	t.Helper()
	root := confirmedRoot(t, "v1.0.0")
	placeFake(t, root, "v1.1.0")
	return root
}

func putWindow(t *testing.T, b *meshtest.Bus, key string, nodes []string, spec string) {
	t.Helper()
	s, err := wire.ParseWindowSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wire.NewWindow(key, nodes, s, 0, time.Now(), time.Hour*24*365, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	putTarget(b, key, w.Marshal())
}

func waitDone(t *testing.T, th *testHost, what string) {
	t.Helper()
	select {
	case <-th.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the host did not stand aside:\n%s", what, th.logs.String())
	}
}

// A node with a newer version staged waits for its window, saying so in its heartbeat and for
// `mesh-launcher status`; when its clock reaches the opening it stands aside. Its window holds
// while it is cut off from the bus: the bus is gone before the window opens.
func TestANodeStagedWaitsForItsWindowAndStandsAsideWhenItOpensEvenCutOff(t *testing.T) {
	for _, cutOff := range []bool{false, true} {
		name := "linked"
		if cutOff {
			name = "cut off from the bus when the window opens"
		}
		t.Run(name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			hbs := b.Heartbeats("n1")
			putWindow(t, b, wire.NodeWindowKey("n1"), []string{"n1"}, "mon-fri 02:00-04:00 Europe/Brussels")
			c := &clock{at: at(t, "Europe/Brussels", "2026-12-02 01:00")}
			root := confirmedRoot(t, "v1.0.0")
			th := startHostWith(t, root, "n1", b.URL(), "v1.0.0", func(o *Options) { o.Now = c.Now })
			meshtest.WaitHeartbeat(t, hbs, "the window kept", func(hb wire.Heartbeat) bool { return hb.Window != nil })
			// Staged as a delivery stages it, which then has the host check Choose.
			placeFake(t, root, "v1.1.0")
			th.h.recheckSoon()
			hb := meshtest.WaitHeartbeat(t, hbs, "waiting for the window", func(hb wire.Heartbeat) bool {
				return hb.Window != nil && hb.Window.WaitingFor == "v1.1.0"
			})
			if want := "staged v1.1.0, waiting for the window (opens 2026-12-02T02:00+01:00)"; hb.Window.Waiting != want || hb.Window.Key != wire.NodeWindowKey("n1") {
				t.Errorf("heartbeat window %+v, want %q", hb.Window, want)
			}
			ww, err := rollback.ReadWindowWait(root)
			if err != nil || ww == nil || ww.Line() != hb.Window.Waiting {
				t.Errorf("the wait left for status: %+v, %v; want the heartbeat's line", ww, err)
			}
			if _, err := os.Stat(filepath.Join(root, WindowFile)); err != nil {
				t.Errorf("the window is not kept on disk: %v", err)
			}
			select {
			case <-th.done:
				t.Fatalf("stood aside outside the window: %+v", th.res)
			default:
			}
			if cutOff {
				b.Stop()
			}
			c.Set(at(t, "Europe/Brussels", "2026-12-02 02:00"))
			th.h.recheckSoon() // the timer armed for the opening, which the injected clock does not drive
			waitDone(t, th, "the window opened")
			if th.err != nil || th.res.StoodAsideFor != "v1.1.0" {
				t.Fatalf("result %+v, %v; want stood aside for v1.1.0", th.res, th.err)
			}
			if ww, err := rollback.ReadWindowWait(root); err != nil || ww != nil {
				t.Errorf("the wait is still left for status after standing aside: %+v, %v", ww, err)
			}
		})
	}
}

// A host started while cut off from the bus keeps the window it accepted before (from
// ROOT/window.json): with a newer version staged it waits; a window for other nodes, or one
// that no longer verifies, is not kept from disk.
func TestAHostStartedCutOffKeepsTheWindowItAcceptedBefore(t *testing.T) {
	for _, tc := range []struct {
		name string
		k    *keptWindow
		hold bool
	}{
		{"its own window", kept(t, wire.NodeWindowKey("n1"), []string{"n1"}, "mon-fri 02:00-04:00 Europe/Brussels", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), true},
		{"a window for another node", kept(t, wire.NodeWindowKey("n2"), []string{"n2"}, "mon-fri 02:00-04:00 Europe/Brussels", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := stagedRoot(t)
			b, _ := json.Marshal(tc.k)
			if err := os.WriteFile(filepath.Join(root, WindowFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			c := &clock{at: at(t, "Europe/Brussels", "2026-12-02 12:00")}
			// No bus at all: the host runs disconnected.
			th := startHostWith(t, root, "n1", "", "v1.0.0", func(o *Options) { o.Now = c.Now })
			if !tc.hold {
				waitDone(t, th, "no window kept")
				if th.res.StoodAsideFor != "v1.1.0" {
					t.Fatalf("result %+v, %v", th.res, th.err)
				}
				return
			}
			deadline := time.Now().Add(30 * time.Second)
			for {
				ww, _ := rollback.ReadWindowWait(root)
				if ww != nil {
					if ww.Version != "v1.1.0" || ww.Opens.Format(wire.WindowTimeLayout) != "2026-12-03T02:00+01:00" {
						t.Fatalf("wait %+v", ww)
					}
					break
				}
				select {
				case <-th.done:
					t.Fatalf("stood aside outside the window kept on disk: %+v", th.res)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("no wait left for status:\n%s", th.logs.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			c.Set(at(t, "Europe/Brussels", "2026-12-03 03:00"))
			th.h.recheckSoon()
			waitDone(t, th, "the window opened")
			if th.res.StoodAsideFor != "v1.1.0" {
				t.Fatalf("result %+v, %v", th.res, th.err)
			}
		})
	}
}

// Once a host stood aside inside the window, the version it stood aside for runs even if the
// window has closed by the time it starts: it has nothing newer to wait for, so the window never
// holds it (and a step back from it, were it to fail, never waits either: the judgement above).
func TestAVersionStartedAsTheWindowClosesRunsAndWaitsForNothing(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	putWindow(t, b, wire.FleetWindowKey, nil, "daily 02:00-04:00 Europe/Brussels")
	root := stagedRoot(t)
	c := &clock{at: at(t, "Europe/Brussels", "2026-12-02 04:01")}
	th := startHostWith(t, root, "n1", b.URL(), "v1.1.0", func(o *Options) { o.Now = c.Now })
	hb := meshtest.WaitHeartbeat(t, hbs, "v1.1.0 reconciled", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.LastReconcile != nil && hb.Window != nil
	})
	if hb.Window.WaitingFor != "" || hb.Window.Open || hb.Window.Key != wire.FleetWindowKey {
		t.Errorf("window %+v: want the fleet's, closed, waiting for nothing", hb.Window)
	}
	select {
	case <-th.done:
		t.Fatalf("v1.1.0 stood aside: %+v", th.res)
	default:
	}
}
