package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Roots v1…v4 on the real bus, nodes on v4, v3, host.json's keys, and one whose trust expired:
// `fleet` gives each its TRUST and counts them under the table; --json and `fleet NODE` say
// the same.
func TestFleetShowsTheNodesBehindTheNewestRootAndTheExpired(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	n := wire.NamesFor("")
	for _, r := range meshtest.RootChain(t, 4, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)) {
		if _, err := c.JS.Publish(ctx, "$KV."+n.Releases()+"."+wire.RootKey(r.Version), r.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	trust := map[string]string{
		"on-v4":   `"trust_root":4`,
		"on-v3":   `"trust_root":3`,
		"keys":    ``,
		"expired": `"trust_root":4,"trust_expired_since":"2026-12-01T00:00:00Z"`,
	}
	for node, fields := range trust {
		if fields != "" {
			fields = "," + fields
		}
		hb := `{"schema":1,"node":"` + node + `","state":"running","running":"v1.0.0","known_good":"v1.0.0","sent_at":"2026-12-02T12:00:00Z"` + fields + `}`
		if _, err := c.JS.Publish(ctx, n.Heartbeat(node), []byte(hb)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := execCmd(ctx, "fleet", nil, &out, "--nats", url); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^NODE +STATE +RUNNING +KNOWN-GOOD +TARGET +PLATFORM +TRUST +LAUNCHER `),
		regexp.MustCompile(`(?m)^expired +trust expired since 2026-12-01T00:00:00Z +v1\.0\.0 .* root v4 \(expired\) +- `),
		regexp.MustCompile(`(?m)^on-v4 +ok .* root v4 +- `),
		regexp.MustCompile(`(?m)^on-v3 +ok .* root v3 \(behind\) +- `),
		regexp.MustCompile(`(?m)^keys +ok .* no root \(behind\) +- `),
		regexp.MustCompile(`(?m)^4 nodes, 0 silent \(silent after 1m30s unheard\); 1 trust expired$`),
		regexp.MustCompile(`\ntrust: 2 on root v4, 2 behind \(v3, no root\), 1 expired\n$`),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("the table does not match %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := execCmd(ctx, "fleet", nil, &out, "--nats", url, "--json"); err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Node              string
		TrustRoot         uint64  `json:"trust_root"`
		TrustBehind       bool    `json:"trust_behind"`
		TrustExpiredSince *string `json:"trust_expired_since"`
		StatusKind        string  `json:"status_kind"`
	}
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	type facts struct {
		root    uint64
		behind  bool
		expired bool
		kind    string
	}
	want := map[string]facts{"on-v4": {4, false, false, "ok"}, "on-v3": {3, true, false, "ok"}, "keys": {0, true, false, "ok"}, "expired": {4, false, true, "trust-expired"}}
	for _, r := range rows {
		if got := (facts{r.TrustRoot, r.TrustBehind, r.TrustExpiredSince != nil, r.StatusKind}); got != want[r.Node] {
			t.Errorf("--json: %s: %+v, want %+v", r.Node, got, want[r.Node])
		}
	}

	out.Reset()
	if err := execCmd(ctx, "fleet", nil, &out, "on-v3", "--nats", url); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^  trust +root v3, behind root v4 on the bus$`).MatchString(out.String()) {
		t.Errorf("fleet on-v3 does not say it is behind:\n%s", out.String())
	}
}
