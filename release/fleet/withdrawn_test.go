package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// list is a withdrawal list of the versions given, each with the reason "why <version>".
func list(versions ...string) wire.Withdrawals {
	w := wire.Withdrawals{Seq: 1}
	for _, v := range versions {
		w.Withdrawn = append(w.Withdrawn, wire.Withdrawn{Version: v, Reason: "why " + v, At: "2026-11-29T10:42:00Z"})
	}
	return w
}

// The STATE column marks a node running a withdrawn version and a node whose target expired,
// each in its place among the other rules; a refusal of the withdrawal list shows while that
// list is the one on the bus.
func TestFleetStateSaysWithdrawnAndTargetExpired(t *testing.T) {
	expired := func(ago time.Duration) func(hb *wire.Heartbeat) {
		return func(hb *wire.Heartbeat) { since := now.Add(-ago); hb.TargetExpiredSince = &since }
	}
	for _, tc := range []struct {
		name string
		hb   wire.Heartbeat
		list wire.Withdrawals
		rev  uint64
		kind Kind
		text string
	}{
		{name: "a node running a withdrawn version is marked, with the reason", hb: steady("n"), list: list("v1.0.0", "v1.1.0"), rev: 4,
			kind: KindWithdrawn, text: "runs withdrawn v1.1.0: why v1.1.0"},
		{name: "a withdrawal of another version is no state", hb: steady("n"), list: list("v1.2.0"), rev: 4, kind: KindOK, text: "ok"},
		{name: "standing aside from a withdrawn version says what for", hb: with(func(hb *wire.Heartbeat) {
			hb.State, hb.StandingAsideFor = wire.StateStandingAside, "v1.0.0"
		}), list: list("v1.1.0"), rev: 4, kind: KindStandingAside, text: "standing aside for v1.0.0"},
		{name: "running withdrawn wins over a rollback", hb: with(rolledBackFromV120), list: list("v1.1.0"), rev: 4,
			kind: KindWithdrawn, text: "runs withdrawn v1.1.0: why v1.1.0"},
		{name: "a withdrawn version with no reason", hb: steady("n"), list: wire.Withdrawals{Seq: 1, Withdrawn: []wire.Withdrawn{{Version: "v1.1.0", At: "2026-11-29T10:42:00Z"}}},
			kind: KindWithdrawn, text: "runs withdrawn v1.1.0"},
		{name: "an expired target says since when", hb: with(expired(10 * time.Minute)), kind: KindTargetExpired, text: "target expired since 13:10"},
		{name: "an expired target days ago gives the date", hb: with(expired(3 * 24 * time.Hour)), kind: KindTargetExpired, text: "target expired since 2026-11-26 13:20"},
		{name: "a rollback wins over an expired target", hb: with(func(hb *wire.Heartbeat) { rolledBackFromV120(hb); expired(time.Minute)(hb) }),
			kind: KindRolledBack, text: "rolled back from v1.2.0 at 13:15"},
		{name: "an expired target wins over a version on trial", hb: with(func(hb *wire.Heartbeat) { hb.KnownGood = "v1.0.0"; expired(time.Minute)(hb) }),
			kind: KindTargetExpired, text: "target expired since 13:19"},
		{name: "a refusal of the list on the bus is shown", hb: with(func(hb *wire.Heartbeat) {
			hb.Refused = &wire.Refusal{What: "withdrawals", Revision: 9, Error: "withdrawal list is signed by a key this node does not trust"}
		}), list: list("v0.9.0"), rev: 9, kind: KindRefused, text: "refused withdrawal list rev 9: withdrawal list is signed by a key this node does not trust"},
		{name: "a refusal of a list since replaced is history", hb: with(func(hb *wire.Heartbeat) {
			hb.Refused = &wire.Refusal{What: "withdrawals", Revision: 8, Error: "replay"}
		}), list: list("v0.9.0"), rev: 9, kind: KindOK, text: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := RowsWith([]Entry{{Node: "n", Heard: now, Heartbeat: tc.hb}}, now, RowOptions{Withdrawals: tc.list, WithdrawalsRevision: tc.rev})
			if r := rows[0]; r.StatusKind != tc.kind || r.Status != tc.text {
				t.Errorf("state = %s %q, want %s %q", r.StatusKind, r.Status, tc.kind, tc.text)
			}
			if !tc.kind.Trouble() && tc.kind != KindOK && tc.kind != KindStandingAside {
				t.Errorf("%s is not trouble", tc.kind)
			}
		})
	}
}

// Above the table, one line names the newest withdrawn versions and why, bounded and
// printable, and how many more; the summary counts the nodes running one and those whose
// target expired; --json carries both on each row.
func TestFleetTextAndJSONShowWhatIsWithdrawnAndExpired(t *testing.T) {
	since := now.Add(-time.Hour)
	es := []Entry{
		{Node: "a", Heard: now, Heartbeat: steady("a")},
		{Node: "b", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) { hb.Node, hb.Running, hb.KnownGood = "b", "v1.0.0", "v1.0.0" })},
		{Node: "c", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) { hb.Node, hb.TargetExpiredSince = "c", &since })},
	}
	w := list("v0.8.0", "v0.9.0", "v1.0.0", "v1.0.1")
	w.Withdrawn[3].Reason = "evil\x1b[2J\n" + strings.Repeat("r", 500)
	rows := RowsWith(es, now, RowOptions{Withdrawals: w, WithdrawalsRevision: 3})
	var buf bytes.Buffer
	if err := WriteTextWith(&buf, rows, TextOptions{Withdrawn: w.Withdrawn}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[0], `withdrawn: v1.0.1 ("evil\x1b[2J\nrrr`) || !strings.Contains(lines[0], ` bytes]), v1.0.0 ("why v1.0.0"), v0.9.0 ("why v0.9.0"); and 1 more (`+"`mesh-release withdraw --list`)") ||
		len(lines[0]) > maxHeaderCell || controlBytes(buf.String()) != "" {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.HasPrefix(lines[1], "NODE ") || len(lines) != 6 {
		t.Errorf("want the withdrawn line, the table and the summary:\n%s", buf.String())
	}
	if want := "3 nodes, 0 silent (silent after 1m30s unheard); 1 running withdrawn, 1 target expired"; lines[5] != want {
		t.Errorf("summary %q, want %q", lines[5], want)
	}
	buf.Reset()
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	var back []struct {
		Node               string          `json:"node"`
		Withdrawn          *wire.Withdrawn `json:"withdrawn"`
		TargetExpiredSince *time.Time      `json:"target_expired_since"`
		StatusKind         Kind            `json:"status_kind"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range back {
		got[r.Node] = fmt.Sprintf("%s %v %v", r.StatusKind, r.Withdrawn != nil && r.Withdrawn.Reason == "why v1.0.0", r.TargetExpiredSince != nil && r.TargetExpiredSince.Equal(since))
	}
	if got["a"] != "ok false false" || got["b"] != "withdrawn true false" || got["c"] != "target-expired false true" {
		t.Errorf("json rows: %v", got)
	}
}

// Issue 27 §4: after `mesh-release withdraw v1.3.0` a node that stepped down from it to v1.1.0
// (v1.2.0 had failed on it before) showed `rolled back from v1.2.0` with TARGET v1.3.0, and the
// summary counted it rolled back: the rollback from v1.2.0 is history (its target went past it),
// and stepping down from a withdrawn version is no rollback of a bad release. It says the step
// down and why; a rollback from the withdrawn version itself stays a rollback.
func TestANodeThatSteppedDownFromAWithdrawnVersionSaysSo(t *testing.T) {
	steppedDown := func(hb *wire.Heartbeat) {
		hb.Running, hb.KnownGood, hb.Target = "v1.1.0", "v1.1.0", "v1.3.0"
		hb.Rollbacks = []wire.Rollback{{From: "v1.2.0", To: "v1.1.0", At: at("12:15:42"), Reason: "3 failures in 120s before confirming"}}
		hb.Refused = &wire.Refusal{What: "target", Revision: 12, Error: "target v1.3.0 is withdrawn (why v1.3.0): it is not fetched and not run", At: at("13:16:00")}
	}
	for _, tc := range []struct {
		name string
		hb   wire.Heartbeat
		list wire.Withdrawals
		kind Kind
		text string
		sum  string
	}{
		{"stepped down past an older rollback", with(steppedDown), list("v1.3.0"), KindSteppedDown,
			"stepped down from v1.3.0, withdrawn: why v1.3.0", "1 node, 0 silent (silent after 1m30s unheard); 1 stepped down from a withdrawn version"},
		{"stepped down with no rollback before", with(func(hb *wire.Heartbeat) { steppedDown(hb); hb.Rollbacks = nil }), list("v1.3.0"), KindSteppedDown,
			"stepped down from v1.3.0, withdrawn: why v1.3.0", "1 node, 0 silent (silent after 1m30s unheard); 1 stepped down from a withdrawn version"},
		{"rolled back from the withdrawn version itself: a rollback", with(func(hb *wire.Heartbeat) {
			steppedDown(hb)
			hb.Rollbacks = append(hb.Rollbacks, wire.Rollback{From: "v1.3.0", To: "v1.1.0", At: at("13:10:00"), Reason: "exited with status 2"})
		}), list("v1.3.0"), KindRolledBack, "rolled back from v1.3.0 at 13:10", "1 node, 0 silent (silent after 1m30s unheard); 1 rolled back"},
		{"the same node before the withdrawal: its refusal aside, the old rollback shows", with(steppedDown), wire.Withdrawals{}, KindRolledBack,
			"rolled back from v1.2.0 at 12:15", "1 node, 0 silent (silent after 1m30s unheard); 1 rolled back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := RowsWith([]Entry{{Node: "n", Heard: now, Heartbeat: tc.hb}}, now, RowOptions{Withdrawals: tc.list, WithdrawalsRevision: 12})
			if r := rows[0]; r.StatusKind != tc.kind || r.Status != tc.text {
				t.Errorf("state = %s %q, want %s %q", r.StatusKind, r.Status, tc.kind, tc.text)
			}
			var buf bytes.Buffer
			if err := WriteTextWith(&buf, rows, TextOptions{}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			if got := lines[len(lines)-1]; got != tc.sum {
				t.Errorf("summary %q, want %q", got, tc.sum)
			}
		})
	}
}
