// Command mesh-host is the host: started by mesh-launcher as `mesh-host run`, it holds the node
// in its declared state and stands aside for a newer version. `version` prints its stamped
// version; `preflight` proves a staged binary can run on this node before anything stands aside.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/rollback"
)

// version is stamped by `make build VERSION=…`; the launcher checks it against the directory.
var version = "v0.0.0-dev"

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "version":
		fmt.Println(version)
	case "run":
		os.Exit(run(os.Args[2:]))
	case "preflight":
		os.Exit(preflight(os.Args[2:]))
	default:
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  mesh-host run [--root DIR] [--config FILE]     (started by mesh-launcher)
  mesh-host preflight [--root DIR] [--config FILE]
  mesh-host version`)
}

func flags(name string, args []string) (root, cfgPath string) {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.StringVar(&root, "root", "", "the root (MESH_HOST_ROOT; default /var/lib/mesh-host)")
	fs.StringVar(&cfgPath, "config", "", "the config file (default ROOT/host.json)")
	fs.Parse(args)
	return root, cfgPath
}

func run(args []string) int {
	root, cfgPath := flags("run", args)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "host")
	if want := os.Getenv("MESH_HOST_VERSION"); want != version {
		log.Error("refusing to run: this binary is not the version it was started as (a misplaced binary?); mesh-host runs under mesh-launcher, which sets MESH_HOST_VERSION",
			"binary_version", version, "MESH_HOST_VERSION", want)
		return 1
	}
	cfg, err := config.Load(root, cfgPath, os.Getenv)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	var start int64
	if s := os.Getenv("MESH_HOST_START_ID"); s != "" {
		if start, err = strconv.ParseInt(s, 10, 64); err != nil {
			log.Error("cannot start: MESH_HOST_START_ID is not a number", "value", s)
			return 1
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	h, err := host.New(host.Options{Config: cfg, Version: version, StartID: start, Logger: log})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	res, err := h.Run(ctx)
	if err != nil {
		log.Error("host stopped on an error", "err", err)
		return 1
	}
	if res.StoodAsideFor != "" {
		log.Info("stood aside; the launcher runs the chosen version next", "for", res.StoodAsideFor)
	}
	return 0
}

// preflight prints the version first, then checks that this binary can read the node's
// config and records; the stager compares the printed version with the manifest's.
func preflight(args []string) int {
	root, cfgPath := flags("preflight", args)
	fmt.Println(version)
	cfg, err := config.Load(root, cfgPath, os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "preflight: %v\n", err)
		return 1
	}
	ctx := context.Background()
	r, err := rollback.OpenForHost(ctx, cfg.Root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "preflight: %v\n", err)
		return 1
	}
	defer r.Close()
	if _, err := r.KnownGood(ctx, cfg.Root); err != nil {
		fmt.Fprintf(os.Stderr, "preflight: %v\n", err)
		return 1
	}
	return 0
}
