// Command mesh-lab runs the lab's demo: the whole story with real processes, narrated.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/novox/mesh-host/lab"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "demo" {
		fmt.Fprintln(os.Stderr, "usage: mesh-lab demo    (run from inside the mesh-host source tree; it builds what it runs)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := lab.Demo(ctx, os.Stdout, "."); err != nil {
		fmt.Fprintf(os.Stderr, "mesh-lab demo: %v\n", err)
		os.Exit(1)
	}
}
