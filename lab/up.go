package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// UpOptions say what fleet `mesh-lab up` leaves running.
type UpOptions struct {
	Nodes int    // how many nodes, at least one
	Dir   string // where everything goes; "" is a new temporary directory, removed at the end
	Src   string // inside the mesh-host source tree: what is run is built from it
}

// UpRolloutArgs are the rollout flags `mesh-lab up` suggests: one canary, then half, then all,
// with the clocks scaled down as in the demo.
const UpRolloutArgs = "--canary 1 --steps 50%,100% --window 30s --soak 5s"

// Up builds the binaries, starts a bus and o.Nodes nodes on v1.0.0 (the fleet of the demo), builds
// — without publishing — a good v1.1.0 and a broken v1.2.0, prints the commands a person can try
// against them, and keeps it all running until ctx ends (SIGINT, SIGTERM); then it stops every
// node and the bus, and returns nil.
func Up(ctx context.Context, w io.Writer, o UpOptions) (err error) {
	if o.Nodes < 1 {
		return fmt.Errorf("--nodes %d: a fleet needs at least one node", o.Nodes)
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "mesh-lab-up-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else {
		if dir, err = filepath.Abs(dir); err != nil {
			return err
		}
		if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
			return fmt.Errorf("%s is not empty: give --dir a new or empty directory (the fleet's roots, bus and keys start fresh)", dir)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	fmt.Fprintf(w, "mesh-lab up: building from this tree and starting %d nodes under %s …\n", o.Nodes, dir)
	b, err := NewBuilder(ctx, o.Src, filepath.Join(dir, "bin", "build"))
	if err != nil {
		return err
	}
	b.Progress = w
	// Everything is built before the clocks start: a cold build takes minutes.
	if err := b.BuildStory(ctx, nil, PkgCrashRun, true); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f, err := StartFleet(sctx, FleetOptions{Dir: dir, Builder: b, Nodes: o.Nodes, LogDir: filepath.Join(dir, "logs")})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(w, "mesh-lab up: stopping the nodes and the bus …")
		f.Close()
		fmt.Fprintln(w, "mesh-lab up: stopped")
	}()
	releases := map[string]string{}
	for _, r := range []struct{ version, pkg string }{{"v1.1.0", PkgHost}, {"v1.2.0", PkgCrashRun}} {
		if releases[r.version], err = f.BuildRelease(sctx, r.version, r.pkg); err != nil {
			return err
		}
	}
	// The commands by their own names, for a person's PATH.
	bin := filepath.Join(dir, "bin")
	for name, target := range map[string]string{"mesh-release": f.Release.Bin, "mesh-launcher": f.Nodes[0].Launcher} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			return err
		}
	}

	fmt.Fprintf(w, "\nmesh-lab up: %d nodes (%s) run v1.0.0, each a mesh-launcher process; the bus is %s\n",
		o.Nodes, strings.Join(f.Names(), ", "), f.Bus.URL())
	fmt.Fprintf(w, "v1.1.0 (good) and v1.2.0 (broken: passes preflight, crashes when run) are built and signed, not published.\n\n")
	fmt.Fprintf(w, "Try, in another shell:\n\n")
	key := " --key " + f.Release.KeyPath() // targets are signed; the nodes trust the release key for them too
	for _, c := range [][2]string{
		{"export PATH=" + bin + ":$PATH MESH_NATS_URL=" + f.Bus.URL(), ""},
		{"mesh-release fleet", "every node's last word"},
		{"mesh-release publish " + releases["v1.1.0"], "announce the good release, then roll it out: a canary, then 50%, then all"},
		{"mesh-release rollout start v1.1.0 " + UpRolloutArgs + " --follow" + key, ""},
		{"mesh-release publish " + releases["v1.2.0"], "the broken one halts after the canary, which rolls back by itself"},
		{"mesh-release rollout start v1.2.0 " + UpRolloutArgs + " --follow" + key, ""},
		{"mesh-release rollout status", "the last rollout: batches, nodes, why it halted"},
		{"mesh-release withdraw v1.2.0 --reason 'crashes when run'" + key, "withdraw it for good: no node fetches it again, one running it steps down"},
		{"mesh-launcher status --root " + f.Nodes[0].Root, "one node: its versions, failures and rollbacks, and its log"},
		{"tail " + filepath.Join(dir, "logs", f.Nodes[0].Name+".log"), ""},
		{"mesh-release rollout watch " + UpRolloutArgs + key, "or leave this running, and publish: each release is rolled out as it is announced"},
	} {
		if c[1] != "" {
			fmt.Fprintf(w, "  # %s\n", c[1])
		}
		fmt.Fprintf(w, "  %s\n", c[0])
	}
	fmt.Fprintf(w, "\nmesh-lab up: running until Ctrl-C (SIGINT) or SIGTERM\n")
	<-ctx.Done()
	return nil
}
