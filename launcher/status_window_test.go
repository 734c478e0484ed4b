package launcher

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// status says what the host's heartbeat says while it waits for its maintenance window, as long
// as the version it waits for is on disk and not running; a wait left behind for a version that
// runs now, or is gone, is not shown.
func TestStatusSaysTheNodeWaitsForItsWindowWhileThatVersionIsStaged(t *testing.T) {
	opens := time.Date(2026, 12, 2, 2, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		name    string
		version string // the version waited for
		staged  bool   // it is on disk beside v1.0.0
		running string // the version that waits, as a host of decision 0034 on says it
		shown   bool
	}{
		{"a staged version waiting", "v1.1.0", true, "", true},
		{"a staged version waiting, a restart holding to v1.0.0", "v1.1.0", true, "v1.0.0", true},
		{"the version that runs", "v1.0.0", false, "", false},
		{"a version not on disk", "v1.2.0", false, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := stagedRoot(t, os.Getpid())
			if tc.staged {
				if err := os.MkdirAll(rollback.VersionDir(root, tc.version), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(rollback.BinaryPath(root, tc.version), []byte("binary 2"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			w := &rollback.WindowWait{Version: tc.version, Opens: opens, Window: "mon-fri 02:00-04:00 Europe/Brussels", Running: tc.running}
			if err := rollback.WriteWindowWait(root, w); err != nil {
				t.Fatal(err)
			}
			rep := statusWhileLocked(t, root)
			text := textOf(t, rep)
			want := "window staged " + tc.version + ", waiting for the window (opens 2026-12-02T02:00+01:00)"
			if tc.running != "" {
				want += "; a restart runs " + tc.running + " until then"
			}
			if got := strings.Contains(text, want); got != tc.shown {
				t.Errorf("status shows %q: %v, want %v\n%s", want, got, tc.shown, text)
			}
			if (rep.WindowWait != nil) != tc.shown {
				t.Errorf("window_wait %+v, shown %v", rep.WindowWait, tc.shown)
			}
		})
	}
}

// status says `trust expired since T` while the host's newest root of trust has expired (what
// it left in ROOT/trust-expired.json), in text and JSON, and nothing once the file is gone.
func TestStatusSaysTrustExpiredSinceWhileTheHostSaysSo(t *testing.T) {
	since := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	root := stagedRoot(t, os.Getpid())
	if err := rollback.WriteTrustExpired(root, &rollback.TrustExpired{Since: since, Root: 4}); err != nil {
		t.Fatal(err)
	}
	rep := statusWhileLocked(t, root)
	if text := textOf(t, rep); !strings.Contains(text, "trust expired since 2026-12-02T12:00:00Z") {
		t.Errorf("status does not say trust expired:\n%s", text)
	}
	if rep.TrustExpiredSince == nil || !rep.TrustExpiredSince.Equal(since) || rep.State != StateHealthy {
		t.Errorf("trust_expired_since %v, state %s; want %v and a healthy node (nothing expiring stops it)", rep.TrustExpiredSince, rep.State, since)
	}
	if err := rollback.WriteTrustExpired(root, nil); err != nil {
		t.Fatal(err)
	}
	if rep := statusWhileLocked(t, root); rep.TrustExpiredSince != nil || strings.Contains(textOf(t, rep), "trust expired") {
		t.Errorf("status still says trust expired once the host said it is fresh: %v", rep.TrustExpiredSince)
	}
}
