package fleet

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// now is the fixed "now" every status test is judged at.
var now = time.Date(2026, 11, 29, 13, 20, 0, 0, time.UTC)

// steady is a node at rest: running its target, confirmed, up ten minutes.
func steady(node string) wire.Heartbeat {
	return wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.1.0", KnownGood: "v1.1.0", Target: "v1.1.0",
		DeclarationRevision: 42, UptimeS: 600, LastReconcile: &wire.LastReconcile{OK: true}}
}

// with is steady("n") changed by fn.
func with(fn func(hb *wire.Heartbeat)) wire.Heartbeat {
	hb := steady("n")
	fn(&hb)
	return hb
}

func at(hhmmss string) time.Time {
	t, err := time.Parse(time.DateOnly+" "+time.TimeOnly, "2026-11-29 "+hhmmss)
	if err != nil {
		panic(err)
	}
	return t
}

var (
	rolledBackFromV120 = func(hb *wire.Heartbeat) {
		hb.Target = "v1.2.0"
		hb.Rollbacks = []wire.Rollback{{From: "v1.2.0", To: "v1.1.0", At: at("13:15:42"), Reason: "3 failures in 120s before confirming"}}
	}
	// failedReconcile is the README's newcomer's first declaration: a file in a directory it
	// did not declare; the error ends with what to do.
	failedReconcile = func(hb *wire.Heartbeat) {
		hb.LastReconcile = &wire.LastReconcile{At: at("13:19:02"), Trigger: wire.TriggerDeclaration, Error: dirMissing}
	}
	refusedV120 = func(hb *wire.Heartbeat) {
		hb.Target = "v1.2.0"
		hb.Refused = &wire.Refusal{What: "target", Revision: 7, Error: "target v1.2.0 is marked bad on this node", At: at("13:16:00")}
	}
)

const dirMissing = `resources[1] file "/srv/app/config.toml": apply: parent directory /srv/app does not exist: declare it as a directory resource before this one (the host never creates one implicitly)`

func TestFleetStateSaysWhatTheNodeIsDoing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hb       wire.Heartbeat
		heardAgo time.Duration
		err      error
		kind     Kind
		text     string
	}{
		{name: "a node at rest is ok", hb: steady("n"), kind: KindOK, text: "ok"},
		{name: "unheard past silent-after is silent, saying its last word", hb: steady("n"), heardAgo: 2 * time.Minute,
			kind: KindSilent, text: "SILENT since 13:18:00 (was running v1.1.0)"},
		{name: "silence wins over a rollback, which it names", hb: with(rolledBackFromV120), heardAgo: 2 * time.Minute,
			kind: KindSilent, text: "SILENT since 13:18:00 (was rolled back from v1.2.0 at 13:15)"},
		{name: "silent for days gives the date", hb: steady("n"), heardAgo: 50 * time.Hour,
			kind: KindSilent, text: "SILENT since 2026-11-27 11:20:00 (was running v1.1.0)"},
		{name: "an unreadable heartbeat is unreadable", err: errString("heartbeat: schema 2"), kind: KindUnreadable, text: "UNREADABLE"},
		{name: "an unreadable heartbeat unheard is silent", err: errString("heartbeat: schema 2"), heardAgo: 2 * time.Minute,
			kind: KindSilent, text: "SILENT since 13:18:00 (was unreadable)"},
		{name: "stopping wins over a rollback", hb: with(func(hb *wire.Heartbeat) { rolledBackFromV120(hb); hb.State = wire.StateStopping }),
			kind: KindStopping, text: "stopping"},
		{name: "standing aside names the version", hb: with(func(hb *wire.Heartbeat) {
			refusedV120(hb)
			hb.Target, hb.State, hb.StandingAsideFor = "v1.3.0", wire.StateStandingAside, "v1.3.0"
			hb.Fetch = &wire.Fetch{State: "staged", Version: "v1.3.0"}
		}), kind: KindStandingAside, text: "standing aside for v1.3.0"},
		{name: "a rollback from a newer version than running is a state", hb: with(rolledBackFromV120),
			kind: KindRolledBack, text: "rolled back from v1.2.0 at 13:15"},
		{name: "a rollback wins over the refusal of its version", hb: with(func(hb *wire.Heartbeat) { rolledBackFromV120(hb); refusedV120(hb) }),
			kind: KindRolledBack, text: "rolled back from v1.2.0 at 13:15"},
		{name: "the newest rollback by time is named, whatever the list order", hb: with(func(hb *wire.Heartbeat) {
			hb.Rollbacks = []wire.Rollback{{From: "v1.2.0", To: "v1.1.0", At: at("13:15:00")}, {From: "v1.2.1", To: "v1.1.0", At: at("13:17:00")},
				{From: "v1.0.1", To: "v1.0.0", At: at("13:19:00")}}
		}), kind: KindRolledBack, text: "rolled back from v1.2.1 at 13:17"},
		{name: "a rollback from an older version while running a newer one is history", hb: with(func(hb *wire.Heartbeat) {
			hb.Running, hb.KnownGood, hb.Target = "v1.3.0", "v1.3.0", "v1.3.0"
			hb.Rollbacks = []wire.Rollback{{From: "v1.2.0", To: "v1.1.0", At: at("13:15:00")}}
		}), kind: KindOK, text: "ok"},
		{name: "a rollback from the running version is history", hb: with(func(hb *wire.Heartbeat) {
			hb.Rollbacks = []wire.Rollback{{From: "v1.1.0", To: "v1.0.0", At: at("13:15:00")}}
		}), kind: KindOK, text: "ok"},
		{name: "a refused target not running says why", hb: with(refusedV120),
			kind: KindRefused, text: "refused v1.2.0: target v1.2.0 is marked bad on this node"},
		{name: "a refused target the node runs is ok", hb: with(func(hb *wire.Heartbeat) { refusedV120(hb); hb.Target = "v1.1.0" }),
			kind: KindOK, text: "ok"},
		{name: "a refused target when the node has none names its revision", hb: with(func(hb *wire.Heartbeat) { refusedV120(hb); hb.Target = "" }),
			kind: KindRefused, text: "refused target rev 7: target v1.2.0 is marked bad on this node"},
		{name: "a refusal while fetching the target was of an earlier one", hb: with(func(hb *wire.Heartbeat) {
			refusedV120(hb)
			hb.Target = "v1.3.0"
			hb.Fetch = &wire.Fetch{State: "fetching", Version: "v1.3.0", Bytes: 42, Total: 100, Percent: 42.4}
		}), kind: KindFetching, text: "fetching v1.3.0 42%"},
		{name: "a refusal while a fetch of the target retries was of an earlier one", hb: with(func(hb *wire.Heartbeat) {
			refusedV120(hb)
			hb.Fetch = &wire.Fetch{State: "failed", Version: "v1.2.0", Error: "object store: timeout", RetryAt: at("13:21:05")}
		}), kind: KindFetching, text: "fetch of v1.2.0 failed, retry at 13:21:05: object store: timeout"},
		{name: "a refused declaration newer than the held one says why", hb: with(func(hb *wire.Heartbeat) {
			hb.Refused = &wire.Refusal{What: "declaration", Revision: 43, Error: "declaration: version 2 is not supported"}
		}), kind: KindRefused, text: "refused declaration rev 43: declaration: version 2 is not supported"},
		{name: "a refused declaration older than the held one is history", hb: with(func(hb *wire.Heartbeat) {
			hb.Refused = &wire.Refusal{What: "declaration", Revision: 41, Error: "declaration: version 2 is not supported"}
		}), kind: KindOK, text: "ok"},
		{name: "a node staged and waiting for its window says when it opens", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "staged", Version: "v1.2.0"}
			hb.Window = &wire.WindowState{Key: "window.fleet", Spec: "mon-fri 02:00-04:00 Europe/Brussels", WaitingFor: "v1.2.0",
				Opens: time.Date(2026, 12, 2, 2, 0, 0, 0, time.FixedZone("CET", 3600))}
		}), kind: KindWaiting, text: "staged v1.2.0, waiting for the window (opens 2026-12-02T02:00+01:00)"},
		{name: "a window waiting for the version that runs is over", hb: with(func(hb *wire.Heartbeat) {
			hb.Window = &wire.WindowState{Key: "window.fleet", WaitingFor: "v1.1.0", Opens: at("13:15:00")}
		}), kind: KindOK, text: "ok"},
		{name: "fetching the target gives the percent", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "fetching", Version: "v1.2.0", Bytes: 42, Total: 100, Percent: 42.4}
		}), kind: KindFetching, text: "fetching v1.2.0 42%"},
		{name: "fetching the target as a delta names its base", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "fetching", Version: "v1.2.0", Bytes: 42, Total: 100, Percent: 42.4, Delta: "v1.1.0", Moved: 42}
		}), kind: KindFetching, text: "fetching v1.2.0 as a delta from v1.1.0 42%"},
		{name: "a stalled fetch says for how long", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "fetching", Version: "v1.2.0", Total: 100, Percent: 42.4, StalledS: 75}
		}), kind: KindFetching, text: "fetching v1.2.0 42%, stalled 1m15s"},
		{name: "verifying the target", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "verifying", Version: "v1.2.0"}
		}), kind: KindFetching, text: "verifying v1.2.0"},
		{name: "a failed fetch says when it is retried", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "failed", Version: "v1.2.0", Error: "object store: timeout", RetryAt: at("13:21:05")}
		}), kind: KindFetching, text: "fetch of v1.2.0 failed, retry at 13:21:05: object store: timeout"},
		{name: "a failed fetch not retried is a refusal", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "failed", Version: "v1.2.0", Error: "signature does not verify"}
		}), kind: KindRefused, text: "fetch of v1.2.0 failed, not retried: signature does not verify"},
		{name: "the target staged", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "staged", Version: "v1.2.0"}
		}), kind: KindFetching, text: "staged v1.2.0"},
		{name: "a fetch of a version that is not the target is no state", hb: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "fetching", Version: "v1.3.0", Total: 100, Percent: 10}
		}), kind: KindOK, text: "ok"},
		{name: "a fetch record of the running version is no state", hb: with(func(hb *wire.Heartbeat) {
			hb.Fetch = &wire.Fetch{State: "failed", Version: "v1.1.0", Error: "old news"}
		}), kind: KindOK, text: "ok"},
		{name: "a version not yet confirmed is on trial, with its uptime now", hb: with(func(hb *wire.Heartbeat) {
			hb.Running, hb.Target, hb.UptimeS = "v1.2.0", "v1.2.0", 3
		}), heardAgo: 2 * time.Second, kind: KindTrying, text: "trying v1.2.0 (not confirmed, up 5s)"},
		{name: "a first version with nothing confirmed is on trial", hb: with(func(hb *wire.Heartbeat) { hb.KnownGood, hb.UptimeS = "", 4000 }),
			kind: KindTrying, text: "trying v1.1.0 (not confirmed, up 1h06m)"},
		{name: "a node whose last reconcile failed is failing, not ok", hb: with(failedReconcile),
			kind: KindFailing, text: "reconcile failed at 13:19"},
		{name: "a reconcile failed days ago gives the date", hb: with(func(hb *wire.Heartbeat) {
			failedReconcile(hb)
			hb.LastReconcile.At = now.Add(-50 * time.Hour)
		}), kind: KindFailing, text: "reconcile failed at 2026-11-27 11:20"},
		{name: "a failed reconcile without a time is failing", hb: with(func(hb *wire.Heartbeat) {
			failedReconcile(hb)
			hb.LastReconcile.At = time.Time{}
		}), kind: KindFailing, text: "reconcile failed"},
		{name: "a failed reconcile unheard is silent, saying it", hb: with(failedReconcile), heardAgo: 2 * time.Minute,
			kind: KindSilent, text: "SILENT since 13:18:00 (was reconcile failed at 13:19)"},
		{name: "a rollback wins over a failed reconcile", hb: with(func(hb *wire.Heartbeat) { failedReconcile(hb); rolledBackFromV120(hb) }),
			kind: KindRolledBack, text: "rolled back from v1.2.0 at 13:15"},
		{name: "a version on trial whose reconcile failed is on trial", hb: with(func(hb *wire.Heartbeat) {
			failedReconcile(hb)
			hb.Running, hb.Target, hb.UptimeS = "v1.2.0", "v1.2.0", 3
		}), kind: KindTrying, text: "trying v1.2.0 (not confirmed, up 3s)"},
		{name: "a node before its first reconcile is ok", hb: with(func(hb *wire.Heartbeat) { hb.LastReconcile = nil }),
			kind: KindOK, text: "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Entry{Node: "n", Heard: now.Add(-tc.heardAgo), Heartbeat: tc.hb, Err: tc.err}
			if tc.err != nil {
				e.Heartbeat = wire.Heartbeat{}
			}
			rows := Rows([]Entry{e}, now, DefaultSilentAfter)
			if r := rows[0]; r.StatusKind != tc.kind || r.Status != tc.text {
				t.Errorf("state = %s %q, want %s %q", r.StatusKind, r.Status, tc.kind, tc.text)
			}
		})
	}
}

// --watch: the view sees a restart as a heartbeat of the same version with a smaller uptime.
func TestFleetViewSaysANodeRestartedForFiveMinutes(t *testing.T) {
	up := func(running, knownGood string, uptime int64) wire.Heartbeat {
		hb := steady("n")
		hb.Running, hb.KnownGood, hb.Target, hb.UptimeS = running, knownGood, running, uptime
		return hb
	}
	t0 := now.Add(-time.Hour)
	state := func(v *View, at time.Time) string {
		r := v.Rows(at, time.Hour)[0]
		return string(r.StatusKind) + ": " + r.Status
	}
	for _, tc := range []struct {
		name string
		seen []wire.Heartbeat // 10 s apart from t0
		at   time.Duration    // after the last heartbeat
		want string
	}{
		{"uptime growing is no restart", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), up("v1.1.0", "v1.1.0", 610)}, 0, "ok: ok"},
		{"a smaller uptime on the same version is a restart", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), up("v1.1.0", "v1.1.0", 3)}, 0,
			"restarting: restarting (up 3s)"},
		{"the restart is still said just before five minutes", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), up("v1.1.0", "v1.1.0", 3)},
			RestartShownFor - time.Second, "restarting: restarting (up 5m02s)"},
		{"the restart is no longer said after five minutes", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), up("v1.1.0", "v1.1.0", 3)},
			RestartShownFor, "ok: ok"},
		{"a restart of a version on trial wins over trying", []wire.Heartbeat{up("v1.2.0", "v1.1.0", 40), up("v1.2.0", "v1.1.0", 2)}, 0,
			"restarting: restarting (up 2s)"},
		{"a new version with a smaller uptime is an upgrade, not a restart", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), up("v1.2.0", "v1.1.0", 2)}, 0,
			"trying: trying v1.2.0 (not confirmed, up 2s)"},
		{"a restart ends when the node runs another version", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), up("v1.1.0", "v1.1.0", 3),
			up("v1.2.0", "v1.1.0", 2), up("v1.2.0", "v1.2.0", 12)}, 0, "ok: ok"},
		{"a rollback wins over the restart it caused", []wire.Heartbeat{up("v1.1.0", "v1.1.0", 600), with(func(hb *wire.Heartbeat) {
			rolledBackFromV120(hb)
			hb.UptimeS = 1
		})}, 0, "rolled-back: rolled back from v1.2.0 at 13:15"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := NewView()
			var last time.Time
			for i, hb := range tc.seen {
				last = t0.Add(time.Duration(i) * 10 * time.Second)
				v.Update(Entry{Node: "n", Heard: last, Heartbeat: hb})
			}
			if got := state(v, last.Add(tc.at)); got != tc.want {
				t.Errorf("state = %q, want %q", got, tc.want)
			}
			// A node's story from the view (the fleet page's node page) says the same.
			st, ok := v.Story("n", last.Add(tc.at), RowOptions{SilentAfter: time.Hour})
			if got := string(st.StatusKind) + ": " + st.Status; !ok || got != tc.want || len(st.Timeline) == 0 {
				t.Errorf("the view's story says %q (found %v, %d moments), want %q", got, ok, len(st.Timeline), tc.want)
			}
			if _, ok := v.Story("other", last, RowOptions{}); ok {
				t.Error("the view has a story of a node it never heard")
			}
		})
	}
}

// A heartbeat delivered late (older than the one the view holds) is neither kept nor compared,
// and Rows without a view never says restarted.
func TestFleetRestartNeedsTwoHeartbeatsInOrder(t *testing.T) {
	v := NewView()
	newer, older := steady("n"), steady("n")
	newer.UptimeS, older.UptimeS = 3, 600
	v.Update(Entry{Node: "n", Heard: now, Heartbeat: newer})
	v.Update(Entry{Node: "n", Heard: now.Add(-time.Minute), Heartbeat: older})
	if r := v.Rows(now, 0)[0]; r.StatusKind != KindOK {
		t.Errorf("a late older heartbeat made the node %s: %q", r.StatusKind, r.Status)
	}
	if r := Rows([]Entry{{Node: "n", Heard: now, Heartbeat: newer}}, now, 0)[0]; r.StatusKind != KindOK {
		t.Errorf("one heartbeat read as %s", r.StatusKind)
	}
}

func TestFleetRowsSortSilentThenUnreadableThenTroubleThenTheRest(t *testing.T) {
	es := []Entry{
		{Node: "a-ok", Heard: now, Heartbeat: steady("a-ok")},
		{Node: "b-fetching", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.2.0", &wire.Fetch{State: "verifying", Version: "v1.2.0"}
		})},
		{Node: "c-trying", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) { hb.Running = "v1.2.0" })},
		{Node: "d-silent", Heard: now.Add(-time.Hour), Heartbeat: steady("d-silent")},
		{Node: "e-refused", Heard: now, Heartbeat: with(refusedV120)},
		{Node: "f-unreadable", Heard: now, Err: errString("heartbeat: not json")},
		{Node: "g-stopping", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) { hb.State = wire.StateStopping })},
		{Node: "h-rolled-back", Heard: now, Heartbeat: with(rolledBackFromV120)},
		{Node: "i-silent", Heard: now.Add(-time.Hour), Err: errString("heartbeat: not json")},
		{Node: "j-failing", Heard: now, Heartbeat: with(failedReconcile)},
	}
	var order []string
	for _, r := range Rows(es, now, 0) {
		order = append(order, r.Node)
	}
	want := "d-silent i-silent f-unreadable c-trying e-refused h-rolled-back j-failing a-ok b-fetching g-stopping"
	if got := strings.Join(order, " "); got != want {
		t.Errorf("order\n %s\nwant\n %s", got, want)
	}
}

func TestFleetSummaryCountsEachKindWhenNotAllAreOK(t *testing.T) {
	es := []Entry{
		{Node: "n1", Heard: now, Heartbeat: steady("n1")},
		{Node: "n2", Heard: now, Heartbeat: steady("n2")},
		{Node: "n3", Heard: now, Heartbeat: steady("n3")},
		{Node: "n4", Heard: now, Heartbeat: with(rolledBackFromV120)},
		{Node: "n5", Heard: now, Heartbeat: with(rolledBackFromV120)},
		{Node: "n6", Heard: now, Heartbeat: with(refusedV120)},
		{Node: "n7", Heard: now, Heartbeat: with(failedReconcile)},
		{Node: "n8", Heard: now, Heartbeat: with(failedReconcile)},
	}
	for i := range es {
		es[i].Heartbeat.Node = es[i].Node
	}
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"all ok", es[:3], "3 nodes, 0 silent (silent after 1m30s unheard)\n"},
		{"some in trouble", es[:6], "6 nodes, 0 silent (silent after 1m30s unheard); 2 rolled back, 1 refused\n"},
		{"some failing", append(es[:3:3], es[6:]...), "5 nodes, 0 silent (silent after 1m30s unheard); 2 failing\n"},
		{"failing and in trouble", es, "8 nodes, 0 silent (silent after 1m30s unheard); 2 rolled back, 1 refused, 2 failing\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteText(&buf, Rows(tc.entries, now, 0), 0); err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(buf.String(), "\n"+tc.want) {
				t.Errorf("summary of\n%s\nwant %q", buf.String(), tc.want)
			}
		})
	}
}

func TestFleetTextHeaderIsOneBoundedPrintableLineAboveTheTable(t *testing.T) {
	rows := Rows([]Entry{{Node: "n", Heard: now, Heartbeat: steady("n")}}, now, 0)
	for _, tc := range []struct {
		name, header, first string
	}{
		{"no header", "", "NODE "},
		{"a header", "rollout v1.2.0: batch 1 of 3, 1/2 confirmed", "rollout v1.2.0: batch 1 of 3, 1/2 confirmed"},
		{"a hostile header", "rollout v1.2.0\x1b[2J\nNODE fake " + strings.Repeat("x", 1000), `rollout v1.2.0\x1b[2J NODE fake xxx`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteTextWith(&buf, rows, TextOptions{Header: tc.header}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			if !strings.HasPrefix(lines[0], tc.first) || len(lines[0]) > maxHeaderCell {
				t.Errorf("first line %q, want it to start %q and be at most %d bytes", lines[0], tc.first, maxHeaderCell)
			}
			want := 3 // table header, one node, summary
			if tc.header != "" {
				want++
			}
			if len(lines) != want || controlBytes(buf.String()) != "" {
				t.Errorf("%d lines, want %d, and no control character:\n%q", len(lines), want, buf.String())
			}
		})
	}
}

// A refusal's reason comes from the bus: in the STATE cell and in the JSON status it is one
// printable line no longer than the cell.
func TestFleetStateOfHostileTextsIsBoundedAndPrintable(t *testing.T) {
	hostile := "bad\x1b[2J\x1b]0;pwned\x07\r\nfake-node  running  ok\t\u202eexe\u009b31m" + strings.Repeat("x", 10_000)
	es := []Entry{
		{Node: "refused", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
			refusedV120(hb)
			hb.Node, hb.Target, hb.Refused.Error = "refused", "v1.2.0-\x1b[31m"+strings.Repeat("r", 500), hostile
		})},
		{Node: "fetch", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
			hb.Node, hb.Target = "fetch", "v1.2.0"
			hb.Fetch = &wire.Fetch{State: "failed", Version: "v1.2.0", Error: hostile, RetryAt: at("13:21:00")}
		})},
		{Node: "aside", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
			hb.Node, hb.State, hb.StandingAsideFor = "aside", wire.StateStandingAside, "v9\x1b[2J"+strings.Repeat("s", 500)
		})},
		{Node: "trying", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
			hb.Node, hb.Running, hb.UptimeS = "trying", "v2\u2028\x7f", 1<<62
		})},
		{Node: "fetching", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
			hb.Node, hb.Target = "fetching", "v1.2.0"
			hb.Fetch = &wire.Fetch{State: "fetching", Version: "v1.2.0", Total: 1, Percent: 1e300, StalledS: 1 << 62}
		})},
	}
	rows := Rows(es, now, 0)
	want := map[string]string{
		"refused":  `refused v1.2.0-\x1b[31mrrr`,
		"fetch":    `fetch of v1.2.0 failed, retry at 13:21:00: bad\x1b[2J\x1b]0;pwned\x07`,
		"aside":    `standing aside for v9\x1b[2Jsss`,
		"trying":   `trying v2 \x7f (not confirmed, up 36500d)`, // U+2028 is white space: joined
		"fetching": `fetching v1.2.0 100%, stalled 36500d`,
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Status, want[r.Node]) || len(r.Status) > maxStatusCell || controlBytes(r.Status) != "" {
			t.Errorf("%s: status %q (%d bytes), want it to start %q, at most %d bytes, printable", r.Node, r.Status, len(r.Status), want[r.Node], maxStatusCell)
		}
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, rows, 0); err != nil {
		t.Fatal(err)
	}
	if bad := controlBytes(buf.String()); bad != "" {
		t.Errorf("the table carries %s:\n%q", bad, buf.String())
	}
	if lines := strings.Count(buf.String(), "\n"); lines != len(es)+2 {
		t.Errorf("%d lines, want one a node:\n%s", lines, buf.String())
	}
	maxLine := 4*maxIDCell + maxStatusCell + len("failed: ") + maxTextCell + len("9999d ago") + 6*2
	for _, line := range strings.Split(buf.String(), "\n") {
		if len(line) > maxLine {
			t.Errorf("a line of %d bytes, more than %d", len(line), maxLine)
		}
	}
}

// --json keeps every key it had and adds status and status_kind, the same text as the table.
func TestFleetJSONCarriesTheStatus(t *testing.T) {
	rows := Rows([]Entry{{Node: "n", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
		refusedV120(hb)
		hb.Refused.Error = "bad\x1b[2J"
	})}}, now, 0)
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if bad := controlBytes(buf.String()); bad != "" {
		t.Errorf("the JSON carries %s", bad)
	}
	var back []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back) != 1 {
		t.Fatalf("json %s: %v", buf.String(), err)
	}
	got := back[0]
	for _, key := range []string{"node", "silent", "state", "running", "known_good", "target", "last_heard", "age_s", "reconcile_ok", "heartbeat"} {
		if _, ok := got[key]; !ok {
			t.Errorf("key %q is gone", key)
		}
	}
	if got["status"] != `refused v1.2.0: bad\x1b[2J` || got["status_kind"] != "refused" || got["state"] != "running" {
		t.Errorf("status %q kind %q state %q", got["status"], got["status_kind"], got["state"])
	}
}

// The issue: a long reconcile error was cut at its start, just before it said what to do. The
// LAST RECONCILE cell keeps what failed and the end of the message, bounded; --json keeps the
// whole error as the node sent it, with the state as status_kind "failing".
func TestFleetLastReconcileKeepsTheFixAtTheEndOfALongError(t *testing.T) {
	long := dirMissing
	for _, tc := range []struct {
		name       string
		err        string
		head, tail string // the cell's start and end
	}{
		{"an error that fits is whole", "apply: service nginx: unit not found", "failed: apply: service nginx: unit not found", "apply: service nginx: unit not found"},
		{"a long error keeps its fix", long, `failed: resources[1] file "/srv/app/config.toml": apply: parent`,
			"declare it as a directory resource before this one (the host never creates one implicitly)"},
		{"a very long error keeps its fix", long[:80] + strings.Repeat(" and more", 500) + long[80:], `failed: resources[1] file "/srv/app/config.toml": apply: parent`,
			"declare it as a directory resource before this one (the host never creates one implicitly)"},
		{"a hostile error is bounded and printable", "bad\x1b[2J\r\n" + strings.Repeat("x", 5000) + "\x1b]0;end", `failed: bad\x1b[2J xxx`, `xxx\x1b]0;end`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := Rows([]Entry{{Node: "n", Heard: now, Heartbeat: with(func(hb *wire.Heartbeat) {
				failedReconcile(hb)
				hb.LastReconcile.Error = tc.err
			})}}, now, 0)
			var buf bytes.Buffer
			if err := WriteText(&buf, rows, 0); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(buf.String(), "\n")
			_, cellText, _ := strings.Cut(lines[1], " ago ")
			cellText = strings.TrimLeft(cellText, " ")
			if !strings.HasPrefix(cellText, tc.head) || !strings.HasSuffix(cellText, tc.tail) || len(cellText) > len("failed: ")+maxReconcileCell || controlBytes(cellText) != "" {
				t.Errorf("LAST RECONCILE %q (%d bytes), want %q … %q, at most %d bytes, printable", cellText, len(cellText), tc.head, tc.tail, len("failed: ")+maxReconcileCell)
			}
			if !strings.Contains(lines[1], "  reconcile failed at 13:19  ") || !strings.HasSuffix(lines[2], "; 1 failing") {
				t.Errorf("want STATE failing and counted:\n%s", buf.String())
			}
			buf.Reset()
			if err := WriteJSON(&buf, rows); err != nil {
				t.Fatal(err)
			}
			var back []map[string]any
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back) != 1 {
				t.Fatalf("json %s: %v", buf.String(), err)
			}
			if got := back[0]; got["status_kind"] != "failing" || got["status"] != "reconcile failed at 13:19" || got["reconcile_error"] != tc.err || got["reconcile_ok"] != false {
				t.Errorf("json: status_kind %v, status %q, reconcile_ok %v, reconcile_error %q; want failing, the whole error", got["status_kind"], got["status"], got["reconcile_ok"], got["reconcile_error"])
			}
		})
	}
}

// controlBytes names the first character in s other than a newline that a terminal could act
// on, or "".
func controlBytes(s string) string {
	for _, r := range s {
		switch {
		case r == '\n':
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r == 0x2028, r == 0x2029, r >= 0x202a && r <= 0x202e:
			return string(r)
		}
	}
	return ""
}
