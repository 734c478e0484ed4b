package rollout

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

var t0 = time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC)

// beat is a heartbeat of node "n" heard at t0+at seconds.
func beat(at float64, running, knownGood string, uptime int64, change ...func(*wire.Heartbeat)) fleet.Entry {
	hb := wire.Heartbeat{Node: "n", State: wire.StateRunning, Running: running, KnownGood: knownGood, UptimeS: uptime}
	for _, c := range change {
		c(&hb)
	}
	return fleet.Entry{Node: "n", Heard: t0.Add(time.Duration(at * float64(time.Second))), Heartbeat: hb}
}

func TestJudgingANodeOnItsHeartbeats(t *testing.T) {
	const v = "v1.2.0"
	refused := func(rev uint64) func(*wire.Heartbeat) {
		return func(hb *wire.Heartbeat) {
			hb.Refused = &wire.Refusal{What: "target", Revision: rev, Error: "marked bad\x1b[2J here"}
		}
	}
	fetchFailed := func(retry bool) func(*wire.Heartbeat) {
		return func(hb *wire.Heartbeat) {
			hb.Fetch = &wire.Fetch{State: "failed", Version: v, Error: "digest mismatch"}
			if retry {
				hb.Fetch.RetryAt = t0.Add(time.Minute)
			}
		}
	}
	rolledBack := func(from string) func(*wire.Heartbeat) {
		return func(hb *wire.Heartbeat) {
			hb.Rollbacks = []wire.Rollback{{From: from, To: "v1.1.0", At: t0, Reason: "exited 2", Output: strings.Repeat("noise\n", 2000) + "panic: \x1b]0;boom"}}
		}
	}
	trustExpired := func(hb *wire.Heartbeat) {
		since := t0.Add(-time.Hour)
		hb.TrustRoot, hb.TrustExpiredSince = 3, &since
	}
	for _, tc := range []struct {
		name  string
		beats []fleet.Entry
		want  []change // one per beat
		why   string   // the trouble at the end, if any
	}{
		{"running the version is not enough: known-good must be it too",
			[]fleet.Entry{beat(0, v, "v1.1.0", 0), beat(1, v, v, 1)}, []change{changeNone, changeConfirmed}, ""},
		{"soaked once uptime grew by the soak since the first confirmed heartbeat",
			[]fleet.Entry{beat(0, v, v, 5), beat(1, v, v, 6), beat(2, v, v, 7), beat(3, v, v, 8)},
			[]change{changeConfirmed, changeNone, changeSoaked, changeNone}, ""},
		{"a smaller uptime after confirming is a restart",
			[]fleet.Entry{beat(0, v, v, 5), beat(1, v, v, 6), beat(2, v, v, 1)}, []change{changeConfirmed, changeNone, changeTrouble}, WhyRestarted},
		{"another version after confirming is a restart",
			[]fleet.Entry{beat(0, v, v, 5), beat(1, "v1.1.0", "v1.1.0", 0)}, []change{changeConfirmed, changeTrouble}, WhyRestarted},
		{"an older heartbeat delivered late is ignored",
			[]fleet.Entry{beat(2, v, v, 5), beat(1, "v1.1.0", "v1.1.0", 0)}, []change{changeConfirmed, changeNone}, ""},
		{"a rollback from the version", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, rolledBack(v))}, []change{changeTrouble}, WhyRolledBack},
		{"a rollback from another version is not this one's", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, rolledBack("v1.1.5"))}, []change{changeNone}, ""},
		{"a refusal at the target's revision", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, refused(7))}, []change{changeTrouble}, WhyRefused},
		{"a refusal of an older revision is not of this target", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, refused(6))}, []change{changeNone}, ""},
		{"a fetch failed for good", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, fetchFailed(false))}, []change{changeTrouble}, WhyRefused},
		{"a fetch failed that will be retried is not yet trouble", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, fetchFailed(true))}, []change{changeNone}, ""},
		{"trust expired: it takes no new target, said by that name at once", []fleet.Entry{beat(0, "v1.1.0", "v1.1.0", 1, trustExpired)}, []change{changeTrouble}, WhyTrustExpired},
		{"trust expired after confirming is no trouble of the rollout's", []fleet.Entry{beat(0, v, v, 5), beat(1, v, v, 6, trustExpired)}, []change{changeConfirmed, changeNone}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &track{inBatch: true, targetRev: 7}
			for i, e := range tc.beats {
				if got := tr.observe(e, v, 2*time.Second); got != tc.want[i] {
					t.Errorf("beat %d: %v, want %v", i, got, tc.want[i])
				}
			}
			switch {
			case tc.why == "" && tr.trouble != nil:
				t.Errorf("trouble %+v", tr.trouble)
			case tc.why != "" && (tr.trouble == nil || tr.trouble.Why != tc.why):
				t.Errorf("trouble %+v, want %s", tr.trouble, tc.why)
			case tr.trouble != nil:
				r := tr.trouble
				if strings.ContainsAny(r.Detail+r.Output, "\x1b") || len(r.Detail) > maxDetailBytes || len(r.Output) > wire.MaxOutputBytes {
					t.Errorf("reason not bounded and printable: %q", r)
				}
				if r.Why == WhyRolledBack && !strings.HasSuffix(r.Output, `panic: \x1b]0;boom`) {
					t.Errorf("output lost its last line: …%q", r.Output[len(r.Output)-40:])
				}
			}
		})
	}
}

func TestJudgingANodeOnTime(t *testing.T) {
	const v = "v1.2.0"
	window := 10 * time.Second
	deadline := t0.Add(window)
	for _, tc := range []struct {
		name string
		tr   track
		now  time.Duration
		away time.Duration // the bus was away this long since the node was last heard
		why  string
	}{
		{"heard lately, not confirmed, within the window", track{inBatch: true, heard: true, last: beat(4, "v1.1.0", "v1.1.0", 1)}, 5 * time.Second, 0, ""},
		{"not confirmed past the window", track{inBatch: true, heard: true, last: beat(10, "v1.1.0", "v1.1.0", 1)}, 11 * time.Second, 0, WhyNotConfirmed},
		{"confirmed and heard: fine past the window", track{inBatch: true, heard: true, confirmed: true, last: beat(10, v, v, 9)}, 11 * time.Second, 0, ""},
		{"unheard for longer than the window", track{inBatch: true, heard: true, confirmed: true, last: beat(1, v, v, 1)}, 12 * time.Second, 0, WhySilent},
		{"unheard for longer than the window, the bus away for part of it: not silent", track{inBatch: true, heard: true, confirmed: true, last: beat(1, v, v, 1)},
			12 * time.Second, 5 * time.Second, ""},
		{"left out: never judged", track{inBatch: true, leftOut: true, heard: true, last: beat(-100, "v1.1.0", "v1.1.0", 1)}, 12 * time.Second, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.now)
			r := tc.tr.overdue("n", v, now, deadline, window, now.Sub(tc.tr.last.Heard)-tc.away)
			if (r == nil) != (tc.why == "") || (r != nil && r.Why != tc.why) {
				t.Fatalf("overdue = %+v, want %q", r, tc.why)
			}
			if r != nil && (r.Since.IsZero() || !strings.Contains(r.Detail, "running v1")) {
				t.Errorf("reason %+v does not say when it was last heard and what it ran", r)
			}
		})
	}
}

// Before decision 0021 the node list was in the one value and 10,000 nodes with 100-byte ids
// were refused ("does not fit"); it is in chunks now, and what is refused is a head with no
// room for a halt report, or a node that no chunk holds.
func TestAPlanIsRefusedOnlyWhenItsHeadOrAChunkCannotHoldIt(t *testing.T) {
	plan := func(n int, id string) State {
		st := State{Schema: Schema, ID: "x", Version: "v1.2.0"}
		for i := range n {
			st.Nodes = append(st.Nodes, id+strconv.Itoa(i))
			st.Ran = append(st.Ran, "v1.1.0")
		}
		return st
	}
	tooManyCanaries := plan(10, "n")
	for i := range 20000 {
		tooManyCanaries.CanaryNodes = append(tooManyCanaries.CanaryNodes, strings.Repeat("c", 60)+strconv.Itoa(i))
	}
	for _, tc := range []struct {
		name   string
		st     State
		refuse string // "" when it fits
	}{
		{"10,000 nodes with 100-byte ids fit", plan(10000, strings.Repeat("n", 100)), ""},
		{"100,000 nodes fit", plan(100000, "node-"), ""},
		{"a head too large for a halt report is refused", tooManyCanaries, "does not fit its head"},
		{"a node id no chunk holds is refused", plan(1, strings.Repeat("n", 300<<10)), "does not fit a chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fits(tc.st, "mesh_rollouts")
			if tc.refuse == "" && err != nil {
				t.Fatal(err)
			}
			if tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)) {
				t.Fatalf("err = %v, want %q", err, tc.refuse)
			}
		})
	}
}

func TestLeftOutNodesPastTheRoomAreCounted(t *testing.T) {
	st := State{Schema: Schema, ID: "x", Version: "v1.2.0"}
	for i := 0; i < 20000; i++ {
		n := strings.Repeat("n", 60)
		st.Nodes, st.Ran = append(st.Nodes, n), append(st.Ran, "v1.1.0")
		st.LeftOut = append(st.LeftOut, LeftOut{Node: n, Batch: 3, SilentSince: t0})
	}
	fit(&st)
	if st.LeftOutMore == 0 || len(st.LeftOut)+st.LeftOutMore != 20000 {
		t.Fatalf("listed %d, counted %d", len(st.LeftOut), st.LeftOutMore)
	}
	if err := fits(st, "b"); err != nil {
		t.Fatal(err)
	}
}

// The scenario 8: a node that rolled back from the version before the rollout marked it
// bad then; in the rollout it refuses the target, and that is what it is judged on — the old
// rollback in its heartbeat is history, not news.
func TestANodeThatRolledBackBeforeItsBatchIsJudgedOnRefusingTheTarget(t *testing.T) {
	const v = "v1.2.0"
	old := func(hb *wire.Heartbeat) {
		hb.Rollbacks = []wire.Rollback{{From: v, To: "v1.1.0", At: t0.Add(-time.Hour), Reason: "exited 1"}}
	}
	refused := func(hb *wire.Heartbeat) {
		hb.Refused = &wire.Refusal{What: "target", Revision: 7, Error: "target v1.2.0 is marked bad on this node"}
	}
	tr := &track{inBatch: true, targetRev: 7, priorRollback: lastRollbackFrom(beat(0, "v1.1.0", "v1.1.0", 1, old), v)}
	if got := tr.observe(beat(1, "v1.1.0", "v1.1.0", 2, old), v, time.Second); got != changeNone {
		t.Fatalf("the old rollback alone: %v, want none", got)
	}
	if got := tr.observe(beat(2, "v1.1.0", "v1.1.0", 3, old, refused), v, time.Second); got != changeTrouble || tr.trouble.Why != WhyRefused {
		t.Fatalf("the refusal: %v %+v, want trouble %s", got, tr.trouble, WhyRefused)
	}
	fresh := &track{inBatch: true, targetRev: 7, priorRollback: lastRollbackFrom(beat(0, "v1.1.0", "v1.1.0", 1, old), v)}
	newer := func(hb *wire.Heartbeat) {
		hb.Rollbacks = append(hb.Rollbacks, wire.Rollback{From: v, To: "v1.1.0", At: t0, Reason: "exited 1 again"})
	}
	if got := fresh.observe(beat(1, "v1.1.0", "v1.1.0", 1, old, newer), v, time.Second); got != changeTrouble || fresh.trouble.Why != WhyRolledBack {
		t.Fatalf("a rollback after the batch began: %v %+v, want trouble %s", got, fresh.trouble, WhyRolledBack)
	}
}

// A node whose launcher rolled back during its batch halts the rollout as a host rollback does,
// with the reason "launcher rolled back from vX: …"; the launcher rollback the node reported when
// its batch began is history (issue 19, 6).
func TestJudgingANodeOnItsLauncher(t *testing.T) {
	const v = "v1.2.0"
	hour := t0.Add(-time.Hour)
	launcher := func(from string, at time.Time, reason string) func(*wire.Heartbeat) {
		return func(hb *wire.Heartbeat) {
			hb.Launcher = &wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: wire.LauncherFloor}
			if from != "" {
				hb.Launcher.RolledBackFrom, hb.Launcher.RolledBackAt, hb.Launcher.RollbackReason = from, at, reason
			}
		}
	}
	for _, tc := range []struct {
		name    string
		atStart *fleet.Entry // the heartbeat heard when the batch began
		started time.Time    // the batch's start when a controller takes it over (zero: it starts now)
		beat    fleet.Entry
		want    change
		detail  string
	}{
		{name: "a launcher rollback during the batch", beat: beat(1, v, "v1.1.0", 1, launcher("v1.1.0", t0, "exited with status 2 before confirming")),
			want: changeTrouble, detail: "launcher rolled back from v1.1.0: exited with status 2 before confirming"},
		{name: "no launcher object (an older host): judged as before", beat: beat(1, v, v, 1), want: changeConfirmed},
		{name: "a launcher on trial or the floor, not rolled back", beat: beat(1, v, v, 1, launcher("", time.Time{}, "")), want: changeConfirmed},
		{name: "the rollback reported when the batch began is history",
			atStart: ptr(beat(0, "v1.1.0", "v1.1.0", 1, launcher("v1.1.0", hour, "crashed"))),
			beat:    beat(1, v, v, 2, launcher("v1.1.0", hour, "crashed")), want: changeConfirmed},
		{name: "a later rollback from the same launcher version is news",
			atStart: ptr(beat(0, "v1.1.0", "v1.1.0", 1, launcher("v1.1.0", hour, "crashed"))),
			beat:    beat(1, v, v, 2, launcher("v1.1.0", t0, "crashed again")), want: changeTrouble, detail: "launcher rolled back from v1.1.0: crashed again"},
		{name: "a rollback from another launcher version is news",
			atStart: ptr(beat(0, "v1.1.0", "v1.1.0", 1, launcher("v1.1.0", hour, "crashed"))),
			beat:    beat(1, v, v, 2, launcher("v1.3.0", hour, "hung")), want: changeTrouble, detail: "launcher rolled back from v1.3.0: hung"},
		{name: "taking over a batch: a rollback after it began is the batch's",
			atStart: ptr(beat(0, v, "v1.1.0", 1, launcher("v1.1.0", t0, "crashed"))), started: t0.Add(-time.Minute),
			beat: beat(1, v, "v1.1.0", 2, launcher("v1.1.0", t0, "crashed")), want: changeTrouble, detail: "launcher rolled back from v1.1.0: crashed"},
		{name: "taking over a batch: a rollback before it began is history",
			atStart: ptr(beat(0, v, v, 1, launcher("v1.1.0", hour, "crashed"))), started: t0.Add(-time.Minute),
			beat: beat(1, v, v, 2, launcher("v1.1.0", hour, "crashed")), want: changeConfirmed},
		{name: "a hostile reason is printable and bounded",
			beat: beat(1, v, v, 1, launcher("v1.1.0", t0, "boom\x1b[2J\n"+strings.Repeat("x", 5000))), want: changeTrouble,
			detail: `launcher rolled back from v1.1.0: boom\x1b[2J\x0axxx`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &track{inBatch: true, targetRev: 7}
			if tc.atStart != nil {
				tr.priorLauncher = priorLauncherRollback(*tc.atStart, tc.started)
			}
			if got := tr.observe(tc.beat, v, time.Hour); got != tc.want {
				t.Fatalf("observe = %v (trouble %+v), want %v", got, tr.trouble, tc.want)
			}
			if tc.want != changeTrouble {
				return
			}
			r := tr.trouble
			if r.Why != WhyLauncherRolledBack || !strings.HasPrefix(r.Detail, tc.detail) || !r.Since.Equal(tc.beat.Heartbeat.Launcher.RolledBackAt) {
				t.Errorf("trouble %+v, want %s since %s with detail %q", r, WhyLauncherRolledBack, tc.beat.Heartbeat.Launcher.RolledBackAt, tc.detail)
			}
			if strings.ContainsAny(r.Detail, "\x1b\n") || len(r.Detail) > maxDetailBytes {
				t.Errorf("detail not bounded and printable: %q", r.Detail)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// A node that said it staged the version and waits for its maintenance window is neither
// silent nor late until the window (--window) past the window's opening, by the controller's
// clock; its deadline to confirm counts from that opening, also once it has stood aside; a node
// cut off while its window opens is judged silent only once that has passed.
func TestANodeWaitingForItsWindowIsNeitherSilentNorLateUntilItOpens(t *testing.T) {
	const v = "v1.2.0"
	window := 10 * time.Second
	deadline := t0.Add(window)
	opens := t0.Add(time.Hour)
	waiting := func(at float64) fleet.Entry {
		return beat(at, "v1.1.0", "v1.1.0", 1, func(hb *wire.Heartbeat) {
			hb.Window = &wire.WindowState{Key: wire.FleetWindowKey, WaitingFor: v, Opens: opens, Waiting: wire.WaitingLine(v, opens)}
		})
	}
	for _, tc := range []struct {
		name  string
		beats []fleet.Entry
		now   time.Duration
		why   string
	}{
		{"waiting, past the batch's window: not late", []fleet.Entry{waiting(5)}, 20 * time.Second, ""},
		{"waiting and unheard since long before the opening: not silent", []fleet.Entry{waiting(5)}, 50 * time.Minute, ""},
		{"cut off while its window opened, within the window after it: not yet silent", []fleet.Entry{waiting(5)}, time.Hour + 9*time.Second, ""},
		{"cut off, past the window after the opening: silent", []fleet.Entry{waiting(5)}, time.Hour + 11*time.Second, WhySilent},
		{"stood aside when it opened, trying the version, within the window after it", []fleet.Entry{waiting(5), beat(3601, v, "v1.1.0", 1)}, time.Hour + 9*time.Second, ""},
		{"stood aside and did not confirm within the window after the opening", []fleet.Entry{waiting(5), beat(3609, v, "v1.1.0", 9)}, time.Hour + 11*time.Second, WhyNotConfirmed},
		{"waiting for another version's window says nothing of this one", []fleet.Entry{beat(5, "v1.1.0", "v1.1.0", 1, func(hb *wire.Heartbeat) {
			hb.Window = &wire.WindowState{WaitingFor: "v1.1.5", Opens: opens}
		})}, 12 * time.Second, WhyNotConfirmed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &track{inBatch: true, targetRev: 7}
			for _, e := range tc.beats {
				tr.observe(e, v, time.Hour)
			}
			now := t0.Add(tc.now)
			r := tr.overdue("n", v, now, deadline, window, now.Sub(tr.last.Heard))
			if (r == nil) != (tc.why == "") || (r != nil && r.Why != tc.why) {
				t.Fatalf("overdue = %+v, want %q", r, tc.why)
			}
		})
	}
}

// A node silent past the window whose last word said its trust expired is reported with it; a
// rollout starting over nodes whose trust expired says so in its started message.
func TestARolloutSaysWhichOfItsNodesTrustExpired(t *testing.T) {
	since := t0.Add(-time.Hour)
	expired := func(hb *wire.Heartbeat) { hb.TrustExpiredSince = &since }
	tr := track{inBatch: true, heard: true, confirmed: true, last: beat(1, "v1.2.0", "v1.2.0", 1, expired)}
	r := tr.overdue("n", "v1.2.0", t0.Add(12*time.Second), t0.Add(10*time.Second), 10*time.Second, 11*time.Second)
	if r == nil || r.Why != WhySilent || !strings.Contains(r.Detail, "trust expired since 2026-11-29T12:00:00Z") {
		t.Errorf("silent node's reason %+v does not say its trust expired", r)
	}
	entries := []fleet.Entry{
		{Node: "a", Heartbeat: wire.Heartbeat{Node: "a", TrustExpiredSince: &since}},
		{Node: "b", Heartbeat: wire.Heartbeat{Node: "b"}},
		{Node: "c", Heartbeat: wire.Heartbeat{Node: "c", TrustExpiredSince: &since}},
		{Node: "off", Heartbeat: wire.Heartbeat{Node: "off", TrustExpiredSince: &since}}, // not in the rollout
	}
	for _, tc := range []struct {
		nodes []string
		want  string
	}{
		{[]string{"a", "b", "c"}, "; 2 nodes' trust expired (a, c): they take no new target until a fresher root reaches them (`mesh-release trust publish`), and halt their batch"},
		{[]string{"c"}, "; 1 node's trust expired (c): they take"},
		{[]string{"b"}, ""},
	} {
		got := trustWords(State{Nodes: tc.nodes}, entries)
		if !strings.HasPrefix(got, tc.want) || (tc.want == "" && got != "") {
			t.Errorf("%v: %q, want %q", tc.nodes, got, tc.want)
		}
	}
	if got := whyText(NodeReason{Why: WhyTrustExpired, Since: since}, t0); got != "trust expired since 12:00:00" {
		t.Errorf("whyText: %q", got)
	}
}
