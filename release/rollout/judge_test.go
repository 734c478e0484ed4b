package rollout

import (
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
		why  string
	}{
		{"heard lately, not confirmed, within the window", track{inBatch: true, heard: true, last: beat(4, "v1.1.0", "v1.1.0", 1)}, 5 * time.Second, ""},
		{"not confirmed past the window", track{inBatch: true, heard: true, last: beat(10, "v1.1.0", "v1.1.0", 1)}, 11 * time.Second, WhyNotConfirmed},
		{"confirmed and heard: fine past the window", track{inBatch: true, heard: true, confirmed: true, last: beat(10, v, v, 9)}, 11 * time.Second, ""},
		{"unheard for longer than the window", track{inBatch: true, heard: true, confirmed: true, last: beat(1, v, v, 1)}, 12 * time.Second, WhySilent},
		{"left out: never judged", track{inBatch: true, leftOut: true, heard: true, last: beat(-100, "v1.1.0", "v1.1.0", 1)}, 12 * time.Second, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.tr.overdue("n", v, t0.Add(tc.now), deadline, window)
			if (r == nil) != (tc.why == "") || (r != nil && r.Why != tc.why) {
				t.Fatalf("overdue = %+v, want %q", r, tc.why)
			}
			if r != nil && (r.Since.IsZero() || !strings.Contains(r.Detail, "running v1")) {
				t.Errorf("reason %+v does not say when it was last heard and what it ran", r)
			}
		})
	}
}

func TestAPlanTooLargeForTheBucketIsRefused(t *testing.T) {
	st := State{Schema: Schema, ID: "x", Version: "v1.2.0"}
	for i := 0; i < 10000; i++ {
		st.Nodes = append(st.Nodes, strings.Repeat("n", 100)+string(rune('a'+i%26)))
		st.Ran = append(st.Ran, "v1.1.0")
	}
	err := fits(st, "mesh_rollouts")
	if err == nil || !strings.Contains(err.Error(), "a rollout to 10000 nodes does not fit") {
		t.Fatalf("err = %v", err)
	}
	st.Nodes, st.Ran = st.Nodes[:1000], st.Ran[:1000]
	if err := fits(st, "mesh_rollouts"); err != nil {
		t.Fatal(err)
	}
}

func TestLeftOutNodesPastTheRoomAreCounted(t *testing.T) {
	st := State{Schema: Schema, ID: "x", Version: "v1.2.0"}
	for i := 0; i < 6000; i++ {
		n := strings.Repeat("n", 60)
		st.Nodes, st.Ran = append(st.Nodes, n), append(st.Ran, "v1.1.0")
		st.LeftOut = append(st.LeftOut, LeftOut{Node: n, Batch: 3, SilentSince: t0})
	}
	fit(&st)
	if st.LeftOutMore == 0 || len(st.LeftOut)+st.LeftOutMore != 6000 {
		t.Fatalf("listed %d, counted %d", len(st.LeftOut), st.LeftOutMore)
	}
	if err := fits(st, "b"); err != nil {
		t.Fatal(err)
	}
}
