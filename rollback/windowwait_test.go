package rollback

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// While the host waits for its maintenance window to stand aside for a newer version, the
// launcher starts the version that waits (a crash restart, a reboot), not the newer one; once
// the window opens, or when the version that waited cannot run, or the wait was left by a host
// that does not say which version waits, it starts Choose's answer.
func TestChooseToStartRunsTheVersionThatWaitsForItsWindowUntilItOpens(t *testing.T) {
	now := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	later := now.Add(6 * time.Hour)
	for _, tc := range []struct {
		name   string
		wait   *WindowWait // nil: no window-wait.json
		badV1  bool        // v1.0.0 is marked bad
		goneV1 bool        // v1.0.0's binary is gone
		want   string
		held   bool
	}{
		{"no wait", nil, false, false, "v1.1.0", false},
		{"waiting for the newer version", &WindowWait{Version: "v1.1.0", Opens: later, Running: "v1.0.0"}, false, false, "v1.0.0", true},
		{"waiting for another newer version than the one chosen", &WindowWait{Version: "v1.0.5", Opens: later, Running: "v1.0.0"}, false, false, "v1.0.0", true},
		{"the window has opened", &WindowWait{Version: "v1.1.0", Opens: now, Running: "v1.0.0"}, false, false, "v1.1.0", false},
		{"a host that does not say which version waits", &WindowWait{Version: "v1.1.0", Opens: later}, false, false, "v1.1.0", false},
		{"the version that waited is marked bad", &WindowWait{Version: "v1.1.0", Opens: later, Running: "v1.0.0"}, true, false, "v1.1.0", false},
		{"the version that waited is gone", &WindowWait{Version: "v1.1.0", Opens: later, Running: "v1.0.0"}, false, true, "v1.1.0", false},
		{"the version that waits is the chosen one", &WindowWait{Version: "v1.2.0", Opens: later, Running: "v1.1.0"}, false, false, "v1.1.0", false},
		{"the wait names a newer version running than the chosen", &WindowWait{Version: "v1.3.0", Opens: later, Running: "v1.2.0"}, false, false, "v1.1.0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			stage(t, root, "v1.0.0", "")
			r, _ := openRecords(t, root)
			ctx := context.Background()
			see(t, r, root) // v1.0.0 ran before v1.1.0 was staged
			stage(t, root, "v1.1.0", "")
			see(t, r, root)
			if tc.badV1 {
				if err := r.MarkBad(ctx, "v1.0.0", "withdrawn"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.goneV1 {
				if err := os.Remove(BinaryPath(root, "v1.0.0")); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteWindowWait(root, tc.wait); err != nil {
				t.Fatal(err)
			}
			w, err := ReadWindowWait(root)
			if err != nil {
				t.Fatal(err)
			}
			ch, err := r.ChooseToStart(ctx, root, w, now)
			if err != nil {
				t.Fatalf("ChooseToStart: %v", err)
			}
			if ch.Version != tc.want || (ch.Held != nil) != tc.held {
				t.Errorf("ChooseToStart = %s, held %+v; want %s, held %v", ch.Version, ch.Held, tc.want, tc.held)
			}
			if tc.held && (ch.Held.Version != "v1.1.0" || ch.Held.Wait.Running != "v1.0.0") {
				t.Errorf("held %+v, want v1.1.0 held for the window v1.0.0 waits for", ch.Held)
			}
			if plain := see(t, r, root); plain.Version != "v1.1.0" && !tc.badV1 && !tc.goneV1 {
				t.Errorf("Choose = %s after ChooseToStart: the host must still see the newer version", plain.Version)
			}
		})
	}
}

// A wait file that is not what a host writes is refused, saying why.
func TestReadWindowWaitRefusesWhatAHostDoesNotWrite(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"not JSON", "{", "unexpected end of JSON input"},
		{"a path for a version", `{"version":"v1.1.0","opens":"2099-01-01T00:00:00Z","running":"../../bin"}`, `names "../../bin", not a version`},
		{"too long", `{"version":"` + strings.Repeat("v", 5000) + `"}`, "is over 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			if err := os.WriteFile(filepath.Join(root, WindowWaitName), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			w, err := ReadWindowWait(root)
			if w != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), WindowWaitName) {
				t.Errorf("ReadWindowWait = %+v, %v; want an error naming %s and saying %q", w, err, WindowWaitName, tc.want)
			}
		})
	}
}
