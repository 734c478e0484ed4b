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
)

// Demo tells the story on one node with real processes: v1 confirms, v2 is staged and takes
// over by standing aside, a broken v3 fails three times and is rolled back to v2. It prints
// `mesh-launcher status` at each step and returns an error if any step does not happen as told.
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

	say("building the launcher and three host versions from this tree (v3 is broken: it exits 1 at start)")
	b, err := NewBuilder(ctx, src, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	bin := map[string]string{}
	for _, x := range []struct{ key, pkg, version string }{
		{"launcher", PkgLauncher, "v1.0.0"},
		{"v1", PkgHost, "v1.0.0"}, {"v2", PkgHost, "v1.1.0"}, {"v3", PkgExit1, "v1.2.0"},
	} {
		if bin[x.key], err = b.Build(ctx, x.pkg, x.version); err != nil {
			return err
		}
	}
	n := &Node{
		Name: "node-1", Root: filepath.Join(work, "node-1"), Launcher: bin["launcher"],
		Env: []string{"MESH_HOST_RECONCILE_INTERVAL=1s", "MESH_HOST_NODE=node-1"},
	}
	status := func() {
		for _, line := range strings.Split(strings.TrimRight(n.StatusText(ctx), "\n"), "\n") {
			fmt.Fprintf(w, "    %s\n", line)
		}
	}
	step := func(what string, ok func(launcher.Report) bool) error {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if _, err := n.WaitStatus(wctx, what, ok); err != nil {
			fmt.Fprintf(w, "\nFAILED: %v\nlauncher log:\n%s\n", err, n.Log())
			return err
		}
		say("✓ %s", what)
		status()
		return nil
	}
	defer func() {
		if n.PID() != 0 {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			n.Stop(sctx)
		}
	}()

	say("node-1: v1.0.0 placed under %s/versions; starting mesh-launcher run", n.Root)
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

	say("staging v1.1.0 beside it: the running host stands aside after its next reconcile")
	if err := n.PlaceVersion("v1.1.0", bin["v2"]); err != nil {
		return err
	}
	if err := step("v1.1.0 took over by standing aside and confirmed; the launcher was never restarted", func(rep launcher.Report) bool {
		return runningConfirmedReport("v1.1.0")(rep) && rep.LauncherPID == launcherPID
	}); err != nil {
		return err
	}

	say("staging the broken v1.2.0: it exits 1 at start; after 3 failures it is marked bad and rolled back")
	if err := n.PlaceVersion("v1.2.0", bin["v3"]); err != nil {
		return err
	}
	if err := step("v1.2.0 was rolled back to v1.1.0, marked bad, its last output kept", func(rep launcher.Report) bool {
		bad, _ := Version(rep, "v1.2.0")
		return len(rep.Rollbacks) == 1 && rep.Rollbacks[0].From == "v1.2.0" && rep.Rollbacks[0].To == "v1.1.0" &&
			bad.Bad && runningConfirmedReport("v1.1.0")(rep)
	}); err != nil {
		return err
	}

	say("stopping the launcher (SIGTERM): the host stops at a safe point")
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	code, err := n.Stop(sctx)
	if err != nil || code != 0 {
		return fmt.Errorf("stopping the launcher: exit %d, %v", code, err)
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
