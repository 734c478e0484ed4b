package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Drift: the timer's reconcile finds a file whose content and mode were changed and a directory
// that was removed, puts them back, and hands the heartbeat what drifted (setApplied) with what
// the host owns.
func TestTheTimerReconcilePutsDriftBackAndReportsIt(t *testing.T) {
	b, hbs, th := linkedHost(t, func(c *config.Config) { c.ReconcileInterval = config.Duration(100 * time.Millisecond) })
	dir := filepath.Join(t.TempDir(), "app")
	f, sub := filepath.Join(dir, "app.conf"), filepath.Join(dir, "data")
	rev := b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "directory", "id": %q, "spec": {"mode": "0750"}},
		{"type": "file", "id": %q, "spec": {"content": "right\n", "mode": "0640"}},
		{"type": "directory", "id": %q}`, dir, f, sub)))
	meshtest.WaitHeartbeat(t, hbs, "the declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })
	meshtest.Eventually(t, "the declaration applied", func() bool { _, err := os.Stat(sub); return err == nil })
	timers := th.reconciles().Count("timer")

	if err := os.WriteFile(f, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(f, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	// A timer reconcile may fall between the changes above: the drift is then found in two.
	var whats map[string]string
	meshtest.Eventually(t, "the drift put back and reported", func() bool {
		b, err := os.ReadFile(f)
		fi, ferr := os.Stat(f)
		_, serr := os.Stat(sub)
		_, drifted := th.h.machine.applied()
		whats = map[string]string{}
		for _, d := range drifted {
			if !d.Restored || d.At.IsZero() {
				t.Errorf("drifted %+v: want it restored, with its time", d)
			}
			whats[d.Type+" "+filepath.Base(d.ID)] += d.What + "; "
		}
		return err == nil && string(b) == "right\n" && ferr == nil && fi.Mode().Perm() == 0o640 && serr == nil &&
			strings.Contains(whats["file app.conf"], "mode") && whats["directory data"] != ""
	})
	if th.reconciles().Count("timer") <= timers {
		t.Errorf("no timer reconcile ran, yet the drift was put back: by what?")
	}
	if len(whats) != 2 || !strings.HasPrefix(whats["directory data"], "absent") || !strings.Contains(whats["file app.conf"], "content") {
		t.Errorf("drifted %q; want the directory (absent) and the file (content and mode)", whats)
	}
	owned, _ := th.h.machine.applied()
	if owned.Total != 3 || owned.ByType["directory"] != 2 || owned.ByType["file"] != 1 || owned.AppliedAt == nil {
		t.Errorf("owned %+v; want 2 directories and a file, and when they were last applied", owned)
	}
	// The heartbeat after it says what drifted, and what the host owns.
	hb := meshtest.WaitHeartbeat(t, hbs, "a heartbeat naming the drift", func(hb wire.Heartbeat) bool {
		kinds := map[string]bool{}
		for _, d := range hb.Drift {
			kinds[d.Type+" "+filepath.Base(d.ID)] = d.Restored
		}
		return kinds["directory data"] && kinds["file app.conf"]
	})
	if hb.Inventory == nil || hb.Inventory.Owned.Total != 3 {
		t.Errorf("heartbeat inventory %+v; want it to count the 3 owned resources", hb.Inventory)
	}
}

// The drift check with nothing drifted reports nothing and changes nothing.
func TestATimerReconcileWithNothingDriftedReportsNoDrift(t *testing.T) {
	b, hbs, th := linkedHost(t, func(c *config.Config) { c.ReconcileInterval = config.Duration(50 * time.Millisecond) })
	dir := filepath.Join(t.TempDir(), "d")
	rev := b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "directory", "id": %q}`, dir)))
	meshtest.WaitHeartbeat(t, hbs, "the declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })
	timers := th.reconciles().Count("timer")
	meshtest.Eventually(t, "three timer reconciles", func() bool { return th.reconciles().Count("timer") >= timers+3 })
	if owned, drifted := th.h.machine.applied(); len(drifted) != 0 || owned.Total != 1 {
		t.Errorf("owned %+v drifted %+v; want one directory and no drift", owned, drifted)
	}
}
