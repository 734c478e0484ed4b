package systemd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/lab"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// The version the package carries and every node is installed with.
const packaged = "v1.0.0"

// world is what the scenarios share: one lab (its bus on the bridge), the .deb built once from
// this tree, the real mesh-release with a key every node trusts, and the test's own view of the
// heartbeats. Each scenario boots a node of its own onto it.
type world struct {
	lab     *Lab
	deb     string
	builder *lab.Builder
	rel     *lab.Release
	key     string
	beats   *lab.HeartbeatLog
	raw     *rawBeats // the same heartbeats as JSON, for what lab.Beat does not decode
}

// TestPackagedNode runs the scenarios on nodes installed from the .deb, under real systemd.
func TestPackagedNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)

	// 1. The package installs, the unit comes up (READY: a Type=notify unit is only active once
	// the launcher said so), the host confirms and heartbeats over the bridge.
	t.Run("package install runs the host", func(t *testing.T) {
		w.install(t, ctx, "install", nil)
	})

	// 2. A target upgrades the node by standing aside: the launcher — systemd's main process —
	// never restarts; it starts the new version itself.
	t.Run("target upgrades by standing aside", func(t *testing.T) {
		n := w.install(t, ctx, "upgrade", nil)
		before := show(t, ctx, n)
		w.ship(t, ctx, lab.PkgHost, "v1.1.0")
		if err := w.rel.Target(ctx, "v1.1.0", n.Name); err != nil {
			t.Fatal(err)
		}
		w.waitBeat(t, ctx, n, "v1.1.0 running and confirmed", lab.RunningConfirmed("v1.1.0"))
		after := waitShow(t, ctx, n, "STATUS= running v1.1.0 (confirmed)", func(p map[string]string) bool {
			return p["StatusText"] == "running v1.1.0 (confirmed)"
		})
		if after["NRestarts"] != "0" || after["MainPID"] != before["MainPID"] || after["ActiveState"] != "active" {
			t.Errorf("after the upgrade %v, want active, NRestarts=0 and MainPID %s as before", after, before["MainPID"])
		}
	})

	// 3. A release that crashes on start is rolled back, and `systemctl status` says so.
	t.Run("crash on start is rolled back and status says so", func(t *testing.T) {
		n := w.install(t, ctx, "crash", nil)
		w.ship(t, ctx, lab.PkgCrashRun, "v1.2.0")
		if err := w.rel.Target(ctx, "v1.2.0", n.Name); err != nil {
			t.Fatal(err)
		}
		line := "running " + packaged + " (confirmed); rolled back from v1.2.0 at "
		p := waitShow(t, ctx, n, "STATUS= "+line+"…", func(p map[string]string) bool {
			return strings.HasPrefix(p["StatusText"], line)
		})
		if p["ActiveState"] != "active" || p["NRestarts"] != "0" {
			t.Errorf("after the rollback %v, want active with NRestarts=0 (the launcher rolled back, not systemd)", p)
		}
		out, _ := n.Systemctl(ctx, "status", "--no-pager", "mesh-launcher") // exits 0 only when active; the text is what matters
		if !strings.Contains(string(out), "Status: \""+line) {
			t.Errorf("systemctl status does not show the rollback line %q:\n%s", line, out)
		}
		w.waitBeat(t, ctx, n, packaged+" running after the rollback", func(b lab.Beat) bool {
			return b.Running == packaged && len(b.Rollbacks) > 0 && b.Rollbacks[0].From == "v1.2.0"
		})
	})

	// 7. SIGKILL of the launcher: systemd restarts it, and exactly one host runs afterwards —
	// the old host died with its launcher, the new launcher started one.
	t.Run("killed launcher is restarted with one host", func(t *testing.T) {
		n := w.install(t, ctx, "killed", nil)
		before := show(t, ctx, n)
		if _, err := n.Exec(ctx, "kill", "-KILL", before["MainPID"]); err != nil {
			t.Fatal(err)
		}
		p := waitShow(t, ctx, n, "the launcher restarted by systemd, its host confirmed", func(p map[string]string) bool {
			return p["NRestarts"] == "1" && p["ActiveState"] == "active" && p["StatusText"] == "running "+packaged+" (confirmed)"
		})
		if p["MainPID"] == before["MainPID"] {
			t.Errorf("MainPID %s unchanged after SIGKILL", p["MainPID"])
		}
		// Watch a few heartbeat intervals: a stray host from before would still be there.
		for range 3 {
			time.Sleep(time.Second)
			hosts := hostPIDs(t, ctx, n)
			if len(hosts) != 1 || hosts[0].ppid != p["MainPID"] {
				t.Fatalf("hosts running %+v, want exactly one, the child of the launcher %s", hosts, p["MainPID"])
			}
		}
	})

	// 4. The version rolled back to fails too: the launcher exits 3, systemd does not restart it
	// (RestartPreventExitStatus=3) and `systemctl --failed` lists it — it stops, loudly.
	t.Run("rollback target failing stays failed", func(t *testing.T) {
		n := w.install(t, ctx, "stops", nil)
		w.ship(t, ctx, lab.PkgFlaky, "v1.1.0-flaky")
		if err := w.rel.Target(ctx, "v1.1.0-flaky", n.Name); err != nil {
			t.Fatal(err)
		}
		w.waitBeat(t, ctx, n, "v1.1.0-flaky running and confirmed", lab.RunningConfirmed("v1.1.0-flaky"))
		// The machine breaks under v1.1.0-flaky (it notices at its next start); then a broken
		// release arrives, is rolled back to v1.1.0-flaky, which now fails as well.
		if err := os.WriteFile(filepath.Join(n.Root(), "var/lib/mesh-host/lab-fail"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		w.ship(t, ctx, lab.PkgCrashRun, "v1.2.0")
		if err := w.rel.Target(ctx, "v1.2.0", n.Name); err != nil {
			t.Fatal(err)
		}
		p := waitShow(t, ctx, n, "the unit failed with status 3", func(p map[string]string) bool {
			return p["ActiveState"] == "failed"
		})
		if p["ExecMainStatus"] != "3" || p["Result"] != "exit-code" || !strings.HasPrefix(p["StatusText"], "failed: ") {
			t.Errorf("failed unit %v, want exit status 3, Result=exit-code, STATUS= failed: …", p)
		}
		// Longer than RestartSec=5s: a restart would have happened by now.
		time.Sleep(7 * time.Second)
		if p := show(t, ctx, n); p["ActiveState"] != "failed" || p["NRestarts"] != "0" {
			t.Errorf("after RestartSec: %v, want still failed, never restarted", p)
		}
		out, err := n.Systemctl(ctx, "--failed", "--no-legend", "--plain")
		if err != nil || !strings.Contains(string(out), "mesh-launcher.service") {
			t.Errorf("systemctl --failed: %q %v, want mesh-launcher.service listed", out, err)
		}
	})

	// 8. A frozen host (SIGSTOP) is killed at the liveness limit (scaled to 5s by a drop-in) and
	// started again; the journal and the status line say so.
	t.Run("frozen host is killed at the liveness limit", func(t *testing.T) {
		n := w.install(t, ctx, "frozen", map[string]string{
			"etc/systemd/system/mesh-launcher.service.d/liveness.conf": "[Service]\nExecStart=\nExecStart=/usr/bin/mesh-launcher run --liveness-limit 5s\n",
		})
		hosts := hostPIDs(t, ctx, n)
		if len(hosts) != 1 {
			t.Fatalf("hosts %+v, want one", hosts)
		}
		before := show(t, ctx, n)
		if _, err := n.Exec(ctx, "kill", "-STOP", hosts[0].pid); err != nil {
			t.Fatal(err)
		}
		line := "running " + packaged + " (confirmed); degraded: 1 failure recently (last: "
		p := waitShow(t, ctx, n, "STATUS= "+line+"…", func(p map[string]string) bool {
			return strings.HasPrefix(p["StatusText"], line) && strings.Contains(p["StatusText"], "no sign of life")
		})
		if p["NRestarts"] != "0" || p["MainPID"] != before["MainPID"] {
			t.Errorf("%v, want the launcher (MainPID %s) to have restarted the host itself", p, before["MainPID"])
		}
		if now := hostPIDs(t, ctx, n); len(now) != 1 || now[0].pid == hosts[0].pid {
			t.Errorf("hosts %+v, want one new host (the frozen one was %s)", now, hosts[0].pid)
		}
		j, err := n.Exec(ctx, "journalctl", "--no-pager", "-u", "mesh-launcher", "--grep", "no sign of life for the liveness limit")
		if err != nil || !strings.Contains(string(j), "killing it as hung") {
			t.Errorf("the journal does not say the host was killed as hung: %v\n%s", err, j)
		}
	})

	// 9. A package upgrade keeps versions and records (the newer delivered version keeps running),
	// removal stops the unit and keeps the root, purge leaves nothing under /var/lib/mesh-host.
	t.Run("package upgrade, remove and purge", func(t *testing.T) {
		n := w.install(t, ctx, "pkg", nil)
		w.ship(t, ctx, lab.PkgHost, "v1.1.0")
		if err := w.rel.Target(ctx, "v1.1.0", n.Name); err != nil {
			t.Fatal(err)
		}
		w.waitBeat(t, ctx, n, "v1.1.0 running and confirmed", lab.RunningConfirmed("v1.1.0"))
		from := w.beats.Len()
		dpkgInstall(t, ctx, n, buildDeb(t, ctx, w.builder.Src, "v1.0.1", t.TempDir()))
		if out, err := n.Exec(ctx, "dpkg-query", "-W", "-f", "${Version}", "mesh-host"); err != nil || string(out) != "1.0.1" {
			t.Errorf("installed package version %q %v, want 1.0.1", out, err)
		}
		// The new launcher runs the newest good version: the delivered v1.1.0, not the package's.
		waitShow(t, ctx, n, "STATUS= running v1.1.0 (confirmed) after the upgrade", func(p map[string]string) bool {
			return p["StatusText"] == "running v1.1.0 (confirmed)" && p["ActiveState"] == "active"
		})
		ctxBeat, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := w.beats.WaitAfter(ctxBeat, from, "v1.1.0 after the upgrade", func(b lab.Beat) bool {
			return b.Node == n.Name && lab.RunningConfirmed("v1.1.0")(b)
		}); err != nil {
			t.Fatal(err)
		}
		status, err := n.Exec(ctx, "mesh-launcher", "status")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{packaged, "v1.0.1", "v1.1.0"} {
			if !strings.Contains(string(status), v) {
				t.Errorf("mesh-launcher status after the upgrade does not list %s:\n%s", v, status)
			}
		}

		if out, err := n.Exec(ctx, "dpkg", "-r", "mesh-host"); err != nil {
			t.Fatalf("dpkg -r: %v\n%s", err, out)
		}
		if p := show(t, ctx, n); p["ActiveState"] != "inactive" {
			t.Errorf("after dpkg -r: %v, want the unit inactive", p)
		}
		if hosts := hostPIDs(t, ctx, n); len(hosts) != 0 {
			t.Errorf("hosts still running after dpkg -r: %+v", hosts)
		}
		for _, f := range []string{"var/lib/mesh-host/records.db", "var/lib/mesh-host/host.json", "var/lib/mesh-host/versions/v1.1.0/mesh-host"} {
			if _, err := os.Stat(filepath.Join(n.Root(), f)); err != nil {
				t.Errorf("dpkg -r removed /%s: %v", f, err)
			}
		}
		if out, err := n.Exec(ctx, "dpkg", "-P", "mesh-host"); err != nil {
			t.Fatalf("dpkg -P: %v\n%s", err, out)
		}
		for _, f := range []string{"var/lib/mesh-host", "usr/bin/mesh-launcher", "lib/systemd/system/mesh-launcher.service"} {
			if _, err := os.Lstat(filepath.Join(n.Root(), f)); err == nil {
				t.Errorf("/%s is still there after dpkg -P", f)
			}
		}
	})

	// 6. A node cut off the bridge keeps running from what it holds — the same host, confirmed,
	// no restart — and keeps reconciling the declaration in its store on the timer: a managed
	// file deleted while it is cut off is put back; it sends nothing the bus sees while cut,
	// and when it returns its heartbeats say it reconciled while it was away and what drifted.
	t.Run("cut off node keeps reconciling from its store and heartbeats on return", func(t *testing.T) {
		n := w.install(t, ctx, "cut", nil)
		const managed = "/etc/mesh-lab-cut.conf"
		rev := w.declareAndWait(t, ctx, n, declaration(n.Name,
			[3]string{"file", managed, `{"path":"` + managed + `","content":"kept while cut off\n","mode":"0640"}`}))
		if b, err := os.ReadFile(filepath.Join(n.Root(), managed)); err != nil || string(b) != "kept while cut off\n" {
			t.Fatalf("%s after the reconcile: %q %v", managed, b, err)
		}
		hosts := hostPIDs(t, ctx, n)
		if err := w.lab.Cut(ctx, n); err != nil {
			t.Fatal(err)
		}
		cut := time.Now()
		time.Sleep(2 * time.Second) // a heartbeat already on its way may still land
		from := w.beats.Len()
		// Deleted by hand while nothing from the bus can reach the node: only the host's own
		// timer reconcile, from the declaration in its store, can put it back.
		deleted := time.Now()
		if err := os.Remove(filepath.Join(n.Root(), managed)); err != nil {
			t.Fatal(err)
		}
		var back time.Duration
		for back == 0 && time.Since(deleted) < 8*time.Second {
			time.Sleep(100 * time.Millisecond)
			if b, err := os.ReadFile(filepath.Join(n.Root(), managed)); err == nil && string(b) == "kept while cut off\n" {
				back = time.Since(deleted)
			}
		}
		if back == 0 {
			t.Errorf("%s deleted while cut off was not put back within 8s (reconcile_interval 1s)", managed)
		} else {
			t.Logf("figure: a managed file deleted while cut off was back after %s", back.Round(time.Millisecond))
		}
		if fi, err := os.Stat(filepath.Join(n.Root(), managed)); err == nil && fi.Mode().Perm() != 0o640 {
			t.Errorf("%s put back with mode %v, want 0640", managed, fi.Mode().Perm())
		}
		time.Sleep(10*time.Second - time.Since(deleted)) // ten heartbeat and reconcile intervals in all
		for _, b := range w.beats.All()[from:] {
			if b.Node == n.Name {
				t.Errorf("a heartbeat reached the bus while the node was cut off: %s", lab.Describe(b.Heartbeat))
			}
		}
		p := show(t, ctx, n)
		if p["ActiveState"] != "active" || p["NRestarts"] != "0" || p["StatusText"] != "running "+packaged+" (confirmed)" {
			t.Errorf("while cut off: %v, want the unit active, never restarted, still confirmed", p)
		}
		if now := hostPIDs(t, ctx, n); len(hosts) != 1 || len(now) != 1 || now[0] != hosts[0] {
			t.Errorf("hosts %+v before the cut, %+v during it: want the same one host", hosts, now)
		}
		from = w.beats.Len()
		restored := time.Now()
		if err := w.lab.Restore(ctx, n); err != nil {
			t.Fatal(err)
		}
		ctxBeat, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// The first heartbeats after the return — those the host tried to send while cut off,
		// which waited in its connection (the cut is shorter than the client's ping timeout),
		// up to the first it sent after the return — say what it did while away: a timer
		// reconcile of the declared revision, ok, that ended inside the cut.
		if _, err := w.beats.WaitAfter(ctxBeat, from, "a heartbeat sent after the link came back", func(b lab.Beat) bool {
			return b.Node == n.Name && lab.RunningConfirmed(packaged)(b) && !b.SentAt.Before(restored)
		}); err != nil {
			t.Fatalf("%v\n%s", err, diagnose(n))
		}
		var first []lab.Beat
		for _, b := range w.beats.All()[from:] {
			if b.Node != n.Name {
				continue
			}
			first = append(first, b)
			if !b.SentAt.Before(restored) {
				break
			}
		}
		var describe []string
		reconciledWhileCut := false
		for _, b := range first {
			r := b.LastReconcile
			describe = append(describe, fmt.Sprintf("sent %s: declaration revision %d, last reconcile %+v", b.SentAt.Local().Format("15:04:05.000"), b.DeclarationRevision, r))
			if b.DeclarationRevision != rev || r == nil || !r.OK {
				t.Errorf("a heartbeat after the return: declaration revision %d, last reconcile %+v; want revision %d reconciled ok", b.DeclarationRevision, r, rev)
				continue
			}
			if r.Trigger == wire.TriggerTimer && r.At.After(cut) && r.At.Before(restored) {
				reconciledWhileCut = true
			}
		}
		if !reconciledWhileCut {
			t.Errorf("no heartbeat after the return reports a timer reconcile that ended while the node was cut off (%s to %s):\n%s",
				cut.Format("15:04:05.000"), restored.Format("15:04:05.000"), strings.Join(describe, "\n"))
		}

		// And what it put back while away is in its heartbeats: the file, drifted and restored.
		w.raw.waitDrift(t, ctx, n.Name, cut, "file", managed)

		// The host went on reconciling the declaration it holds, on its timer — nothing from the
		// bus could trigger one — and says so in the journal.
		var timed, other []string
		for _, e := range hostLog(t, ctx, n, "reconcile completed") {
			switch {
			case !e.at.After(cut) || !e.at.Before(restored):
			case strings.Contains(e.text, " trigger=timer "):
				timed = append(timed, e.text)
			default:
				other = append(other, e.text)
			}
		}
		if len(other) > 0 {
			t.Errorf("reconciles while cut off that were not the timer's:\n%s", strings.Join(other, "\n"))
		}
		if len(timed) < 3 {
			t.Errorf("the journal has %d completed reconciles in the %s cut off, want one every reconcile_interval (1s):\n%s",
				len(timed), restored.Sub(cut).Round(time.Second), strings.Join(timed, "\n"))
		}
	})

	// 10. The service and package appliers through the packaged host: `mesh-host apply` once,
	// `mesh-host owned`, and a declaration over the bus kept against drift by the timer.
	t.Run("declared service and package are applied, kept and removed", func(t *testing.T) {
		appliersThroughTheHost(t, ctx, w)
	})

	// 11. An arm64 node (issue 28): the arm64 .deb, an upgrade to a release's arm64 build and a
	// rollback, under real systemd with only the CPU emulated. `make lab-systemd
	// LAB_RUN=TestPackagedNode/arm64` runs it alone.
	t.Run("arm64 node takes the arm64 package, an upgrade and a rollback", func(t *testing.T) {
		arm64Node(t, ctx, w)
	})

	// 5. `systemctl reboot` inside the node: it comes back on its known-good version, the records
	// as they were.
	t.Run("reboot comes back on known-good", func(t *testing.T) {
		n := w.install(t, ctx, "reboot", nil)
		w.ship(t, ctx, lab.PkgHost, "v1.1.0")
		if err := w.rel.Target(ctx, "v1.1.0", n.Name); err != nil {
			t.Fatal(err)
		}
		w.waitBeat(t, ctx, n, "v1.1.0 running and confirmed", lab.RunningConfirmed("v1.1.0"))
		before, err := n.Exec(ctx, "mesh-launcher", "status")
		if err != nil {
			t.Fatal(err)
		}
		old := n.PID()
		if _, err := n.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		if n.PID() == old {
			t.Fatalf("the node's PID 1 is %d as before the reboot", old)
		}
		from := w.beats.Len()
		waitShow(t, ctx, n, "STATUS= running v1.1.0 (confirmed) after the reboot", func(p map[string]string) bool {
			return p["StatusText"] == "running v1.1.0 (confirmed)" && p["ActiveState"] == "active"
		})
		ctxBeat, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if _, err := w.beats.WaitAfter(ctxBeat, from, "v1.1.0 after the reboot", func(b lab.Beat) bool {
			return b.Node == n.Name && lab.RunningConfirmed("v1.1.0")(b)
		}); err != nil {
			t.Fatalf("%v\n%s", err, diagnose(n))
		}
		after, err := n.Exec(ctx, "mesh-launcher", "status")
		if err != nil {
			t.Fatal(err)
		}
		// The records — known-good, predecessor, every version's failures, digest and state —
		// read as before; only the pids (and how long the host has run) are new.
		if records(after) != records(before) {
			t.Errorf("mesh-launcher status after the reboot:\n%s\nbefore it:\n%s\nwant the same records", after, before)
		}
		for _, v := range []string{packaged, "v1.1.0"} {
			if !strings.Contains(string(after), v) {
				t.Errorf("status after the reboot does not list %s:\n%s\nbefore:\n%s", v, after, before)
			}
		}
	})
}

// newWorld builds the .deb and mesh-release from this tree, starts the lab, initialises its bus
// and makes the release key.
func newWorld(t *testing.T, ctx context.Context) *world {
	t.Helper()
	l := Start(t, ctx)
	dir := t.TempDir()
	b, err := lab.NewBuilder(ctx, ".", filepath.Join(dir, "bin"))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{lab: l, builder: b, deb: buildDeb(t, ctx, b.Src, packaged, filepath.Join(dir, "deb"))}

	conn, err := bus.Connect(ctx, l.Bus.ClientURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	names := wire.NamesFor("")
	if err := bus.Init(ctx, conn.JS, names); err != nil {
		t.Fatal(err)
	}
	if w.beats, err = lab.RecordHeartbeats(conn.NC, names); err != nil {
		t.Fatal(err)
	}
	if w.raw, err = recordRaw(conn.NC, names); err != nil {
		t.Fatal(err)
	}
	releaseBin, err := b.Build(ctx, lab.PkgRelease, lab.ToolVersion)
	if err != nil {
		t.Fatal(err)
	}
	w.rel = &lab.Release{Bin: releaseBin, KeyDir: filepath.Join(dir, "keys"), Out: filepath.Join(dir, "releases"), NATS: l.Bus.ClientURL()}
	if w.key, err = w.rel.Keygen(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// buildDeb runs `make package` on this tree into out and returns the node's .deb for this
// machine, as an operator would build it (buildDebFor).
func buildDeb(t *testing.T, ctx context.Context, src, version, out string) string {
	t.Helper()
	return buildDebFor(t, ctx, src, version, out, runtime.GOARCH)
}

// buildDebFor runs `make package` on this tree into out for goarch alone (ARCHS) and returns the
// node's .deb; without the release tool's packages (RELEASE_ARCHS, RELEASE_DARWIN empty), which
// no node installs and which would add cross-compiles to every build.
func buildDebFor(t *testing.T, ctx context.Context, src, version, out, goarch string) string {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "package", "VERSION="+version, "OUT="+out, "ARCHS="+goarch, "RELEASE_ARCHS=", "RELEASE_DARWIN=")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make package: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "mesh-host_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make package wrote %v, want one .deb", debs)
	}
	t.Logf("make package: %s in %s", filepath.Base(debs[0]), time.Since(start).Round(time.Millisecond))
	return debs[0]
}

// install boots a node named name, gives it a host.json naming the lab's bus (plaintext) and the
// release key and files (paths in the node: contents), and installs the .deb with dpkg -i; it returns once the unit is active, says the packaged
// version runs confirmed, and the host heartbeats that over the bridge.
func (w *world) install(t *testing.T, ctx context.Context, name string, files map[string]string) *Node {
	t.Helper()
	return w.installDeb(t, ctx, name, w.deb, "", files)
}

// installDeb is install with the .deb deb, whose Debian architecture foreign, when not "", is
// not the node's own: dpkg is told to take it (`dpkg --add-architecture`), as on a multiarch
// machine; what runs it is the kernel's binfmt_misc (qemu-user), as for any other binary.
func (w *world) installDeb(t *testing.T, ctx context.Context, name, deb, foreign string, files map[string]string) *Node {
	t.Helper()
	n, _, err := w.lab.Boot(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// The scenarios' bus is the lab's in-process one, without auth or TLS (decision 0011 keeps
	// it for tests): on the lab's private bridge, plaintext is allowed in so many words.
	// TestEnrolledNode is the node as an operator gets it: TLS, its own user, nothing by hand.
	cfg, err := json.Marshal(map[string]any{
		"node": name, "nats_urls": []string{w.lab.BusURL}, "trusted_keys": []string{w.key},
		"reconcile_interval": "1s", "heartbeat_interval": "1s", "insecure_plaintext": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(n.Root(), "var/lib/mesh-host")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "host.json"), cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(n.Root(), name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.Root(), name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if foreign != "" {
		if out, err := n.Exec(ctx, "dpkg", "--add-architecture", foreign); err != nil {
			t.Fatalf("dpkg --add-architecture %s: %v\n%s", foreign, err, out)
		}
	}
	dpkgInstall(t, ctx, n, deb)
	want := "running " + packaged + " (confirmed)"
	p := waitShow(t, ctx, n, "STATUS= "+want, func(p map[string]string) bool { return p["StatusText"] == want })
	if p["ActiveState"] != "active" || p["SubState"] != "running" || p["NRestarts"] != "0" {
		t.Errorf("after dpkg -i: %v, want active (running) with no restarts", p)
	}
	if out, err := n.Systemctl(ctx, "is-enabled", "mesh-launcher"); err != nil || strings.TrimSpace(string(out)) != "enabled" {
		t.Errorf("is-enabled: %q %v, want enabled", out, err)
	}
	w.waitBeat(t, ctx, n, packaged+" running and confirmed", lab.RunningConfirmed(packaged))
	return n
}

// dpkgInstall copies deb into n and installs it with dpkg -i.
func dpkgInstall(t *testing.T, ctx context.Context, n *Node, deb string) {
	t.Helper()
	b, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	// Not /tmp: the node's systemd mounts a tmpfs over it.
	if err := os.WriteFile(filepath.Join(n.Root(), "root", filepath.Base(deb)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := n.Exec(ctx, "dpkg", "-i", "/root/"+filepath.Base(deb)); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
}

// declare stores decl as n's declaration with `mesh-release declare`, as an operator would, and
// returns the revision it was stored under.
func (w *world) declare(t *testing.T, ctx context.Context, n *Node, decl string) uint64 {
	t.Helper()
	file := filepath.Join(t.TempDir(), "declaration.json")
	if err := os.WriteFile(file, []byte(decl), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := w.rel.Run(ctx, "declare", n.Name, file, "--nats", w.rel.NATS)
	if err != nil {
		t.Fatal(err)
	}
	var rev uint64
	if _, err := fmt.Sscanf(out, "declaration for "+n.Name+" stored, revision %d", &rev); err != nil {
		t.Fatalf("mesh-release declare said %q, want \"declaration for %s stored, revision N\": %v", out, n.Name, err)
	}
	return rev
}

// ship builds pkg as version and publishes it, signed with the key the nodes trust.
func (w *world) ship(t *testing.T, ctx context.Context, pkg, version string) {
	t.Helper()
	bin, err := w.builder.Build(ctx, pkg, version)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rel.Ship(ctx, version, bin); err != nil {
		t.Fatal(err)
	}
}

// waitBeat waits up to a minute for a heartbeat of n's host that ok accepts.
func (w *world) waitBeat(t *testing.T, ctx context.Context, n *Node, what string, ok func(lab.Beat) bool) lab.Beat {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b, err := w.beats.Wait(ctx, n.Name+": "+what, func(b lab.Beat) bool { return b.Node == n.Name && ok(b) })
	if err != nil {
		t.Fatalf("%v\n%s", err, diagnose(n))
	}
	return b
}

// diagnose is what a person needs when a scenario fails: the unit's status and its journal.
func diagnose(n *Node) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, _ := n.Systemctl(ctx, "status", "--no-pager", "-l", "mesh-launcher")
	j, _ := n.Exec(ctx, "journalctl", "--no-pager", "-n", "60", "-u", "mesh-launcher")
	return fmt.Sprintf("--- systemctl status\n%s\n--- journal\n%s", st, j)
}

// unitProps are what the scenarios read of the unit.
var unitProps = "ActiveState,SubState,StatusText,NRestarts,MainPID,Result,ExecMainStatus"

// show is `systemctl show` of the unit, as a map.
func show(t *testing.T, ctx context.Context, n *Node) map[string]string {
	t.Helper()
	p, err := showProps(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func showProps(ctx context.Context, n *Node) (map[string]string, error) {
	out, err := n.Systemctl(ctx, "show", "-p", unitProps, "mesh-launcher")
	if err != nil {
		return nil, err
	}
	p := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			p[k] = v
		}
	}
	return p, nil
}

// waitShow polls the unit's properties until ok accepts them, for up to a minute.
func waitShow(t *testing.T, ctx context.Context, n *Node, what string, ok func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last map[string]string
	for {
		p, err := showProps(ctx, n)
		if err == nil && ok(p) {
			return p
		}
		if err == nil {
			last = p
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("node %s: waiting for %s; last %v (%v)\n%s", n.Name, what, last, err, diagnose(n))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// records is `mesh-launcher status` without the lines that name processes (launcher, running).
func records(status []byte) string {
	var keep []string
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "launcher" || f[0] == "running") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// logEntry is one line the host logged, and when the node's journal received it.
type logEntry struct {
	at   time.Time
	text string
}

// hostLog is what n's host logged (`journalctl -t mesh-host`) with the message msg.
func hostLog(t *testing.T, ctx context.Context, n *Node, msg string) []logEntry {
	t.Helper()
	var entries []logEntry
	for _, e := range hostJournal(t, ctx, n) {
		if strings.Contains(e.text, "msg="+strconv.Quote(msg)+" ") {
			entries = append(entries, e)
		}
	}
	return entries
}

// hostJournal is everything n's host logged (`journalctl -t mesh-host`).
func hostJournal(t *testing.T, ctx context.Context, n *Node) []logEntry {
	t.Helper()
	out, err := n.Exec(ctx, "journalctl", "--no-pager", "-t", "mesh-host", "-o", "short-unix")
	if err != nil {
		t.Fatal(err)
	}
	var entries []logEntry
	for _, line := range strings.Split(string(out), "\n") {
		stamp, text, _ := strings.Cut(line, " ")
		sec, frac, _ := strings.Cut(stamp, ".")
		s, err1 := strconv.ParseInt(sec, 10, 64)
		us, err2 := strconv.ParseInt(frac, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		entries = append(entries, logEntry{time.Unix(s, us*1000), text})
	}
	return entries
}

// hostProc is a mesh-host process in a node, as the node numbers it.
type hostProc struct{ pid, ppid string }

// hostPIDs lists the processes named mesh-host in n (every version's binary is called that).
func hostPIDs(t *testing.T, ctx context.Context, n *Node) []hostProc {
	t.Helper()
	out, err := n.Exec(ctx, "ps", "-C", "mesh-host", "-o", "pid=,ppid=")
	if err != nil && len(strings.TrimSpace(string(out))) > 0 { // ps exits 1, saying nothing, when none runs
		t.Fatal(err)
	}
	var procs []hostProc
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			procs = append(procs, hostProc{f[0], f[1]})
		}
	}
	return procs
}
