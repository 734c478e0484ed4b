// Package cli is mesh-host's command line, apart from main so the lab's fixtures can wrap the
// real host: `run` (started by mesh-launcher), `preflight` (proves a staged binary can run on
// this node before anything stands aside) and `version`.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// Main runs the command line args (args[0] is the program) of a host stamped with version and
// returns the exit status.
func Main(version string, args []string) int {
	if len(args) < 2 {
		usage()
		return 2
	}
	switch args[1] {
	case "version":
		fmt.Println(version)
		return 0
	case "run":
		return run(version, args[2:])
	case "preflight":
		return preflight(version, args[2:])
	default:
		usage()
		return 2
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

func run(version string, args []string) int {
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
	var preflightArgs []string
	if cfgPath != "" {
		preflightArgs = []string{"--config", cfgPath}
	}
	alive, every, err := alivePipe(os.Getenv)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	h, err := host.New(host.Options{Config: cfg, Version: version, StartID: start, Logger: log, PreflightArgs: preflightArgs,
		Alive: alive, AliveEvery: every})
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
func preflight(version string, args []string) int {
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
	if err := store.Check(ctx, filepath.Join(cfg.Root, store.FileName)); err != nil {
		fmt.Fprintf(os.Stderr, "preflight: %v\n", err)
		return 1
	}
	if _, err := wire.ParseTrustedKeys(cfg.TrustedKeys); err != nil {
		fmt.Fprintf(os.Stderr, "preflight: trusted_keys: %v\n", err)
		return 1
	}
	return 0
}

// alivePipe opens the liveness pipe the launcher handed over (MESH_HOST_ALIVE_FD, pulsed every
// MESH_HOST_ALIVE_INTERVAL); nil when there is none.
func alivePipe(getenv func(string) string) (io.Writer, time.Duration, error) {
	fdText := getenv("MESH_HOST_ALIVE_FD")
	if fdText == "" {
		return nil, 0, nil
	}
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 {
		return nil, 0, fmt.Errorf("MESH_HOST_ALIVE_FD=%q is not a descriptor number above 2", fdText)
	}
	every, err := time.ParseDuration(getenv("MESH_HOST_ALIVE_INTERVAL"))
	if err != nil || every <= 0 {
		return nil, 0, fmt.Errorf("MESH_HOST_ALIVE_INTERVAL=%q is not a positive duration", getenv("MESH_HOST_ALIVE_INTERVAL"))
	}
	f := os.NewFile(uintptr(fd), "liveness pipe")
	if f == nil {
		return nil, 0, fmt.Errorf("MESH_HOST_ALIVE_FD=%d is not open", fd)
	}
	return f, every, nil
}
