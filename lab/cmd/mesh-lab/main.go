// Command mesh-lab runs the lab's demo: the whole story with real processes, narrated.
package main

import (
	"context"
	"fmt"
	"github.com/novox/mesh-host/internal/cmdline"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/novox/mesh-host/lab"
)

// version is stamped by `make build VERSION=…`.
var version = "v0.0.0-dev"

// prog answers --help, bad flags and stray arguments as every mesh command does.
const prog = cmdline.Program("mesh-lab")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr, lab.Demo)
	stop()
	os.Exit(code)
}

// cli runs the command line args (without the program name) and returns the exit status; demo
// is lab.Demo, replaced in tests.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer, demo func(context.Context, io.Writer, string) error) int {
	return prog.Dispatch(args, stdout, stderr, version, "Run `mesh-lab demo --help` for what the demo does.", []cmdline.Command{
		{Name: "demo", Summary: "run the narrated demo (from inside the mesh-host source tree)", Run: func(args []string) int {
			if code, ok := parse("demo", demoAbout, args, stdout, stderr); !ok {
				return code
			}
			if err := demo(ctx, stdout, "."); err != nil {
				fmt.Fprintf(stderr, "mesh-lab demo: %v\n", err)
				return 1
			}
			return 0
		}},
	})
}

// parse parses the args of a command that takes no flags or arguments, as every mesh command
// does (internal/cmdline). ok is false when the command should stop with code.
func parse(name, about string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	return prog.Parse(prog.NewFlagSet(name, about), args, stdout, stderr)
}

const demoAbout = `Tell the whole story on one node with real processes and a real bus: v1.0.0 confirms, a
declaration is reconciled, v1.1.0 is built, signed, published and targeted with mesh-release
and takes over, a broken v1.2.0 is rolled back. Run it from inside the mesh-host source tree:
it builds what it runs (needs Go). Exit 1 if any step does not happen.`
