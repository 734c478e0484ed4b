package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/wire"
)

// PkgCrashRun passes preflight and exits 1 when run: a bad release only rollback catches.
const PkgCrashRun = "./lab/fixtures/crashrun"

// Demo tells the story on one node with real processes and a real bus: v1 is installed and
// confirms; a declaration is pushed and reconciled; v2 is built, signed, published and targeted
// with mesh-release, and the host delivers it to itself and stands aside; a broken v3 is
// delivered the same way, fails three times, is rolled back to v2 and never fetched again. It
// prints `mesh-launcher status` at each step and returns an error if any step does not happen.
func Demo(ctx context.Context, w io.Writer, src string) error {
	began := time.Now()
	work, err := os.MkdirTemp("", "mesh-lab-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	say := func(format string, args ...any) {
		fmt.Fprintf(w, "\n[%5.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	indent := func(text string) {
		for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}

	say("building the launcher, mesh-release and three host versions from this tree (v1.2.0 is broken: it passes preflight, then crashes when run)")
	b, err := NewBuilder(ctx, src, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	bin := map[string]string{}
	for _, x := range []struct{ key, pkg, version string }{
		{"launcher", PkgLauncher, "v1.0.0"}, {"release", PkgRelease, "v1.0.0"},
		{"v1", PkgHost, "v1.0.0"}, {"v2", PkgHost, "v1.1.0"}, {"v3", PkgCrashRun, "v1.2.0"},
	} {
		if bin[x.key], err = b.Build(ctx, x.pkg, x.version); err != nil {
			return err
		}
	}

	bus, err := StartBus(ctx, filepath.Join(work, "bus"))
	if err != nil {
		return err
	}
	defer bus.Close()
	rel := &Release{Bin: bin["release"], KeyDir: filepath.Join(work, "keys"), Out: filepath.Join(work, "releases"), NATS: bus.URL()}
	pub, err := rel.Keygen(ctx)
	if err != nil {
		return err
	}
	say("bus: NATS with JetStream on %s; release key made (hosts trust %s…)", bus.URL(), pub[:12])
	hbs, stopBeats, err := bus.Heartbeats("node-1")
	if err != nil {
		return err
	}
	defer stopBeats()

	n := &Node{
		Name: "node-1", Root: filepath.Join(work, "node-1"), Launcher: bin["launcher"],
		Env: []string{"MESH_HOST_NODE=node-1", "MESH_HOST_NATS_URL=" + bus.URL(), "MESH_HOST_TRUSTED_KEYS=" + pub,
			"MESH_HOST_RECONCILE_INTERVAL=1s", "MESH_HOST_HEARTBEAT_INTERVAL=1s"},
	}
	fail := func(err error) error {
		fmt.Fprintf(w, "\nFAILED: %v\nlauncher log:\n%s\n", err, n.Log())
		return err
	}
	step := func(what string, ok func(launcher.Report) bool) error {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := n.WaitStatus(wctx, what, ok); err != nil {
			return fail(err)
		}
		say("✓ %s", what)
		indent(n.StatusText(ctx))
		return nil
	}
	beat := func(what string, ok func(wire.Heartbeat) bool) (wire.Heartbeat, error) {
		hb, err := WaitHeartbeat(hbs, 30*time.Second, what, ok)
		if err != nil {
			return hb, fail(err)
		}
		say("✓ %s", what)
		return hb, nil
	}
	defer func() {
		if n.PID() != 0 {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n.Stop(sctx)
		}
	}()

	say("node-1: v1.0.0 installed under %s/versions (the tarball's way); starting mesh-launcher run", n.Root)
	if err := n.PlaceVersion("v1.0.0", bin["v1"]); err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		return err
	}
	if err := step("v1.0.0 runs and confirms (it completed a reconcile)", runningConfirmedReport("v1.0.0")); err != nil {
		return err
	}
	launcherPID := n.PID()
	// mesh-release declares only for a node it has heard from (a typo is refused, not stored).
	if _, err := beat("node-1 heartbeats on the bus", func(hb wire.Heartbeat) bool { return hb.Running == "v1.0.0" }); err != nil {
		return err
	}

	say("mesh-release declare node-1: an empty declaration, pushed to the host over its watch")
	declFile := filepath.Join(work, "node-1.json")
	if err := os.WriteFile(declFile, []byte(`{"version": 1, "node": "node-1", "resources": []}`), 0o644); err != nil {
		return err
	}
	out, err := rel.Run(ctx, "declare", "node-1", declFile, "--nats", bus.URL())
	if err != nil {
		return fail(err)
	}
	indent(strings.TrimSpace(out)) // "declaration for node-1 stored, revision N"
	if _, err := beat("the heartbeat shows the declaration reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision > 0 && hb.LastReconcile != nil && hb.LastReconcile.Trigger == wire.TriggerDeclaration && hb.LastReconcile.OK
	}); err != nil {
		return err
	}

	say("mesh-release build + publish v1.1.0 (signed), then target node-1: the host fetches, verifies, preflights and stages it, and stands aside")
	if err := rel.Ship(ctx, "v1.1.0", bin["v2"]); err != nil {
		return fail(err)
	}
	if err := rel.Target(ctx, "v1.1.0", "node-1"); err != nil {
		return fail(err)
	}
	if _, err := beat("v1.0.0 heartbeats that it stands aside for v1.1.0", func(hb wire.Heartbeat) bool {
		return hb.State == wire.StateStandingAside && hb.StandingAsideFor == "v1.1.0"
	}); err != nil {
		return err
	}
	if err := step("v1.1.0 took over and confirmed; the launcher was never restarted", func(rep launcher.Report) bool {
		return runningConfirmedReport("v1.1.0")(rep) && rep.LauncherPID == launcherPID
	}); err != nil {
		return err
	}

	say("shipping the broken v1.2.0 and targeting it: it passes preflight, crashes when run; after 3 failures it is rolled back")
	if err := rel.Ship(ctx, "v1.2.0", bin["v3"]); err != nil {
		return fail(err)
	}
	if err := rel.Target(ctx, "v1.2.0", "node-1"); err != nil {
		return fail(err)
	}
	if err := step("v1.2.0 was rolled back to v1.1.0, marked bad, its last output kept", func(rep launcher.Report) bool {
		bad, _ := Version(rep, "v1.2.0")
		return len(rep.Rollbacks) == 1 && rep.Rollbacks[0].From == "v1.2.0" && rep.Rollbacks[0].To == "v1.1.0" &&
			bad.Bad && runningConfirmedReport("v1.1.0")(rep)
	}); err != nil {
		return err
	}
	hb, err := beat("v1.1.0 reports the rollback and refuses its bad target instead of fetching it again", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && len(hb.Rollbacks) > 0 && hb.Refused != nil && hb.Refused.What == "target"
	})
	if err != nil {
		return err
	}
	indent("refused: " + hb.Refused.Error)

	out, err = rel.Run(ctx, "fleet", "--nats", bus.URL())
	if err != nil {
		return fail(err)
	}
	say("mesh-release fleet: every node's last word")
	indent(out)

	say("stopping the launcher (SIGTERM): the host stops at a safe point")
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, err := n.Stop(sctx)
	if err != nil || code != 0 {
		return fail(fmt.Errorf("stopping the launcher: exit %d, %v", code, err))
	}
	say("done: the whole story in %s", time.Since(began).Round(100*time.Millisecond))
	return nil
}

func runningConfirmedReport(version string) func(launcher.Report) bool {
	return func(rep launcher.Report) bool {
		v, ok := Version(rep, version)
		return Running(rep) == version && ok && v.Confirmed
	}
}
