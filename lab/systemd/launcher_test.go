package systemd

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/lab"
	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Issue 19, section 7: launcher versions under real systemd. Each scenario boots a node from the
// .deb (the floor is the package's /usr/bin/mesh-launcher, the unit's ExecStart), stages a
// launcher under ROOT/launchers as a host stages one (rollback.NewLauncherStaging, its digest
// recorded as delivered, one rename) from outside through the node's overlay, and reads
// systemd's own view (`systemctl show`) inside the node. Scenario 5 (the package naming itself)
// is TestPackageUpgradeNeverStopsTheHost's.

// nodeRoot is the launcher's root inside n, as this machine sees it.
func nodeRoot(n *Node) string { return filepath.Join(n.Root(), "var/lib/mesh-host") }

// stageIn stages binary as launcher version v in n's root, as a host does.
func stageIn(t *testing.T, ctx context.Context, n *Node, v, binary string) {
	t.Helper()
	if err := lab.StageLauncher(ctx, nodeRoot(n), v, binary, packaged); err != nil {
		t.Fatal(err)
	}
}

// launcherOf reads what n's records.db says of the launcher.
func launcherOf(t *testing.T, ctx context.Context, n *Node) rollback.LauncherReport {
	t.Helper()
	r, err := rollback.OpenForHost(ctx, nodeRoot(n))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := r.LauncherStatus(ctx, nodeRoot(n))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// launcherVersion is the record of launcher version v, if any.
func launcherVersion(rep rollback.LauncherReport, v string) (rollback.LauncherRecord, bool) {
	i := slices.IndexFunc(rep.Versions, func(l rollback.LauncherRecord) bool { return l.Version == v })
	if i < 0 {
		return rollback.LauncherRecord{}, false
	}
	return rep.Versions[i], true
}

// hostStarts are the outcomes of version's starts in n's records ("" while one is open).
func hostStarts(t *testing.T, ctx context.Context, n *Node, version string) []string {
	t.Helper()
	r, err := rollback.OpenForHost(ctx, nodeRoot(n))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	starts, err := r.Starts(ctx, version)
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, s := range starts {
		outs = append(outs, string(s.Outcome))
	}
	return outs
}

// launcherStatus is `mesh-launcher status --json` inside n.
func launcherStatus(t *testing.T, ctx context.Context, n *Node) launcher.Report {
	t.Helper()
	out, _ := n.Exec(ctx, "mesh-launcher", "status", "--json") // exits non-zero when degraded; the JSON is what matters
	var rep launcher.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("mesh-launcher status --json: %v\n%s", err, out)
	}
	return rep
}

// exeOf is what pid (as n numbers it) runs, read inside n.
func exeOf(ctx context.Context, n *Node, pid string) string {
	out, _ := n.Exec(ctx, "readlink", "/proc/"+pid+"/exe")
	return strings.TrimSpace(string(out))
}

// eventually polls ok every 200 ms for up to 2 minutes, failing with n's state if it never holds.
func eventually(t *testing.T, ctx context.Context, n *Node, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("node %s: waiting for %s\nlauncher records: %+v\n%s", n.Name, what, launcherOf(t, context.Background(), n), diagnose(n))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// launcherIs says whether n's records name v as the launcher running, in state.
func launcherIs(t *testing.T, ctx context.Context, n *Node, v, state string) func() bool {
	return func() bool {
		rep := launcherOf(t, ctx, n)
		return rep.Version == v && rep.State == state
	}
}

// hostConfirmedUnder waits until n's unit is active with the packaged host confirmed after
// restarts automatic restarts (NRestarts; "" for any), the launcher records name v in state, and
// exactly one host runs, a child of MainPID; it returns the unit's properties.
func hostConfirmedUnder(t *testing.T, ctx context.Context, n *Node, restarts, v, state string) map[string]string {
	t.Helper()
	var p map[string]string
	eventually(t, ctx, n, "the host confirmed under launcher "+v+" ("+state+") after NRestarts="+restarts, func() bool {
		var err error
		if p, err = showProps(ctx, n); err != nil || p["ActiveState"] != "active" || p["StatusText"] != "running "+packaged+" (confirmed)" ||
			restarts != "" && p["NRestarts"] != restarts {
			return false
		}
		hosts := hostPIDs(t, ctx, n)
		return len(hosts) == 1 && hosts[0].ppid == p["MainPID"] && launcherIs(t, ctx, n, v, state)()
	})
	return p
}

// hostNotBad checks the host release was not judged for its launcher's failure: not bad, and
// no start of it recorded failed (one whose launcher died is interrupted).
func hostNotBad(t *testing.T, ctx context.Context, n *Node) {
	t.Helper()
	if v, ok := lab.Version(launcherStatus(t, ctx, n), packaged); !ok || v.Bad {
		t.Errorf("host %s after its launcher failed: %+v, want it listed and not bad", packaged, v)
	}
	if outs := hostStarts(t, ctx, n, packaged); slices.Contains(outs, string(rollback.OutcomeFailed)) {
		t.Errorf("host %s's starts %q: a start whose launcher died is recorded failed", packaged, outs)
	}
}

// lastJournal is when the unit's journal last logged a line containing msg.
func lastJournal(t *testing.T, ctx context.Context, n *Node, msg string) time.Time {
	t.Helper()
	out, err := n.Exec(ctx, "journalctl", "--no-pager", "-u", "mesh-launcher", "-o", "short-unix", "--grep", msg)
	if err != nil {
		t.Fatal(err)
	}
	var at time.Time
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		stamp, _, _ := strings.Cut(line, " ")
		if sec, err := strconv.ParseFloat(stamp, 64); err == nil {
			at = time.Unix(0, int64(sec*1e9))
		}
	}
	if at.IsZero() {
		t.Fatalf("the journal has no %q:\n%s", msg, out)
	}
	return at
}

// dropIn is a drop-in for the unit, as install's files take it.
func dropIn(name, body string) map[string]string {
	return map[string]string{"etc/systemd/system/mesh-launcher.service.d/" + name: "[Service]\n" + body}
}

// TestLauncherUnderSystemd runs issue 19's launcher scenarios (section 7) on nodes installed
// from the .deb, under real systemd.
func TestLauncherUnderSystemd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)
	build := func(t *testing.T, pkg, name string, x ...string) string {
		t.Helper()
		p, err := w.builder.BuildX(ctx, pkg, name, x...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := func(t *testing.T, v string) string {
		return build(t, lab.PkgLauncher, "mesh-launcher-"+v, lab.LauncherVersionX+v)
	}
	bad := func(t *testing.T, v, mode string) string {
		return build(t, lab.PkgBadLauncher, "badlauncher-"+mode+"-"+v, "main.version="+v, "main.mode="+mode)
	}

	// 1. A newer launcher staged while the host runs is taken by exec: systemd sees the same
	// MainPID and no restart, the host keeps its pid and its start stays open, its reconciles and
	// output go on, and READY, STATUS= and the watchdog continue (WatchdogSec lowered to 6s by a
	// drop-in so that a watchdog the new image did not ping would fire within the test).
	t.Run("newer launcher is taken by exec keeping the host", func(t *testing.T) {
		n := w.install(t, ctx, "lnew", dropIn("watchdog.conf", "WatchdogSec=6s\n"))
		before := show(t, ctx, n)
		hosts := hostPIDs(t, ctx, n)
		if len(hosts) != 1 {
			t.Fatalf("hosts %+v, want one", hosts)
		}
		next := good(t, "v9.0.0")
		staged := time.Now()
		stageIn(t, ctx, n, "v9.0.0", next)
		eventually(t, ctx, n, "launcher v9.0.0 confirmed", launcherIs(t, ctx, n, "v9.0.0", rollback.LauncherConfirmed))
		took := time.Now()
		t.Logf("figure: staged → launcher v9.0.0 confirmed, the host kept: %s (--launcher-check 5s)", took.Sub(staged).Round(time.Millisecond))
		if exe := exeOf(ctx, n, before["MainPID"]); exe != "/var/lib/mesh-host/launchers/v9.0.0/mesh-launcher" {
			t.Errorf("MainPID %s runs %q, want the staged launcher v9.0.0", before["MainPID"], exe)
		}
		// Past WatchdogSec: the new image pings, STATUS= says what runs again.
		time.Sleep(8 * time.Second)
		p := waitShow(t, ctx, n, "STATUS= running "+packaged+" (confirmed)", func(p map[string]string) bool {
			return p["StatusText"] == "running "+packaged+" (confirmed)"
		})
		if p["MainPID"] != before["MainPID"] || p["NRestarts"] != "0" || p["ActiveState"] != "active" || p["SubState"] != "running" {
			t.Errorf("after the takeover %v, want MainPID %s, NRestarts=0, active (running)", p, before["MainPID"])
		}
		if now := hostPIDs(t, ctx, n); len(now) != 1 || now[0].pid != hosts[0].pid || now[0].ppid != before["MainPID"] {
			t.Errorf("hosts %+v after the takeover, want the same one (%+v), a child of MainPID %s", now, hosts[0], before["MainPID"])
		}
		if outs := hostStarts(t, ctx, n, packaged); len(outs) != 1 || outs[0] != "" {
			t.Errorf("host %s's starts %q, want exactly one, still open (no start recorded as ended)", packaged, outs)
		}
		// No reconcile lost: none stopped half-way, and the host's completed reconciles reach
		// the journal through the new image.
		var after int
		for _, e := range hostLog(t, ctx, n, "reconcile completed") {
			if e.at.After(took) {
				after++
			}
		}
		if after < 3 {
			t.Errorf("%d reconciles completed in the journal since the takeover, want one every second", after)
		}
		if stopped := hostLog(t, ctx, n, "reconcile stopped between steps"); len(stopped) > 0 {
			t.Errorf("a reconcile was interrupted: %+v", stopped)
		}
		j, _ := n.Exec(ctx, "journalctl", "--no-pager", "-u", "mesh-launcher")
		for _, want := range []string{"took over as launcher; the host keeps running"} {
			if !strings.Contains(string(j), want) {
				t.Errorf("the journal does not say %q:\n%s", want, j)
			}
		}
		for _, not := range []string{"were open after exec", "Watchdog timeout"} {
			if strings.Contains(string(j), not) {
				t.Errorf("the journal says %q:\n%s", not, j)
			}
		}
	})

	// 1, as the issue has it: a rollout of a host release carrying a newer launcher (manifest
	// `launcher`, archive mesh-host + mesh-launcher). The node stages the launcher and takes it by
	// exec: systemd sees the same MainPID and no restart, and the heartbeat names the launcher
	// confirmed with the new host.
	t.Run("rollout of a release carrying a newer launcher", func(t *testing.T) {
		n := w.install(t, ctx, "lroll", nil)
		before := show(t, ctx, n)
		rel := *w.rel
		rel.Launcher = good(t, "v9.3.0")
		bin, err := w.builder.Build(ctx, lab.PkgHost, "v1.3.0")
		if err != nil {
			t.Fatal(err)
		}
		if err := rel.Ship(ctx, "v1.3.0", bin); err != nil {
			t.Fatal(err)
		}
		if err := rel.Target(ctx, "v1.3.0", n.Name); err != nil {
			t.Fatal(err)
		}
		w.waitBeat(t, ctx, n, "v1.3.0 confirmed under launcher v9.3.0 (confirmed)", func(b lab.Beat) bool {
			return lab.RunningConfirmed("v1.3.0")(b) && b.Launcher != nil && b.Launcher.Version == "v9.3.0" &&
				b.Launcher.State == "confirmed" && b.Launcher.Floor == launcher.Version
		})
		p := show(t, ctx, n)
		if p["MainPID"] != before["MainPID"] || p["NRestarts"] != "0" || p["ActiveState"] != "active" {
			t.Errorf("after the rollout %v, want MainPID %s, NRestarts=0, active", p, before["MainPID"])
		}
		if exe := exeOf(ctx, n, p["MainPID"]); exe != "/var/lib/mesh-host/launchers/v9.3.0/mesh-launcher" {
			t.Errorf("MainPID %s runs %q, want the delivered launcher v9.3.0", p["MainPID"], exe)
		}
		if hosts := hostPIDs(t, ctx, n); len(hosts) != 1 || hosts[0].ppid != p["MainPID"] {
			t.Errorf("hosts %+v, want one, a child of MainPID %s", hosts, p["MainPID"])
		}
		if stopped := hostLog(t, ctx, n, "reconcile stopped between steps"); len(stopped) > 0 {
			t.Errorf("a reconcile was interrupted: %+v", stopped)
		}
	})

	// 2. A launcher that crashes at start: systemd restarts the unit (Restart=always), the floor
	// judges it — bad, with its reason and output — and execs the previous launcher, which runs
	// the host again. The host release is not judged for it.
	t.Run("crashing launcher is rolled back to the previous one", func(t *testing.T) {
		n := w.install(t, ctx, "lcrash", nil)
		stageIn(t, ctx, n, "v9.0.0", good(t, "v9.0.0"))
		eventually(t, ctx, n, "launcher v9.0.0 confirmed", launcherIs(t, ctx, n, "v9.0.0", rollback.LauncherConfirmed))
		before := show(t, ctx, n)
		crash := bad(t, "v9.1.0", "crash")
		staged := time.Now()
		stageIn(t, ctx, n, "v9.1.0", crash)
		p := hostConfirmedUnder(t, ctx, n, "1", "v9.0.0", rollback.LauncherConfirmed)
		back := time.Now()
		execd := lastJournal(t, ctx, n, "taking the new launcher by exec.* to=v9.1.0 ")
		t.Logf("figure: a crashing launcher → the previous one running the host again, under systemd: %s from staging (--launcher-check 5s), %s from its exec (RestartSec=5s)",
			back.Sub(staged).Round(time.Millisecond), back.Sub(execd).Round(time.Millisecond))
		if p["NRestarts"] != "1" || p["MainPID"] == before["MainPID"] {
			t.Errorf("after the crash %v, want NRestarts=1 and a new MainPID (was %s)", p, before["MainPID"])
		}
		if exe := exeOf(ctx, n, p["MainPID"]); exe != "/var/lib/mesh-host/launchers/v9.0.0/mesh-launcher" {
			t.Errorf("MainPID %s runs %q, want the previous launcher v9.0.0", p["MainPID"], exe)
		}
		rep := launcherOf(t, ctx, n)
		v, ok := launcherVersion(rep, "v9.1.0")
		if !ok || v.Bad.IsZero() || !strings.Contains(v.BadReason, "it crashed: panic: assignment to entry in nil map") || !strings.Contains(v.BadOutput, "badlauncher v9.1.0 starting") {
			t.Errorf("launcher v9.1.0 %+v, want it bad for its panic, with its output", v)
		}
		if len(rep.Rollbacks) != 1 || rep.Rollbacks[0].From != "v9.1.0" || rep.Rollbacks[0].To != "v9.0.0" {
			t.Errorf("launcher rollbacks %+v, want one from v9.1.0 to v9.0.0", rep.Rollbacks)
		}
		if rep.RolledBackFrom != "v9.1.0" {
			t.Errorf("rolled_back_from %q, want v9.1.0", rep.RolledBackFrom)
		}
		hostNotBad(t, ctx, n)
		// Never run again: past another check and RestartSec, nothing restarts.
		time.Sleep(7 * time.Second)
		if p := show(t, ctx, n); p["NRestarts"] != "1" || p["ActiveState"] != "active" {
			t.Errorf("%v after the rollback, want still active with NRestarts=1 (the bad launcher never runs again)", p)
		}
	})

	// 3. A launcher that hangs (never pings the watchdog, never runs a host) is killed by
	// systemd's watchdog (SIGABRT; WatchdogSec lowered to 10s by a drop-in), and the floor it was
	// taken from runs the host again.
	t.Run("hanging launcher is killed by the watchdog and rolled back", func(t *testing.T) {
		n := w.install(t, ctx, "lhang", dropIn("watchdog.conf", "WatchdogSec=10s\n"))
		stageIn(t, ctx, n, "v9.2.0", bad(t, "v9.2.0", "hang"))
		eventually(t, ctx, n, "the unit restarted", func() bool {
			p, err := showProps(ctx, n)
			return err == nil && p["NRestarts"] == "1"
		})
		p := hostConfirmedUnder(t, ctx, n, "1", launcher.Version, rollback.LauncherFloor)
		if exe := exeOf(ctx, n, p["MainPID"]); exe != "/usr/bin/mesh-launcher" {
			t.Errorf("MainPID %s runs %q, want the floor", p["MainPID"], exe)
		}
		rep := launcherOf(t, ctx, n)
		if v, ok := launcherVersion(rep, "v9.2.0"); !ok || v.Bad.IsZero() || !strings.Contains(v.BadReason, "it hung and systemd's watchdog killed it (systemd: result watchdog") {
			t.Errorf("launcher v9.2.0 %+v, want it bad: hung, killed by the watchdog", v)
		}
		if len(rep.Rollbacks) != 1 || rep.Rollbacks[0].From != "v9.2.0" || rep.Rollbacks[0].To != launcher.Version {
			t.Errorf("launcher rollbacks %+v, want one from v9.2.0 to the floor %s", rep.Rollbacks, launcher.Version)
		}
		j, err := n.Exec(ctx, "journalctl", "--no-pager", "-u", "mesh-launcher", "--grep", "Watchdog timeout|with signal SIGABRT")
		if err != nil || !strings.Contains(string(j), "Watchdog timeout (limit 10s)") || !strings.Contains(string(j), "(mesh-launcher) with signal SIGABRT") {
			t.Errorf("systemd's journal does not say its watchdog killed the launcher with SIGABRT: %v\n%s", err, j)
		}
		hostNotBad(t, ctx, n)
	})

	// 4a. The node reboots while a launcher is on trial (its host frozen, so it cannot confirm).
	// A clean `systemctl reboot` stops it as a launcher should; a forced one (reboot(2), nothing
	// stopped) leaves it not ended on the boot before. Neither is judged: the trial goes on after
	// boot and the launcher confirms.
	for _, tc := range []struct{ name, how string }{
		{"systemctl reboot", ""},
		{"systemctl reboot -ff", "-ff"},
	} {
		t.Run("reboot during a launcher trial/"+tc.name, func(t *testing.T) {
			name := "lboot"
			if tc.how == "-ff" {
				name = "lbootff"
			}
			// A frozen host ignores SIGTERM: the clean stop would wait the 90s stop timeout.
			n := w.install(t, ctx, name, dropIn("stop.conf", "ExecStart=\nExecStart=/usr/bin/mesh-launcher run --stop-timeout 3s\n"))
			hosts := hostPIDs(t, ctx, n)
			if len(hosts) != 1 {
				t.Fatalf("hosts %+v, want one", hosts)
			}
			if _, err := n.Exec(ctx, "kill", "-STOP", hosts[0].pid); err != nil {
				t.Fatal(err)
			}
			stageIn(t, ctx, n, "v9.0.0", good(t, "v9.0.0"))
			eventually(t, ctx, n, "launcher v9.0.0 on trial", launcherIs(t, ctx, n, "v9.0.0", rollback.LauncherTrial))
			time.Sleep(time.Second)
			if rep := launcherOf(t, ctx, n); rep.State != rollback.LauncherTrial {
				t.Fatalf("launcher %s is %s before the reboot, want still on trial", rep.Version, rep.State)
			}
			old := n.PID()
			var flags []string
			if tc.how != "" {
				flags = []string{tc.how}
			}
			if _, err := n.Reboot(ctx, flags...); err != nil {
				t.Fatal(err)
			}
			if n.PID() == old {
				t.Fatalf("the node's PID 1 is %d as before the reboot", old)
			}
			hostConfirmedUnder(t, ctx, n, "0", "v9.0.0", rollback.LauncherConfirmed)
			// Forced, the launcher on trial never said it ended: the floor saw it left so on
			// the boot before (the node's boot_id is new) and did not judge it.
			j, _ := n.Exec(ctx, "journalctl", "--no-pager", "-b", "-u", "mesh-launcher")
			if said := strings.Contains(string(j), "ended with it; not judged"); said != (tc.how == "-ff") {
				t.Errorf("after %s the floor said it did not judge the launcher of the boot before: %v, want %v\n%s", tc.name, said, tc.how == "-ff", j)
			}
			rep := launcherOf(t, ctx, n)
			if v, ok := launcherVersion(rep, "v9.0.0"); !ok || !v.Bad.IsZero() {
				t.Errorf("launcher v9.0.0 after the reboot: %+v, want it not bad", v)
			}
			if len(rep.Rollbacks) != 0 {
				t.Errorf("launcher rollbacks %+v after a reboot, want none", rep.Rollbacks)
			}
			hostNotBad(t, ctx, n)
		})
	}

	// 4b. SIGKILL of the launcher (MainPID) around its exec. Right after staging, while the floor
	// still runs (it looks every 5s): systemd starts the unit again, the floor is not judged (it
	// is the floor), execs v9.0.0 before it starts a host, and v9.0.0 confirms; nothing is bad.
	// Just after the exec (the new image adopting the host), the kill ends v9.0.0's image on
	// trial; the unit's ExecStopPost records systemd's word (signal, killed KILL), so the floor
	// knows it was killed from outside and does not judge it (decision 0018): v9.0.0 runs again
	// and confirms. Either way exactly one host runs and the host release is not judged.
	for _, tc := range []struct{ name, when, v, state string }{
		{"right after staging", "before", "v9.0.0", rollback.LauncherConfirmed},
		{"just after the exec", "after", "v9.0.0", rollback.LauncherConfirmed},
	} {
		t.Run("SIGKILL of the launcher/"+tc.name, func(t *testing.T) {
			n := w.install(t, ctx, "lkill"+tc.when, nil)
			next := good(t, "v9.0.0")
			before := show(t, ctx, n)
			pid := before["MainPID"]
			killed := make(chan error, 1)
			if tc.when == "after" {
				// Inside the node, as close to the exec as a process can see it: the moment
				// MainPID runs another file.
				go func() {
					_, err := n.Exec(ctx, "timeout", "60", "sh", "-c",
						`while [ "$(readlink /proc/`+pid+`/exe)" = /usr/bin/mesh-launcher ]; do :; done; kill -KILL `+pid)
					killed <- err
				}()
			}
			stageIn(t, ctx, n, "v9.0.0", next)
			if tc.when == "before" {
				_, err := n.Exec(ctx, "kill", "-KILL", pid)
				killed <- err
			}
			if err := <-killed; err != nil {
				t.Fatal(err)
			}
			p := hostConfirmedUnder(t, ctx, n, "1", tc.v, tc.state)
			if p["MainPID"] == pid {
				t.Errorf("after SIGKILL %v, want a new MainPID (was %s)", p, pid)
			}
			// Watch a few heartbeat intervals: a stray host from before would still be there.
			for range 3 {
				time.Sleep(time.Second)
				if hosts := hostPIDs(t, ctx, n); len(hosts) != 1 || hosts[0].ppid != p["MainPID"] {
					t.Fatalf("hosts %+v, want exactly one, the child of the launcher %s", hosts, p["MainPID"])
				}
			}
			rep := launcherOf(t, ctx, n)
			v, _ := launcherVersion(rep, "v9.0.0")
			if !v.Bad.IsZero() || len(rep.Rollbacks) != 0 {
				t.Errorf("launcher v9.0.0 %+v, rollbacks %+v after a SIGKILL from outside (%s the exec): want it not bad, no rollback", v, rep.Rollbacks, tc.when)
			}
			hostNotBad(t, ctx, n)
		})
	}

	// 6. A launcher rolled back across a records.db schema change keeps running. The current
	// launcher (schema 6) migrated records.db and ran launchers from ROOT/launchers; then the
	// floor is replaced, as a package downgrade would, by the launcher before this issue
	// (v1.0.0, schema 5, built from git), older than the launcher running, which does not take
	// it. A staged launcher then crashes on trial: systemd starts the floor — the old
	// launcher — on the newer records.db; it runs and confirms the host and keeps running. Put
	// back, the current floor judges the crashed launcher and runs the previous one: every row
	// the old launcher did not know is intact.
	t.Run("pre-issue launcher rolled back to runs on records a newer launcher migrated", func(t *testing.T) {
		old := buildPreviousLauncher(t, ctx, w.builder.Src)
		n := w.install(t, ctx, "lschema", nil)
		stageIn(t, ctx, n, "v9.0.0", good(t, "v9.0.0"))
		eventually(t, ctx, n, "launcher v9.0.0 confirmed", launcherIs(t, ctx, n, "v9.0.0", rollback.LauncherConfirmed))
		before := show(t, ctx, n)
		floor := filepath.Join(n.Root(), "usr/bin/mesh-launcher")
		current := filepath.Join(t.TempDir(), "mesh-launcher-current")
		if err := copyFile(floor, current); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(old, floor); err != nil { // temp file, fsync, rename: as dpkg replaces it
			t.Fatal(err)
		}
		// Longer than --launcher-check: the running launcher looked at the replaced floor.
		time.Sleep(7 * time.Second)
		if p := show(t, ctx, n); p["MainPID"] != before["MainPID"] || p["NRestarts"] != "0" || p["ActiveState"] != "active" {
			t.Errorf("%v after the floor was replaced by an older launcher, want MainPID %s, no restart", p, before["MainPID"])
		}
		if exe := exeOf(ctx, n, before["MainPID"]); exe != "/var/lib/mesh-host/launchers/v9.0.0/mesh-launcher" {
			t.Errorf("MainPID runs %q, want launcher v9.0.0 still", exe)
		}

		stageIn(t, ctx, n, "v9.1.0", bad(t, "v9.1.0", "crash"))
		var p map[string]string
		eventually(t, ctx, n, "the pre-issue floor running the host, confirmed", func() bool {
			var err error
			p, err = showProps(ctx, n)
			return err == nil && p["NRestarts"] == "1" && p["ActiveState"] == "active" && p["StatusText"] == "running "+packaged+" (confirmed)"
		})
		if out, err := n.Exec(ctx, "mesh-launcher", "--version"); err != nil || strings.TrimSpace(string(out)) != previousLauncherVersion {
			t.Fatalf("the floor says %q (%v), want the pre-issue launcher %s", out, err, previousLauncherVersion)
		}
		from := w.beats.Len()
		ctxBeat, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := w.beats.WaitAfter(ctxBeat, from, packaged+" confirmed under the pre-issue launcher", func(b lab.Beat) bool {
			return b.Node == n.Name && lab.RunningConfirmed(packaged)(b)
		}); err != nil {
			t.Fatalf("%v\n%s", err, diagnose(n))
		}
		// It keeps running: past RestartSec and a launcher check, no restart, the same host.
		hosts := hostPIDs(t, ctx, n)
		time.Sleep(8 * time.Second)
		if q := show(t, ctx, n); q["MainPID"] != p["MainPID"] || q["NRestarts"] != "1" || q["ActiveState"] != "active" {
			t.Errorf("the pre-issue launcher did not keep running: %v, then %v", p, q)
		}
		if now := hostPIDs(t, ctx, n); len(hosts) != 1 || len(now) != 1 || now[0] != hosts[0] {
			t.Errorf("hosts %+v, then %+v: want the same one", hosts, now)
		}
		if out, err := n.Exec(ctx, "mesh-launcher", "status"); err != nil || !strings.Contains(string(out), packaged) {
			t.Errorf("the pre-issue launcher's status on the newer records.db: %v\n%s", err, out)
		}

		// The current floor back (the package upgraded again), the unit restarted as an older
		// package's postinst does: it judges v9.1.0 and runs v9.0.0; the rows are intact.
		if err := copyFile(current, floor); err != nil {
			t.Fatal(err)
		}
		if out, err := n.Systemctl(ctx, "restart", "mesh-launcher"); err != nil {
			t.Fatalf("systemctl restart: %v\n%s", err, out)
		}
		hostConfirmedUnder(t, ctx, n, "", "v9.0.0", rollback.LauncherConfirmed)
		rep := launcherOf(t, ctx, n)
		if v, ok := launcherVersion(rep, "v9.0.0"); !ok || v.Confirmed.IsZero() || !v.Bad.IsZero() {
			t.Errorf("launcher v9.0.0 %+v, want it confirmed, not bad, as the current launcher left it", v)
		}
		if v, ok := launcherVersion(rep, "v9.1.0"); !ok || v.Bad.IsZero() || !strings.Contains(v.BadReason, "it crashed: panic: assignment to entry in nil map") {
			t.Errorf("launcher v9.1.0 %+v, want it bad for its panic", v)
		}
		if len(rep.Rollbacks) != 1 || rep.Rollbacks[0].From != "v9.1.0" || rep.Rollbacks[0].To != "v9.0.0" {
			t.Errorf("launcher rollbacks %+v, want one from v9.1.0 to v9.0.0", rep.Rollbacks)
		}
		hostNotBad(t, ctx, n)
	})
}

// copyFile copies src to dst (temp file, fsync, rename), executable.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(dst, b, 0o755)
}

// The launcher before its own versions (issue 19): launcher v1.0.0, which knows records schema 5.
const (
	previousLauncherCommit  = "26da246"
	previousLauncherVersion = "v1.0.0"
)

// buildPreviousLauncher builds mesh-launcher as it was at previousLauncherCommit from src's git
// history (git archive: no worktree added), with the shared module cache and no network. It
// skips the test when src is not a git checkout holding that commit.
func buildPreviousLauncher(t *testing.T, ctx context.Context, src string) string {
	t.Helper()
	if err := exec.CommandContext(ctx, "git", "-C", src, "cat-file", "-e", previousLauncherCommit+"^{commit}").Run(); err != nil {
		meshtest.SkipUnlessCI(t, "launcher %s is built from commit %s, and %s is not a git checkout holding it (%v); .ci/run deepens a shallow clone to hold it", previousLauncherVersion, previousLauncherCommit, src, err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", src, previousLauncherCommit, dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousLauncherCommit, err, b)
	}
	out := filepath.Join(t.TempDir(), "mesh-launcher-"+previousLauncherVersion)
	// It stamped main.version with the host release's version then; v1.0.0 says which it is.
	cmd = exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+previousLauncherVersion, "-o", out, "./launcher/cmd/mesh-launcher")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build launcher %s from %s: %v\n%s", previousLauncherVersion, previousLauncherCommit, err, b)
	}
	return out
}
