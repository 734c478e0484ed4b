package lab

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The launcher takes a newer launcher by exec, the host kept running (issue 19, sections 3 and
// 4), proven with the real mesh-launcher and mesh-host.

// launcherAt builds mesh-launcher stamped as launcher version v.
func launcherAt(t testing.TB, v string) string {
	t.Helper()
	p, err := bins.BuildX(context.Background(), PkgLauncher, "mesh-launcher-"+v, LauncherVersionX+v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// badLauncher builds the badlauncher fixture claiming launcher version v, failing as mode says.
func badLauncher(t testing.TB, v, mode string) string {
	t.Helper()
	p, err := bins.BuildX(context.Background(), PkgBadLauncher, "badlauncher-"+mode+"-"+v, "main.version="+v, "main.mode="+mode)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stageLauncher puts binary under ROOT/launchers/<v> as a host stages one (StageLauncher).
func stageLauncher(t testing.TB, root, v, binary string) {
	t.Helper()
	if err := StageLauncher(context.Background(), root, v, binary, "v1.0.0"); err != nil {
		t.Fatal(err)
	}
}

// launcherRecords reads what records.db says of the launcher.
func launcherRecords(t testing.TB, root string) rollback.LauncherReport {
	t.Helper()
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rep, err := r.LauncherStatus(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func launcherIs(t testing.TB, root, v, state string) func() bool {
	return func() bool {
		rep := launcherRecords(t, root)
		return rep.Version == v && rep.State == state
	}
}

// parentOf is pid's parent, from /proc.
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// fdTargets lists what pid's descriptors point at, by number.
func fdTargets(pid int) map[int]string {
	out := map[int]string{}
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fd, _ := strconv.Atoi(e.Name())
		out[fd], _ = os.Readlink(filepath.Join(dir, e.Name()))
	}
	return out
}

func TestNewerLauncherTakesOverByExecAndTheHostKeepsRunning(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 90*time.Second)
	n, rep := confirmedNode(t, ctx, PkgHost, "--launcher-check", "50ms")
	launcherPID, hostPID := n.PID(), rep.Running.PID
	meshtest.Eventually(t, "the floor recorded as running", launcherIs(t, n.Root, launcher.Version, rollback.LauncherFloor))

	// Two takeovers in a row: from the floor to v9.0.0, and from v9.0.0 to v9.1.0. Each exec
	// ends every thread but the one that forked the host: Pdeathsig would kill the host if the
	// wrong thread had forked it.
	for _, v := range []string{"v9.0.0", "v9.1.0"} {
		stageLauncher(t, n.Root, v, launcherAt(t, v))
		meshtest.Eventually(t, "launcher "+v+" running and confirmed", launcherIs(t, n.Root, v, rollback.LauncherConfirmed))
		if n.PID() != launcherPID || !n.Alive() {
			t.Fatalf("the launcher process changed (pid %d → %d): systemd would see a new MainPID", launcherPID, n.PID())
		}
		if syscall.Kill(hostPID, 0) != nil || isZombie(hostPID) || parentOf(hostPID) != launcherPID {
			t.Fatalf("the host (pid %d) did not survive launcher %s's takeover alive and a child of the launcher (parent %d)", hostPID, v, parentOf(hostPID))
		}
	}
	st, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running == nil || st.Running.PID != hostPID {
		t.Errorf("status names another host after the takeovers: %+v, want pid %d", st.Running, hostPID)
	}
	if got := startsOf(t, n.Root, "v1.0.0"); len(got) != 1 || got[0] != "" {
		t.Errorf("v1.0.0's starts: %q, want exactly one, still open (no start recorded as ended)", got)
	}
	log := n.Log()
	if strings.Count(log, "took over as launcher; the host keeps running") != 2 {
		t.Errorf("want two takeovers in the log:\n%s", log)
	}
	if strings.Contains(log, "were open after exec") {
		t.Errorf("descriptors leaked into a new image:\n%s", log)
	}
	// What the new image holds open: the standard three, the root's lock, records.db and its
	// -wal/-shm, the host's two pipes, launcher.out, and the runtime's own — nothing else.
	for fd, target := range fdTargets(launcherPID) {
		switch {
		case fd <= 2, strings.HasPrefix(target, "pipe:"), strings.HasPrefix(target, "anon_inode:"),
			strings.HasPrefix(target, "socket:"), strings.HasPrefix(target, n.Root+"/"),
			strings.HasPrefix(target, "/sys/fs/cgroup/"): // the runtime follows its CPU limit
		default:
			t.Errorf("the launcher holds descriptor %d → %s after its takeovers", fd, target)
		}
	}
	// The host still reconciles and its output still reaches the launcher's log after exec.
	before := strings.Count(n.Log(), "reconcile")
	meshtest.Eventually(t, "the host's output relayed by the new image", func() bool { return strings.Count(n.Log(), "reconcile") > before })

	// Pdeathsig still holds after exec: killing the launcher kills the host.
	if err := n.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.Wait(ctx)
	meshtest.Eventually(t, "the host gone with its killed launcher", func() bool { return syscall.Kill(hostPID, 0) != nil || isZombie(hostPID) })
}

func TestTrialLauncherThatFailsIsMarkedBadAndTheFloorRuns(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"crash", "exit", "hang"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := meshtest.Context(t, 90*time.Second)
			n, _ := confirmedNode(t, ctx, PkgHost, "--launcher-check", "50ms")
			hostBefore := startsOf(t, n.Root, "v1.0.0")
			stageLauncher(t, n.Root, "v9.0.0", badLauncher(t, "v9.0.0", mode))
			if mode == "hang" {
				// Without systemd, the watchdog's part: once the hanging image runs, SIGABRT. Its
				// line reaches stderr before ROOT/launcher.out (what the floor judges it by), so
				// the test waits for the file: a signal between the two left the line out of it.
				meshtest.Eventually(t, "the hanging launcher running", func() bool {
					out, _ := os.ReadFile(filepath.Join(n.Root, "launcher.out"))
					return strings.Contains(string(out), "badlauncher v9.0.0 starting")
				})
				n.Signal(syscall.SIGABRT)
			}
			if _, err := n.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			// systemd's Restart=always starts the unit again: the floor.
			start(t, n, "--launcher-check", "50ms")
			meshtest.Eventually(t, "the floor running again", launcherIs(t, n.Root, launcher.Version, rollback.LauncherFloor))
			if _, err := n.WaitStatus(ctx, "v1.0.0 running again", func(rep launcher.Report) bool {
				return runningConfirmed("v1.0.0")(rep) && rep.LauncherPID == n.PID()
			}); err != nil {
				t.Fatal(err)
			}
			rep := launcherRecords(t, n.Root)
			if rep.Version != launcher.Version || rep.State != rollback.LauncherFloor {
				t.Errorf("after the failed trial the launcher running is %s (%s), want the floor %s", rep.Version, rep.State, launcher.Version)
			}
			i := slices.IndexFunc(rep.Versions, func(l rollback.LauncherRecord) bool { return l.Version == "v9.0.0" })
			if i < 0 || rep.Versions[i].Bad.IsZero() {
				t.Fatalf("v9.0.0 not marked bad: %+v", rep.Versions)
			}
			bad := rep.Versions[i]
			want := map[string]string{"crash": "it crashed: panic: assignment to entry in nil map", "exit": "it failed:", "hang": "watchdog"}[mode]
			if !strings.Contains(bad.BadReason, want) {
				t.Errorf("bad reason %q, want it to say %q", bad.BadReason, want)
			}
			if !strings.Contains(bad.BadOutput, "badlauncher v9.0.0 starting") {
				t.Errorf("bad output %q, want the launcher's last output", bad.BadOutput)
			}
			if len(rep.Rollbacks) != 1 || rep.Rollbacks[0].From != "v9.0.0" || rep.Rollbacks[0].To != launcher.Version {
				t.Errorf("launcher rollbacks %+v, want one from v9.0.0 to the floor", rep.Rollbacks)
			}
			// A launcher's failure never marks a host release bad: its host was interrupted.
			if v, ok := Version(mustStatus(t, ctx, n), "v1.0.0"); !ok || v.Bad {
				t.Errorf("v1.0.0 after its launcher failed: %+v, want it not bad", v)
			}
			for _, o := range startsOf(t, n.Root, "v1.0.0")[len(hostBefore)-1:] {
				if o == string(rollback.OutcomeFailed) {
					t.Errorf("a host start whose launcher died is recorded failed: %v", startsOf(t, n.Root, "v1.0.0"))
				}
			}
			// Never run again: the floor goes on running the host, several checks later.
			time.Sleep(300 * time.Millisecond)
			if strings.Count(n.Log(), "badlauncher v9.0.0 starting") != 1 {
				t.Errorf("the bad launcher ran again:\n%s", n.Log())
			}
		})
	}
}

func mustStatus(t testing.TB, ctx context.Context, n *Node) launcher.Report {
	t.Helper()
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestFloorExecsTheNewestGoodLauncherBeforeStartingAHost(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 90*time.Second)
	n := newNode(t)
	place(t, n, "v1.0.0", PkgHost)
	stageLauncher(t, n.Root, "v9.0.0", launcherAt(t, "v9.0.0"))
	stageLauncher(t, n.Root, "v9.1.0", badLauncher(t, "v9.1.0", "crash"))
	if err := rollbackMarkLauncherBad(n.Root, "v9.1.0"); err != nil {
		t.Fatal(err)
	}
	start(t, n, "--launcher-check", "50ms")
	if _, err := n.WaitStatus(ctx, "v1.0.0 confirmed", runningConfirmed("v1.0.0")); err != nil {
		t.Fatal(err)
	}
	meshtest.Eventually(t, "v9.0.0 confirmed", launcherIs(t, n.Root, "v9.0.0", rollback.LauncherConfirmed))
	// The host was started once, by v9.0.0: the floor exec'd before it started any.
	if got := startsOf(t, n.Root, "v1.0.0"); len(got) != 1 {
		t.Errorf("v1.0.0 started %d times, want once", len(got))
	}
	if strings.Contains(n.Log(), "badlauncher") {
		t.Errorf("a launcher marked bad ran:\n%s", n.Log())
	}
}

func rollbackMarkLauncherBad(root, v string) error {
	r, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.MarkLauncherBad(context.Background(), v, "marked bad by the test", "")
}

// The package replacing the floor (apt install of a newer mesh-host by hand, or a declaration
// of the mesh-host package) is taken by exec too: no restart of the unit, the host kept.
func TestReplacedFloorIsTakenByExecKeepingTheHost(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 90*time.Second)
	n := newNode(t)
	// The node's floor is its own copy, so replacing it touches no other test's.
	floor := filepath.Join(t.TempDir(), "mesh-launcher")
	if err := copyFile(n.Launcher, floor, 0o755); err != nil {
		t.Fatal(err)
	}
	n.Launcher = floor
	place(t, n, "v1.0.0", PkgHost)
	start(t, n, "--launcher-check", "50ms")
	rep, err := n.WaitStatus(ctx, "v1.0.0 confirmed", runningConfirmed("v1.0.0"))
	if err != nil {
		t.Fatal(err)
	}
	launcherPID, hostPID := n.PID(), rep.Running.PID
	// As dpkg does: the new file written beside, then renamed over the old.
	next := floor + ".dpkg-new"
	if err := copyFile(launcherAt(t, "v9.2.0"), next, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, floor); err != nil {
		t.Fatal(err)
	}
	meshtest.Eventually(t, "the new floor v9.2.0 running", launcherIs(t, n.Root, "v9.2.0", rollback.LauncherFloor))
	if n.PID() != launcherPID || syscall.Kill(hostPID, 0) != nil || parentOf(hostPID) != launcherPID {
		t.Fatalf("launcher pid %d → %d, host %d's parent %d: the package's launcher must be taken without a restart", launcherPID, n.PID(), hostPID, parentOf(hostPID))
	}
	if cur := launcherRecords(t, n.Root); cur.FloorVersion != "v9.2.0" {
		t.Errorf("floor version recorded %q, want v9.2.0", cur.FloorVersion)
	}
}

// A rollout of a release carrying a newer launcher: every node stages it beside the host
// version, takes it by exec (the launcher's pid unchanged: no restart of the unit), confirms
// it, and its heartbeat names it — the fleet's LAUNCHER column says v9.0.0.
func TestARolloutOfAReleaseCarryingANewLauncherIsTakenWithoutARestart(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 3, LauncherArgs: append(append([]string{}, ScaledLauncherArgs...), "--launcher-check", "200ms")})
	pids := map[string]int{}
	for _, name := range s.f.Names() {
		pids[name] = s.f.Node(name).PID()
	}
	s.f.Release.Launcher = launcherAt(t, "v9.0.0")
	s.ship("v1.1.0", PkgHost)
	c := s.rollout(append([]string{"start", "v1.1.0", "--json"}, rolloutFlags(30*time.Second, 2*time.Second)...)...)
	if code := s.exit(c); code != 0 {
		t.Fatalf("rollout start exited %d, want 0 (completed):\n%s", code, c.Output())
	}
	s.allOn(s.f.Names(), "v1.1.0")
	for _, name := range s.f.Names() {
		n := s.f.Node(name)
		meshtest.Eventually(t, name+" on launcher v9.0.0, confirmed", launcherIs(t, n.Root, "v9.0.0", rollback.LauncherConfirmed))
		if n.PID() != pids[name] || !n.Alive() {
			t.Errorf("%s's launcher pid %d → %d: taking the release's launcher must not restart it", name, pids[name], n.PID())
		}
	}
	meshtest.Eventually(t, "the fleet's LAUNCHER column naming v9.0.0 for every node", func() bool {
		table, err := s.f.FleetTable(s.ctx)
		return err == nil && strings.Count(table, "v9.0.0") >= len(s.f.Names())
	})
}

// A rollout of a release carrying a launcher that crashes: each canary stages it, takes it,
// and loses it; the unit's next start (systemd's Restart=always, done here by the test) judges
// it bad and runs the floor, and the canary's heartbeat says its launcher rolled back — the
// rollout halts after its canaries naming the launcher, the host release is not marked bad, and
// no other node is targeted.
func TestRolloutOfAReleaseCarryingACrashingLauncherHaltsAfterTheCanariesNamingIt(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 120*time.Second, FleetOptions{Nodes: 4, LauncherArgs: append(append([]string{}, ScaledLauncherArgs...), "--launcher-check", "200ms")})
	s.f.Release.Launcher = badLauncher(t, "v9.0.0", "crash")
	s.ship("v1.1.0", PkgHost)

	// Restart=always: a node whose launcher died is started again, as the unit would be.
	restarting, stop := context.WithCancel(s.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for restarting.Err() == nil {
			for _, name := range s.f.Names() {
				if n := s.f.Node(name); !n.Alive() {
					n.Start()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { stop(); <-done }()
	st, c := s.halted("v1.1.0", "--canary", "2", "--steps", "50%,100%", "--window", "30s", "--soak", "2s")
	canaries := BatchNodes(st, 0)
	if st.Halt == nil || st.Halt.Batch != 0 || len(st.Halt.Nodes) == 0 {
		t.Fatalf("the rollout ended %s (halt %+v); want halted in the canary batch", st.Status, st.Halt)
	}
	for _, r := range st.Halt.Nodes {
		if !slices.Contains(canaries, r.Node) || r.Why != rollout.WhyLauncherRolledBack || !strings.HasPrefix(r.Detail, "launcher rolled back from v9.0.0: ") {
			t.Errorf("the halt names %s %s %q; want only canaries, their launcher rolled back from v9.0.0", r.Node, r.Why, r.Detail)
		}
	}
	if out := c.Output(); !strings.Contains(out, "launcher rolled back from v9.0.0") {
		t.Errorf("the controller's report does not name the launcher:\n%s", out)
	}
	// The halt comes with the first canary whose launcher rolled back; the other may not have
	// taken the launcher yet (it still will: it is on its disk, newer than its own).
	for _, r := range st.Halt.Nodes {
		if rep := launcherRecords(t, s.f.Node(r.Node).Root); !slices.ContainsFunc(rep.Versions, func(l rollback.LauncherRecord) bool { return l.Version == "v9.0.0" && !l.Bad.IsZero() }) {
			t.Errorf("%s: launcher v9.0.0 not marked bad: %+v", r.Node, rep.Versions)
		}
	}
	for _, name := range canaries {
		if v, ok := Version(mustStatus(t, s.ctx, s.f.Node(name)), "v1.1.0"); ok && v.Bad {
			t.Errorf("%s: the host release v1.1.0 was marked bad for its launcher's crash", name)
		}
	}
	for _, n := range s.others(canaries) {
		if s.touchedBy(n, "v1.1.0") {
			t.Errorf("%s, not a canary, was targeted at, fetched or staged v1.1.0", n)
		}
	}
}

// A launcher that cannot be exec'd (not a program for this machine) is marked bad by the image
// that tried, which keeps running with its host; it is not tried again.
func TestALauncherThatCannotBeExecdIsMarkedBadAndTheHostKeepsRunning(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n, rep := confirmedNode(t, ctx, PkgHost, "--launcher-check", "50ms")
	launcherPID, hostPID := n.PID(), rep.Running.PID
	junk := filepath.Join(t.TempDir(), "mesh-launcher")
	if err := os.WriteFile(junk, []byte("not a program for any machine\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	stageLauncher(t, n.Root, "v9.0.0", junk)
	meshtest.Eventually(t, "v9.0.0 marked bad", func() bool {
		l, _ := launcherVersionOf(t, n.Root, "v9.0.0")
		return !l.Bad.IsZero()
	})
	if l, _ := launcherVersionOf(t, n.Root, "v9.0.0"); !strings.Contains(l.BadReason, "exec format error") {
		t.Errorf("bad reason %q, want the exec's error", l.BadReason)
	}
	time.Sleep(300 * time.Millisecond) // several checks: it is not tried again
	if got := strings.Count(n.Log(), "could not take the new launcher"); got != 1 {
		t.Errorf("tried %d times, want once:\n%s", got, n.Log())
	}
	if n.PID() != launcherPID || syscall.Kill(hostPID, 0) != nil || parentOf(hostPID) != launcherPID {
		t.Errorf("the launcher or its host changed: launcher %d → %d, host %d parent %d", launcherPID, n.PID(), hostPID, parentOf(hostPID))
	}
	if cur := launcherRecords(t, n.Root); cur.Version != launcher.Version || cur.State != rollback.LauncherFloor {
		t.Errorf("the records say %s (%s) runs, want the floor %s", cur.Version, cur.State, launcher.Version)
	}
}

func launcherVersionOf(t testing.TB, root, v string) (rollback.LauncherRecord, bool) {
	t.Helper()
	for _, l := range launcherRecords(t, root).Versions {
		if l.Version == v {
			return l, true
		}
	}
	return rollback.LauncherRecord{}, false
}
