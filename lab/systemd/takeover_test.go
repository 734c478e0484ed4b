package systemd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/lab"
	"github.com/novox/mesh-host/wire"
)

// TestPackageUpgradeNeverStopsTheHost is issue 19, section 7, item 5 (seed 000: a package
// upgrade never stops the host): `apt install` of a newer package by hand, and a declaration of
// the mesh-host package applied by the host itself. Either way the unit is not restarted
// (NRestarts 0, the same MainPID), the host keeps its pid, and the launcher running afterwards
// is the new /usr/bin/mesh-launcher, taken by exec. Each node first runs a delivered v1.1.0, so
// the older host each package seeds is not chosen: a new host pid can only mean a stopped host.
func TestPackageUpgradeNeverStopsTheHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	w := newWorld(t, ctx)
	w.ship(t, ctx, lab.PkgHost, "v1.1.0")

	t.Run("apt install of a newer package by hand", func(t *testing.T) {
		n, before := w.runningDelivered(t, ctx, "apt")
		deb := buildDeb(t, ctx, w.builder.Src, "v1.0.1", t.TempDir())
		b, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(n.Root(), "root", filepath.Base(deb)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := n.Exec(ctx, "apt-get", "install", "-y", "/root/"+filepath.Base(deb))
		if err != nil {
			t.Fatalf("apt-get install: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "mesh-launcher.service keeps running (pid "+before.launcher+")") {
			t.Errorf("the postinst did not leave the unit running:\n%s", out)
		}
		if st := dpkgStatus(ctx, n, "mesh-host"); st != "installed 1.0.1" {
			t.Errorf("dpkg-query mesh-host: %q, want installed 1.0.1", st)
		}
		w.checkTakenOver(t, ctx, n, before)
	})

	t.Run("a declaration of the mesh-host package", func(t *testing.T) {
		n, before := w.runningDelivered(t, ctx, "declared")
		deb := buildDeb(t, ctx, w.builder.Src, "v1.0.2", t.TempDir())
		b, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		if out, err := w.rel.Run(ctx, "blob", "put", deb, "--nats", w.rel.NATS); err != nil || !strings.Contains(out, digest) {
			t.Fatalf("mesh-release blob put: %v\n%s", err, out)
		}
		since := time.Now()
		rev := w.declare(t, ctx, n, declaration(n.Name,
			[3]string{"package", "mesh-host", specJSON(t, map[string]any{"version": "1.0.2", "source": digest})}))
		beat := w.waitBeat(t, ctx, n, "the mesh-host package declared and reconciled", func(b lab.Beat) bool {
			return b.DeclarationRevision == rev && b.LastReconcile != nil &&
				b.LastReconcile.Trigger == wire.TriggerDeclaration && b.LastReconcile.At.After(since)
		})
		if r := beat.LastReconcile; !r.OK {
			t.Errorf("the reconcile that applied the mesh-host package failed: %s\n%s", r.Error, diagnose(n))
		}
		if st := dpkgStatus(ctx, n, "mesh-host"); st != "installed 1.0.2" {
			t.Errorf("dpkg-query mesh-host: %q, want installed 1.0.2", st)
		}
		w.checkTakenOver(t, ctx, n, before)
	})
}

// running is what must not change across an upgrade: the unit's MainPID and the host's pid.
type running struct{ launcher, host string }

// runningDelivered installs a node from the .deb, delivers v1.1.0 to it and returns the node and
// its launcher and host once v1.1.0 runs confirmed.
func (w *world) runningDelivered(t *testing.T, ctx context.Context, name string) (*Node, running) {
	t.Helper()
	n := w.install(t, ctx, name, nil)
	if err := w.rel.Target(ctx, "v1.1.0", n.Name); err != nil {
		t.Fatal(err)
	}
	w.waitBeat(t, ctx, n, "v1.1.0 running and confirmed", lab.RunningConfirmed("v1.1.0"))
	p := waitShow(t, ctx, n, "STATUS= running v1.1.0 (confirmed)", func(p map[string]string) bool {
		return p["StatusText"] == "running v1.1.0 (confirmed)"
	})
	hosts := hostPIDs(t, ctx, n)
	if len(hosts) != 1 || hosts[0].ppid != p["MainPID"] {
		t.Fatalf("hosts %+v, want one, the child of the launcher %s", hosts, p["MainPID"])
	}
	return n, running{launcher: p["MainPID"], host: hosts[0].pid}
}

// checkTakenOver fails unless, after an upgrade, the unit was never restarted, the host kept its
// pid and heartbeats on, and the launcher (the same MainPID) runs the new /usr/bin/mesh-launcher:
// its /proc/PID/exe is the file now there, not the replaced one ("(deleted)").
func (w *world) checkTakenOver(t *testing.T, ctx context.Context, n *Node, before running) {
	t.Helper()
	from := w.beats.Len()
	deadline := time.Now().Add(time.Minute)
	var exe, now, onDisk string
	for {
		out, _ := n.Exec(ctx, "readlink", "/proc/"+before.launcher+"/exe")
		exe = strings.TrimSpace(string(out))
		a, _ := n.Exec(ctx, "stat", "-L", "-c", "%d:%i", "/proc/"+before.launcher+"/exe")
		b, _ := n.Exec(ctx, "stat", "-c", "%d:%i", "/usr/bin/mesh-launcher")
		now, onDisk = strings.TrimSpace(string(a)), strings.TrimSpace(string(b))
		if exe == "/usr/bin/mesh-launcher" && now != "" && now == onDisk {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Errorf("the launcher (pid %s) still runs %q (file %s, /usr/bin/mesh-launcher is %s): it did not take the new binary\n%s",
				before.launcher, exe, now, onDisk, diagnose(n))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	p := show(t, ctx, n)
	if p["NRestarts"] != "0" || p["MainPID"] != before.launcher || p["ActiveState"] != "active" {
		t.Errorf("after the upgrade %v, want active, NRestarts=0 and MainPID %s as before", p, before.launcher)
	}
	if hosts := hostPIDs(t, ctx, n); len(hosts) != 1 || hosts[0].pid != before.host || hosts[0].ppid != before.launcher {
		t.Errorf("hosts %+v, want the same host %s, child of %s, as before the upgrade", hosts, before.host, before.launcher)
	}
	ctxBeat, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := w.beats.WaitAfter(ctxBeat, from, "v1.1.0 heartbeating after the upgrade", func(b lab.Beat) bool {
		return b.Node == n.Name && lab.RunningConfirmed("v1.1.0")(b)
	}); err != nil {
		t.Errorf("%v\n%s", err, diagnose(n))
	}
	// dpkg put the same unit file in place again (the packages are built from one tree): status
	// does not call that a change. A unit file with other content waits for the unit's next
	// start, and status says so.
	const changed = "unit file changed on disk since this launcher started"
	if out, _ := n.Exec(ctx, "mesh-launcher", "status"); strings.Contains(string(out), changed) {
		t.Errorf("mesh-launcher status says the unit file changed, but the upgrade put the same bytes in place:\n%s", out)
	}
	if out, err := n.Exec(ctx, "sh", "-c", "echo '# edited by hand' >> /lib/systemd/system/mesh-launcher.service"); err != nil {
		t.Fatalf("edit the unit file: %v\n%s", err, out)
	}
	if out, _ := n.Exec(ctx, "mesh-launcher", "status"); !strings.Contains(string(out), changed) {
		t.Errorf("mesh-launcher status after the unit file was edited does not say it changed:\n%s", out)
	}
}
