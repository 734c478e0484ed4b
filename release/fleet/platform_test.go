package fleet

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
)

// heartbeatWithProfile is a steady node's heartbeat as the bus carries it, its profile the JSON
// given ("" for none).
func heartbeatWithProfile(t *testing.T, node, profile string) wire.Heartbeat {
	t.Helper()
	hb := steady(node)
	hb.Schema = wire.HeartbeatSchema
	b, err := json.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	if profile != "" {
		b = append(b[:len(b)-1], []byte(`,"profile":`+profile+`}`)...)
	}
	back, err := wire.ParseHeartbeat(b)
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return back
}

// The PLATFORM column, `platform` in --json and the story's platform line say each node's
// platform from its heartbeat: the host's own word, else (a host older than platforms) its os
// and arch — arm then without a variant, which the heartbeat does not say.
func TestFleetSaysEachNodesPlatformFromItsHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile string // the heartbeat's profile, "" for none
		json    string // platform in --json
		cell    string // PLATFORM, its start
		story   string // the story's platform line holds it
	}{
		{"a host naming its platform", `{"os":"linux","arch":"arm","platform":"linux/arm/v6"}`, "linux/arm/v6", "linux/arm/v6", "linux/arm/v6\n"},
		{"an older host on amd64: its os and arch", `{"os":"linux","arch":"amd64"}`, "linux/amd64", "linux/amd64", "linux/amd64 (from its os and arch"},
		{"an older host on arm: taken as v7, as the rollout's gate takes it", `{"os":"linux","arch":"arm"}`, "linux/arm/v7", "linux/arm/v7",
			"linux/arm/v7 (from its os and arch: its host names no platform, so its arm variant is taken as v7)"},
		{"a platform that is not one: its os and arch", `{"os":"linux","arch":"arm64","platform":"linux/arm64\u001b[2J"}`, "linux/arm64", "linux/arm64", "linux/arm64 (from its os and arch"},
		{"no profile yet", "", "", "-", "- (its heartbeat has no profile yet)"},
		{"a hostile arch is printable and bounded", `{"os":"linux","arch":"x\u001b[2J` + strings.Repeat("y", 60) + `"}`,
			"linux/x\x1b[2J" + strings.Repeat("y", 60), `linux/x\x1b[2J` + strings.Repeat("y", 16) + " …[cut", `linux/x\x1b[2J`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb := heartbeatWithProfile(t, "web-01", tc.profile)
			rows := Rows([]Entry{{Node: "web-01", Heard: now, Heartbeat: hb}}, now, 0)
			var buf bytes.Buffer
			if err := WriteText(&buf, rows, 0); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(buf.String(), "\n")
			col, end := strings.Index(lines[0], "PLATFORM"), strings.Index(lines[0], "LAUNCHER")
			if col < 0 || end < col || col < strings.Index(lines[0], "TARGET") {
				t.Fatalf("no PLATFORM column between TARGET and LAUNCHER:\n%s", buf.String())
			}
			if got := strings.TrimSpace(lines[1][col:end]); !strings.HasPrefix(got, tc.cell) {
				t.Errorf("PLATFORM cell %q, want %q", got, tc.cell)
			}
			if controlBytes(buf.String()) != "" {
				t.Errorf("a control character reached the table:\n%q", buf.String())
			}

			buf.Reset()
			if err := WriteJSON(&buf, rows); err != nil {
				t.Fatal(err)
			}
			var back []map[string]any
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if got, ok := back[0]["platform"]; !ok || got != tc.json {
				t.Errorf("json platform %q (present: %v), want %q", got, ok, tc.json)
			}

			buf.Reset()
			if err := WriteStory(&buf, StoryOf(Entry{Node: "web-01", Heard: now, Heartbeat: hb}, now, RowOptions{}), now); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), tc.story) {
				t.Errorf("the story does not say %q:\n%s", tc.story, buf.String())
			}
		})
	}
}

// A mixed fleet's table ends with its nodes counted by platform, the most first, the nodes that
// say none last, each platform's troubled nodes said (a release failing on one platform shows
// there); a fleet of one platform does not repeat what its column says.
func TestFleetTableCountsAMixedFleetByPlatform(t *testing.T) {
	amd := `{"os":"linux","arch":"amd64","platform":"linux/amd64"}`
	arm := `{"os":"linux","arch":"arm64","platform":"linux/arm64"}`
	for _, tc := range []struct {
		name     string
		profiles []string
		troubled int    // the index of a node rolled back, -1 for none
		want     string // the last line; "" for none
	}{
		{"one platform", []string{amd, amd}, 1, ""},
		{"mixed", []string{arm, amd, amd, amd, amd, arm}, -1, "by platform: 4 linux/amd64, 2 linux/arm64"},
		{"mixed, an arm64 node rolled back", []string{arm, amd, amd, amd, amd, arm}, 5, "by platform: 4 linux/amd64, 2 linux/arm64 (1 rolled back)"},
		{"some say none", []string{amd, "", arm, `{"os":"linux","arch":"arm"}`}, -1, "by platform: 1 linux/amd64, 1 linux/arm/v7, 1 linux/arm64, 1 unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var es []Entry
			for i, p := range tc.profiles {
				node := string(rune('a'+i)) + "-node"
				hb := heartbeatWithProfile(t, node, p)
				if i == tc.troubled {
					rolledBackFromV120(&hb)
				}
				es = append(es, Entry{Node: node, Heard: now, Heartbeat: hb})
			}
			var buf bytes.Buffer
			if err := WriteText(&buf, Rows(es, now, 0), 0); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			if tc.want == "" {
				if strings.HasPrefix(last, "by platform") {
					t.Errorf("a fleet of one platform counts it:\n%s", buf.String())
				}
				return
			}
			if last != tc.want {
				t.Errorf("last line %q, want %q", last, tc.want)
			}
		})
	}
}
