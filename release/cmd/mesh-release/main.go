// Command mesh-release is the control side: it serves or uses a NATS bus, declares what nodes
// hold, shows the fleet, and builds, signs, publishes and targets host versions.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped by `make build VERSION=…`.
var version = "v0.0.0-dev"

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string) error
}

// commands is the whole command set, in the order `mesh-release help` lists it. Each command
// lives in its own cmd_<name>.go file.
var commands = []command{
	{"serve", "run an embedded NATS server with JetStream and the mesh buckets", runServe},
	{"init", "create the mesh buckets and stream on an existing NATS (idempotent)", runInit},
	{"declare", "validate a declaration file and put it for a node", runDeclare},
	{"fleet", "show every node's last heartbeat; silent nodes stand out", runFleet},
	{"keygen", "make an ed25519 release key pair", runKeygen},
	{"build", "build and sign a host archive and its manifest", runBuild},
	{"publish", "put a built archive and manifest on the bus", runPublish},
	{"target", "set which version nodes (or the fleet) should run", runTarget},
	{"version", "print this tool's version", func(context.Context, []string) error { fmt.Println(version); return nil }},
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(ctx, os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "mesh-release %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	fmt.Fprintf(os.Stderr, "mesh-release: unknown command %q\n", os.Args[1])
	usage()
	os.Exit(2)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: mesh-release <command> [flags]")
	for _, c := range commands {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", c.name, c.summary)
	}
}
