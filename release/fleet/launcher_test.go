package fleet

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// The LAUNCHER column names the launcher each node's host runs under, marked when it is on
// trial, the floor, or rolled back; `--json` carries the heartbeat's launcher object as it came.
func TestFleetLauncherColumnSaysTheVersionMarkedAndJSONCarriesTheObject(t *testing.T) {
	rolledAt := now.Add(-5 * time.Minute)
	for _, tc := range []struct {
		name     string
		launcher *wire.Launcher
		cell     string
	}{
		{"a host that says nothing of its launcher", nil, "-"},
		{"a confirmed delivered launcher: the version alone", &wire.Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: wire.LauncherConfirmed}, "v1.1.0"},
		{"a launcher on trial", &wire.Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: wire.LauncherTrial}, "v1.1.0 (trial)"},
		{"the floor", &wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0", State: wire.LauncherFloor}, "v1.0.0 (floor)"},
		{"rolled back to the floor: the rollback says more than the state", &wire.Launcher{Version: "v1.0.0", Floor: "v1.0.0",
			State: wire.LauncherFloor, RolledBackFrom: "v1.2.0", RolledBackAt: rolledAt, RollbackReason: "crashed"}, "v1.0.0 (rolled back from v1.2.0)"},
		{"an older launcher: only the floor known", &wire.Launcher{Floor: "v1.0.0"}, "? (floor v1.0.0)"},
		{"hostile versions are printable and bounded", &wire.Launcher{Version: "v1\x1b[2J" + strings.Repeat("x", 500), State: wire.LauncherTrial},
			`v1\x1b[2J` + strings.Repeat("x", 20) + " …[cut 480 bytes] (trial)"}, // the version cut to maxIDCell
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb := steady("web-01")
			hb.Launcher = tc.launcher
			rows := Rows([]Entry{{Node: "web-01", Heard: now, Heartbeat: hb}}, now, 0)
			var buf bytes.Buffer
			if err := WriteText(&buf, rows, 0); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(buf.String(), "\n")
			col := strings.Index(lines[0], "LAUNCHER")
			end := strings.Index(lines[0], "LAST HEARD")
			if col < 0 || end < col || len(lines[1]) < end {
				t.Fatalf("no LAUNCHER column before LAST HEARD:\n%s", buf.String())
			}
			if got := strings.TrimSpace(lines[1][col:end]); got != tc.cell {
				t.Errorf("LAUNCHER cell %q, want %q", got, tc.cell)
			}
			if controlBytes(buf.String()) != "" {
				t.Errorf("a control character reached the table:\n%q", buf.String())
			}
			buf.Reset()
			if err := WriteJSON(&buf, rows); err != nil {
				t.Fatal(err)
			}
			var back []struct {
				Launcher *wire.Launcher `json:"launcher"`
			}
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			switch got := back[0].Launcher; {
			case tc.launcher == nil && got != nil:
				t.Errorf("json launcher %+v, want none", got)
			case tc.launcher != nil && (got == nil || !got.RolledBackAt.Equal(tc.launcher.RolledBackAt)):
				t.Errorf("json launcher %+v, want %+v", got, tc.launcher)
			case tc.launcher != nil:
				g, w := *got, *tc.launcher
				g.RolledBackAt, w.RolledBackAt = time.Time{}, time.Time{}
				if g != w {
					t.Errorf("json launcher %+v, want %+v", g, w)
				}
			}
		})
	}
}
