package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The crashlater fixture is what the rollout's soak exists for: it confirms like the real host,
// then crashes after MESH_LAB_CRASH_AFTER, and its launcher keeps restarting it — a confirmed
// version is never rolled back — so the node alone never says it is broken.
func TestCrashLaterConfirmsThenCrashesAndIsRestartedNotRolledBack(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := newNode(t, "MESH_LAB_CRASH_AFTER=1s")
	place(t, n, "v1.0.0", PkgHost)
	place(t, n, "v1.1.0", PkgCrashLater)
	start(t, n, "--backoff-min", "100ms", "--backoff-max", "200ms")
	rep, err := n.WaitStatus(ctx, "v1.1.0 confirmed and failed twice since", func(rep launcher.Report) bool {
		v, _ := Version(rep, "v1.1.0")
		return v.Confirmed && v.FailuresTotal >= 2
	})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := Version(rep, "v1.1.0"); v.Bad || len(rep.Rollbacks) != 0 {
		t.Errorf("the confirmed version was judged: bad %v, rollbacks %+v", v.Bad, rep.Rollbacks)
	}
	if !strings.Contains(n.Log(), "(lab fixture crashlater)") {
		t.Errorf("the launcher's log does not say why it crashed")
	}
	if _, err := n.WaitStatus(ctx, "v1.1.0 running again", func(rep launcher.Report) bool { return Running(rep) == "v1.1.0" }); err != nil {
		t.Fatal(err)
	}
}
