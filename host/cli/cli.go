// Package cli is mesh-host's command line, apart from main so the lab's fixtures can wrap the real
// host.
//
// Its commands: `run` (started by mesh-launcher), `preflight` (proves a staged binary can run on
// this node before anything stands aside), `enrol` (joins the mesh with a token), `apply`, `plan`
// and `owned` (the engine once, from the command line), `profile`, `rescue` (the local state
// derived again from the mesh) and `version`.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/cmdline"
	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// prog answers --help, bad flags and stray arguments as every mesh command does.
const prog = cmdline.Program("mesh-host")

// Main runs the command line args (args[0] is the program) of a host stamped with version and
// returns the exit status.
func Main(version string, args []string) int {
	if len(args) == 0 {
		args = []string{"mesh-host"}
	}
	return command(version, args[1:], os.Stdout, os.Stderr)
}

func command(version string, args []string, stdout, stderr io.Writer) int {
	return prog.Dispatch(args, stdout, stderr, version, "Run `mesh-host <command> --help` for a command's flags. Every host.json setting is also a\nMESH_HOST_* variable (MESH_HOST_ROOT, MESH_HOST_NODE, MESH_HOST_NATS_URL, …).", []cmdline.Command{
		{Name: rollback.CmdRun, Summary: "hold this node in its declared state (started by mesh-launcher, never by hand)",
			Run: func(args []string) int { return run(version, args, stdout, stderr) }},
		{Name: rollback.CmdPreflight, Summary: "print the version, then check this binary can read the node's config and records",
			Run: func(args []string) int { return preflight(version, args, stdout, stderr) }},
		{Name: "enrol", Summary: "join the mesh with a one-time token: make this node's key, get it signed, write host.json",
			Run: func(args []string) int { return enrolCmd(args, os.Stdin, stdout, stderr, os.Getenv) }},
		{Name: "apply", Summary: "apply a declaration FILE, or a bundle (--bundle substrate.lock), once, with no mesh needed",
			Run: func(args []string) int { return applyCmd(args, stdout, stderr) }},
		{Name: "plan", Summary: "say what applying a declaration FILE would change; changes nothing",
			Run: func(args []string) int { return planCmd(args, stdout, stderr) }},
		{Name: "owned", Summary: "list what this host applied and owns, as read from the machine now",
			Run: func(args []string) int { return ownedCmd(args, stdout, stderr) }},
		{Name: "rescue", Summary: "set this node's local state aside and derive it again from the mesh, adopting what is in state",
			Run: func(args []string) int { return rescueCmd(args, stdout, stderr, os.Getenv) }},
		{Name: "profile", Summary: "detect what this machine can do and what it is (the heartbeat's profile and inventory)",
			Run: func(args []string) int { return profileCmd(args, stdout, stderr) }},
	})
}

// rootFlags registers the flags run and preflight share.
func rootFlags(fs *flag.FlagSet) (root, cfgPath *string) {
	root = fs.String("root", "", "the root (MESH_HOST_ROOT; default "+rollback.DefaultRoot+")")
	cfgPath = fs.String("config", "", "the config file (default ROOT/host.json)")
	return root, cfgPath
}

func run(version string, args []string, stdout, stderr io.Writer) int {
	fs := prog.NewFlagSet(rollback.CmdRun, "Hold this node in its declared state: link to the bus, reconcile, heartbeat, and stand aside\nfor a newer version. Started by mesh-launcher, which sets MESH_HOST_VERSION; it refuses to run\nwithout it. The node id is host.json's \"node\" or MESH_HOST_NODE, else the short hostname\n(up to the first dot).")
	rootFlag, cfgFlag := rootFlags(fs)
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	root, cfgPath := *rootFlag, *cfgFlag
	log := logkey.Text(stderr, nil).With("component", "host")
	if want := os.Getenv(rollback.EnvVersion); want != version {
		// The versions lead: the launcher keeps this line as the reason a version failed, and
		// status shows its start.
		log.Error(fmt.Sprintf("refusing to run: this binary is %s but was started as %s; a binary placed by hand must be stamped with its directory's version (make build VERSION=%s), and mesh-host runs under mesh-launcher, which sets MESH_HOST_VERSION",
			version, want, want))
		return 1
	}
	cfg, err := config.Load(root, cfgPath, os.Getenv)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	var start int64
	if s := os.Getenv(rollback.EnvStartID); s != "" {
		if start, err = strconv.ParseInt(s, 10, 64); err != nil {
			log.Error("cannot start: "+rollback.EnvStartID+" is not a number", "value", s)
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
	return rollback.HostExitClean
}

// preflight prints the version first, then checks that this binary can read the node's
// config and records; the stager compares the printed version with the manifest's.
func preflight(version string, args []string, stdout, stderr io.Writer) int {
	fs := prog.NewFlagSet(rollback.CmdPreflight, "Print this binary's version, then check that it can read the node's config, records and\nstore. A host runs it on a staged version before standing aside for it; exit 0 means it can run.")
	rootFlag, cfgFlag := rootFlags(fs)
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	root, cfgPath := *rootFlag, *cfgFlag
	fmt.Fprintln(stdout, version)
	cfg, err := config.Load(root, cfgPath, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "preflight: %v\n", err)
		return 1
	}
	ctx := context.Background()
	r, err := rollback.OpenForHost(ctx, cfg.Root)
	if err != nil {
		fmt.Fprintf(stderr, "preflight: %v\n", err)
		return 1
	}
	defer r.Close()
	if _, err := r.KnownGood(ctx, cfg.Root); err != nil {
		fmt.Fprintf(stderr, "preflight: %v\n", err)
		return 1
	}
	if err := store.Check(ctx, filepath.Join(cfg.Root, store.FileName)); err != nil {
		fmt.Fprintf(stderr, "preflight: %v\n", err)
		return 1
	}
	if _, err := wire.ParseTrustedKeys(cfg.TrustedKeys); err != nil {
		fmt.Fprintf(stderr, "preflight: trusted_keys: %v\n", err)
		return 1
	}
	if _, err := wire.ParseTrustedKeys(cfg.TargetKeys()); err != nil {
		fmt.Fprintf(stderr, "preflight: trusted_target_keys: %v\n", err)
		return 1
	}
	// A version that would refuse this node's bus URL must be refused at staging, not started
	// and rolled back.
	if len(cfg.NATSURLs) > 0 {
		if err := link.CheckPlaintext(cfg.NATSURLs, cfg.NATSCA, cfg.InsecurePlaintext); err != nil {
			fmt.Fprintf(stderr, "preflight: %v\n", err)
			return 1
		}
	}
	return 0
}

// alivePipe opens the liveness pipe the launcher handed over (MESH_HOST_ALIVE_FD, pulsed every
// MESH_HOST_ALIVE_INTERVAL); nil when there is none.
func alivePipe(getenv func(string) string) (io.Writer, time.Duration, error) {
	fdText := getenv(rollback.EnvAliveFD)
	if fdText == "" {
		return nil, 0, nil
	}
	fd, err := strconv.Atoi(fdText)
	if err != nil || fd < 3 {
		return nil, 0, fmt.Errorf("%s=%q is not a descriptor number above 2", rollback.EnvAliveFD, fdText)
	}
	everyText := getenv(rollback.EnvAliveInterval)
	every, err := time.ParseDuration(everyText)
	if err != nil || every <= 0 {
		return nil, 0, fmt.Errorf("%s=%q is not a positive duration", rollback.EnvAliveInterval, everyText)
	}
	f := os.NewFile(uintptr(fd), "liveness pipe")
	if f == nil {
		return nil, 0, fmt.Errorf("%s=%d is not open", rollback.EnvAliveFD, fd)
	}
	return f, every, nil
}
