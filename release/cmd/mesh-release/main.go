// Command mesh-release is the control side: it serves the bus, declares, shows the fleet, and
// releases versions.
//
// It serves or uses a NATS bus, declares what nodes hold, shows the fleet, and builds, signs,
// publishes and targets host versions.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"
	// Window zones (Europe/Brussels) are read the same on a machine without a zone database.
	_ "time/tzdata"
)

// version is stamped by `make build VERSION=…`.
var version = "v0.0.0-dev"

// command is one mesh-release command. Main makes its flag set (so that --help and a bad flag
// are answered the same way for every command); run registers its flags and parses args with
// parseArgs.
type command struct {
	name    string
	args    string // the positional arguments, as the usage line names them
	summary string
	about   string // more for --help: what the arguments are, what it prints
	run     func(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error
}

// commands is the whole command set, in the order `mesh-release --help` lists it. Each command
// lives in its own cmd_<name>.go file.
var commands = []command{
	{"serve", "", "run an embedded NATS server with JetStream and the mesh buckets", serveAbout,
		func(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
			return serveCmd(ctx, s, fs, args, nil)
		}},
	{"init", "", "create the mesh buckets and stream on an existing NATS (idempotent), or write a cluster's server configurations", initAbout, initCmd},
	{"declare", "NODE FILE", "validate a declaration file and store it for a node", declareAbout, declareCmd},
	{"fleet", "[NODE]", "show every node's last heartbeat, silent nodes standing out, or one node's whole story", fleetAbout, fleetCmd},
	{"metrics", "", "serve the fleet, the rollout and the releases as Prometheus metrics", metricsAbout, metricsCmd},
	{"web", "", "serve a live, read-only page of the fleet and the rollout", webAbout, webCmd},
	{"keygen", "", "make an ed25519 release key pair", "", keygenCmd},
	{"build", "", "build and sign each platform's host archive and launcher object, and the manifest", "", buildCmd},
	{"publish", "DIR", "put a build's objects and manifest on the bus", "DIR is the -o directory of `mesh-release build`.", publishCmd},
	{"target", "(NODE… | --fleet) VERSION", "set which version nodes (or the fleet) should run", targetAbout, targetCmd},
	{"window", windowArgs, "set, show or clear the maintenance windows nodes stand aside in", windowAbout, windowCmd},
	{"rollout", rolloutArgs, "stage a release across the fleet, halting by itself on trouble", rolloutAbout, rolloutCmd},
	{"blob", blobArgs, "put files on the bus for declarations to name by digest", blobAbout, blobCmd},
	{"bus", busArgs, "roll the bus's CA over and change its URLs, every node told over its link", busAbout, busCmd},
	{"withdraw", "VERSION", "withdraw a host version for good: nodes step down from it", withdrawAbout, withdrawCmd},
	{"enrol-token", "", "make a one-time token that enrols a node (mesh-host enrol TOKEN)", enrolTokenAbout, enrolTokenCmd},
	{"enrol-service", "", "run the enrolment service (serve runs one in operator mode)", enrolServiceAbout, enrolServiceCmd},
	{"node", "revoke ID | cut-over", "revoke an enrolled node's key; end the transition of nodes enrolled before", nodeAbout, nodeCmd},
	{"trust", trustArgs, "the root of trust: make, sign, rotate, show and publish roots", trustAbout, trustCmd},
	{"version", "", "print this tool's version", "", versionCmd},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := run(ctx, &stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr, getenv: os.Getenv, tty: isTerminal(os.Stdout)}, os.Args[1:])
	stop()
	os.Exit(code)
}

func versionCmd(_ context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	if err := noArgs(fs, args); err != nil {
		return err
	}
	s.println(version)
	return nil
}
