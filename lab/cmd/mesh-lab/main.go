// Command mesh-lab runs the lab for a person: the narrated demo, and a fleet left up to try.
//
// demo tells the fleet's story with real processes; up leaves a fleet running to try commands
// against.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/novox/mesh-host/internal/cmdline"
	"github.com/novox/mesh-host/lab"
)

// version is stamped by `make build VERSION=…`.
var version = "v0.0.0-dev"

// prog answers --help, bad flags and stray arguments as every mesh command does.
const prog = cmdline.Program("mesh-lab")

func main() {
	// SIGHUP too: the terminal it ran in closed. Each stops the fleet before mesh-lab exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := dieWithParent(); err != nil {
		fmt.Fprintf(os.Stderr, "mesh-lab: %v\n", err)
		os.Exit(1)
	}
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr, runners{demo: lab.Demo, up: lab.Up})
	stop()
	os.Exit(code)
}

// runners are what the commands run: lab.Demo and lab.Up, replaced in tests.
type runners struct {
	demo func(context.Context, io.Writer, string) error
	up   func(context.Context, io.Writer, lab.UpOptions) error
}

// cli runs the command line args (without the program name) and returns the exit status.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer, run runners) int {
	return prog.Dispatch(args, stdout, stderr, version, "Run `mesh-lab <command> --help` for what a command does. Both build what they run from the\nmesh-host source tree they are started in (they need Go).", []cmdline.Command{
		{Name: "demo", Summary: "run the narrated demo: a staged rollout across six nodes, amd64 and arm64 (from inside the source tree)", Run: func(args []string) int {
			if code, ok := prog.Parse(prog.NewFlagSet("demo", demoAbout), args, stdout, stderr); !ok {
				return code
			}
			if err := run.demo(ctx, stdout, "."); err != nil {
				fmt.Fprintf(stderr, "mesh-lab demo: %v\n", err)
				return 1
			}
			return 0
		}},
		{Name: "up", Summary: "start a fleet (a bus and N nodes) and leave it running to try commands against", Run: func(args []string) int {
			fs := prog.NewFlagSet("up", upAbout)
			o := lab.UpOptions{Src: "."}
			fs.IntVar(&o.Nodes, "nodes", 3, "how many nodes")
			fs.StringVar(&o.Dir, "dir", "", "where the bus, keys, releases, roots and logs go: a new or empty directory, kept after (default: a temporary one, removed)")
			if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
				return code
			}
			if err := run.up(ctx, stdout, o); err != nil {
				fmt.Fprintf(stderr, "mesh-lab up: %v\n", err)
				return 1
			}
			return 0
		}},
	})
}

const demoAbout = `Tell the fleet's story with real processes: an embedded NATS server and six nodes, each a
mesh-launcher process with its own root on v1.0.0. Where this machine runs linux/arm64 binaries
(qemu-user-static and binfmt-support) the fleet is mixed: four linux/amd64 nodes and two
linux/arm64 ones, each version one release for both platforms. ` + "`mesh-release rollout watch`" + `
rolls out v1.1.0 as soon as it is published: two canaries, then half the fleet, then all of it.
Then v1.2.0, broken on arm64 only (it passes preflight, crashes when run there), is published: the
rollout halts in its canary batch, which held an arm64 node, the canaries go back to v1.1.0, and
no other node fetches it. Without the emulator it says what to install and runs all six nodes on
this machine's platform, v1.2.0 broken on every one. It prints the fleet table and a canary's
status at each step; a minute or two. Run it from inside the mesh-host source tree: it builds what
it runs (needs Go). Exit 1 if anything does not happen as it says.`

const upAbout = `Build the binaries from this tree, start a NATS server and --nodes nodes on v1.0.0 (each a
mesh-launcher process with its own root, heartbeating every second, with the launcher's clocks
scaled down as in the demo), build and sign — without publishing — a good v1.1.0 and a broken
v1.2.0, and print the commands to try (mesh-release fleet, publish, rollout …, mesh-launcher
status). It keeps running until Ctrl-C, SIGTERM or SIGHUP, or until the process that started it
exits (make, go run), then stops every node and the bus (exit 0). ` + "`make up`" + ` builds and runs it.`
