package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/novox/mesh-host/wire"
)

// A mixed fleet on the real bus, one node an older host whose heartbeat names no platform (only
// os and arch): `fleet` gives every node its PLATFORM, the older arm one as linux/arm/v7, and counts
// them under the table; --json and `fleet NODE` say the same.
func TestFleetShowsEachNodesPlatformAnOlderHostsToo(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	n := wire.NamesFor("")
	profiles := map[string]string{
		"x86-1": `{"os":"linux","arch":"amd64","platform":"linux/amd64"}`,
		"x86-2": `{"os":"linux","arch":"amd64","platform":"linux/amd64"}`,
		"pi-64": `{"os":"linux","arch":"arm64","platform":"linux/arm64"}`,
		"pi-32": `{"os":"linux","arch":"arm"}`, // an older host
	}
	for node, profile := range profiles {
		hb := `{"schema":1,"node":"` + node + `","state":"running","running":"v1.0.0","known_good":"v1.0.0","sent_at":"2026-12-02T12:00:00Z","profile":` + profile + `}`
		if _, err := c.JS.Publish(ctx, n.Heartbeat(node), []byte(hb)); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := execCmd(ctx, "fleet", nil, &out, "--nats", url); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^NODE +STATE +RUNNING +KNOWN-GOOD +TARGET +PLATFORM +LAUNCHER `),
		regexp.MustCompile(`(?m)^x86-1 +ok +v1\.0\.0 +v1\.0\.0 +- +linux/amd64 +- `),
		regexp.MustCompile(`(?m)^pi-64 .* linux/arm64 `),
		regexp.MustCompile(`(?m)^pi-32 .* linux/arm/v7 +- `),
		regexp.MustCompile(`\nby platform: 2 linux/amd64, 1 linux/arm/v7, 1 linux/arm64\n$`),
	} {
		if !want.MatchString(out.String()) {
			t.Errorf("the table does not match %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := execCmd(ctx, "fleet", nil, &out, "--nats", url, "--json"); err != nil {
		t.Fatal(err)
	}
	var rows []struct{ Node, Platform string }
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"x86-1": "linux/amd64", "x86-2": "linux/amd64", "pi-64": "linux/arm64", "pi-32": "linux/arm/v7"}
	for _, r := range rows {
		if r.Platform != want[r.Node] {
			t.Errorf("--json: %s's platform %q, want %q", r.Node, r.Platform, want[r.Node])
		}
	}

	out.Reset()
	if err := execCmd(ctx, "fleet", nil, &out, "pi-32", "--nats", url); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^  platform +linux/arm/v7 \(from its os and arch: its host names no platform, so its arm variant is taken as v7\)$`).MatchString(out.String()) {
		t.Errorf("fleet pi-32 does not say its platform and whence:\n%s", out.String())
	}
}
