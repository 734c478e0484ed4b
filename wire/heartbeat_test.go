package wire

import (
	"encoding/json"
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
