package wire

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

func TestHeartbeatHasEveryKeyTheIssueLists(t *testing.T) {
	b := Heartbeat{Node: "n1", State: StateRunning, Running: "v1.0.0", SentAt: time.Unix(0, 0).UTC()}.Marshal()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"schema", "node", "state", "running", "standing_aside_for", "known_good", "staged",
		"target", "declaration_revision", "last_reconcile", "rollbacks", "uptime_s", "sent_at"}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	if string(m["staged"]) != "[]" || string(m["rollbacks"]) != "[]" || string(m["schema"]) != "1" {
		t.Fatalf("staged=%s rollbacks=%s schema=%s", m["staged"], m["rollbacks"], m["schema"])
	}
}

func TestHeartbeatLastReconcileKeys(t *testing.T) {
	h := Heartbeat{Node: "n1", State: StateRunning, LastReconcile: &LastReconcile{Trigger: TriggerTimer, OK: true}}
	var m struct {
		LastReconcile map[string]json.RawMessage `json:"last_reconcile"`
	}
	if err := json.Unmarshal(h.Marshal(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"at", "trigger", "ok", "error", "duration_ms"} {
		if _, ok := m.LastReconcile[k]; !ok {
			t.Errorf("last_reconcile has no %q", k)
		}
	}
}

func TestHeartbeatRoundTripsWithRefusalAndFetch(t *testing.T) {
	in := Heartbeat{Node: "n1", State: StateStandingAside, StandingAsideFor: "v1.1.0",
		Refused: &Refusal{What: "declaration", Revision: 7, Error: "bad"},
		Fetch:   &Fetch{State: "fetching", Version: "v1.1.0", Bytes: 10, Total: 100, Percent: 10}}
	out, err := ParseHeartbeat(in.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if out.Refused == nil || out.Refused.Revision != 7 || out.Fetch == nil || out.Fetch.Total != 100 || out.StandingAsideFor != "v1.1.0" {
		t.Fatalf("round trip = %+v", out)
	}
}

func TestHeartbeatFetchShowsAStallAndWhenAFailedFetchRetries(t *testing.T) {
	retry := time.Date(2026, 11, 29, 7, 15, 0, 0, time.UTC)
	cases := []struct {
		name  string
		fetch Fetch
		has   map[string]bool
	}{
		{"TestHeartbeatFetchOmitsStallAndRetryWhileBytesFlow", Fetch{State: "fetching", Bytes: 10, Total: 100},
			map[string]bool{"stalled_s": false, "retry_at": false, "rate_bps": true}},
		{"TestHeartbeatFetchShowsAStall", Fetch{State: "fetching", Bytes: 10, Total: 100, StalledS: 12},
			map[string]bool{"stalled_s": true, "retry_at": false}},
		{"TestHeartbeatFetchShowsWhenAFailedFetchRetries", Fetch{State: "failed", Error: "stalled", RetryAt: retry},
			map[string]bool{"stalled_s": false, "retry_at": true, "error": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := Heartbeat{Node: "n1", State: StateRunning, Fetch: &c.fetch}
			var m struct{ Fetch map[string]json.RawMessage }
			if err := json.Unmarshal(in.Marshal(), &m); err != nil {
				t.Fatal(err)
			}
			for k, want := range c.has {
				if _, ok := m.Fetch[k]; ok != want {
					t.Errorf("fetch has %q: %v, want %v", k, ok, want)
				}
			}
			out, err := ParseHeartbeat(in.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			got := *out.Fetch
			if !got.RetryAt.Equal(c.fetch.RetryAt) {
				t.Fatalf("retry_at round trip = %v, want %v", got.RetryAt, c.fetch.RetryAt)
			}
			if got.RetryAt = c.fetch.RetryAt; got != c.fetch {
				t.Fatalf("round trip = %+v, want %+v", got, c.fetch)
			}
		})
	}
}

func TestHeartbeatParseIgnoresFieldsFromNewerHosts(t *testing.T) {
	if _, err := ParseHeartbeat([]byte(`{"schema":1,"node":"n1","state":"running","new_thing":3}`)); err != nil {
		t.Fatal(err)
	}
}

func TestHeartbeatParseRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"Malformed", `{"schema":`, "heartbeat:"},
		{"OtherSchema", `{"schema":2,"node":"n1","state":"running"}`, "schema 2"},
		{"BadNode", `{"schema":1,"node":"a.b","state":"running"}`, `node id "a.b"`},
		{"UnknownState", `{"schema":1,"node":"n1","state":"dancing"}`, `unknown state "dancing"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHeartbeat([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestHeartbeatSaysSinceWhenTheTargetExpiredOnlyWhileItHas(t *testing.T) {
	since := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		expired *time.Time
		want    string
	}{
		{"a target in force that has expired", &since, `"target_expired_since":"2026-12-06T12:00:00Z"`},
		{"no expired target", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Heartbeat{Node: "n1", State: StateRunning, Target: "v1.4.0", TargetExpiredSince: tc.expired}.Marshal()
			if tc.want == "" && strings.Contains(string(b), "target_expired_since") {
				t.Fatalf("the key is present without an expired target: %s", b)
			}
			if tc.want != "" && !strings.Contains(string(b), tc.want) {
				t.Fatalf("%s does not hold %s", b, tc.want)
			}
			out, err := ParseHeartbeat(b)
			if err != nil {
				t.Fatal(err)
			}
			if (out.TargetExpiredSince == nil) != (tc.expired == nil) || (tc.expired != nil && !out.TargetExpiredSince.Equal(since)) {
				t.Fatalf("round trip: %v", out.TargetExpiredSince)
			}
		})
	}
}

// The launcher object round trips with its keys as docs/wire.md names them, is absent when the
// host says nothing of its launcher, and its rollback keys are absent when there was none.
func TestHeartbeatLauncherRoundTripsWithTheDocumentedKeys(t *testing.T) {
	at := time.Date(2026, 11, 29, 7, 12, 3, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		launcher *Launcher
		keys     []string // the launcher object's keys, sorted; nil when it is absent
	}{
		{"no launcher said: the key is absent", nil, nil},
		{"a confirmed launcher: no rollback keys", &Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: LauncherConfirmed},
			[]string{"floor", "state", "version"}},
		{"on trial", &Launcher{Version: "v1.2.0", Floor: "v1.0.0", State: LauncherTrial}, []string{"floor", "state", "version"}},
		{"rolled back to the floor: when and why", &Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: LauncherFloor,
			RolledBackFrom: "v1.2.0", RolledBackAt: at, RollbackReason: "exited with status 2 before confirming"},
			[]string{"floor", "rollback_reason", "rolled_back_at", "rolled_back_from", "state", "version"}},
		{"an older launcher: version unknown, floor known", &Launcher{Floor: "v1.0.0"}, []string{"floor", "state", "version"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := Heartbeat{Node: "n1", State: StateRunning, Running: "v1.4.0", Launcher: tc.launcher}.Marshal()
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(b, &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["launcher"]; ok != (tc.keys != nil) {
				t.Fatalf("launcher key present = %v in %s", ok, b)
			}
			if tc.keys != nil {
				var l map[string]json.RawMessage
				if err := json.Unmarshal(raw["launcher"], &l); err != nil {
					t.Fatal(err)
				}
				var got []string
				for k := range l {
					got = append(got, k)
				}
				sort.Strings(got)
				if strings.Join(got, ",") != strings.Join(tc.keys, ",") {
					t.Errorf("launcher keys = %v, want %v", got, tc.keys)
				}
			}
			out, err := ParseHeartbeat(b)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.launcher == nil && out.Launcher != nil:
				t.Errorf("launcher = %+v, want none", out.Launcher)
			case tc.launcher != nil && (out.Launcher == nil || *out.Launcher != *tc.launcher):
				t.Errorf("launcher = %+v, want %+v", out.Launcher, tc.launcher)
			}
		})
	}
}

// A heartbeat is a report: a reader older than the launcher object (one whose heartbeat type
// has no such field) still reads a heartbeat that carries it, and a reader of today reads keys
// a newer host adds inside it.
func TestHeartbeatWithALauncherIsReadByOlderAndNewerReaders(t *testing.T) {
	newer := []byte(`{"schema":1,"node":"n1","state":"running","running":"v1.4.0","launcher":{"version":"v1.1.0","floor":"v1.0.0","state":"trial","since":"2026-11-29T07:12:03Z"}}`)
	type oldHeartbeat struct { // the heartbeat type before issue 19
		Schema  int    `json:"schema"`
		Node    string `json:"node"`
		State   string `json:"state"`
		Running string `json:"running"`
	}
	for _, tc := range []struct {
		name string
		read func() (string, error)
	}{
		{"a reader without the launcher field", func() (string, error) {
			var h oldHeartbeat
			err := DecodeReport(Heartbeat{Node: "n1", State: StateRunning, Running: "v1.4.0",
				Launcher: &Launcher{Version: "v1.1.0", State: LauncherTrial}}.Marshal(), &h)
			return h.Running, err
		}},
		{"today's reader, a key a newer host added inside the launcher", func() (string, error) {
			h, err := ParseHeartbeat(newer)
			if err == nil && (h.Launcher == nil || h.Launcher.State != LauncherTrial) {
				return "", fmt.Errorf("launcher = %+v", h.Launcher)
			}
			return h.Running, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			running, err := tc.read()
			if err != nil || running != "v1.4.0" {
				t.Fatalf("running %q, %v; want v1.4.0 read", running, err)
			}
		})
	}
}
