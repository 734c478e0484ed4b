// Command mesh-launcher owns the systemd unit and runs the newest good version of mesh-host kept
// under ROOT/versions, judging how each run ends and rolling back once. See launcher.Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
)

// version is stamped by `make build VERSION=…`.
var version = "v0.0.0-dev"

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(run(os.Args[2:]))
	case "status":
		os.Exit(status(os.Args[2:]))
	case "version":
		fmt.Println(version)
	default:
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  mesh-launcher run [--root DIR] [--failure-limit 3] [--failure-interval 120s]
                    [--confirm-deadline 10m] [--liveness-limit 60s] [--backoff-max 60s]
  mesh-launcher status [--root DIR] [--json] [--failure-interval 120s]
      exit status: 0 healthy, 4 degraded, 3 failed, 1 error
  mesh-launcher version`)
}

func defaultRoot() string {
	if v := os.Getenv("MESH_HOST_ROOT"); v != "" {
		return v
	}
	return "/var/lib/mesh-host"
}

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	root := fs.String("root", defaultRoot(), "the root holding versions/ and records.db (MESH_HOST_ROOT)")
	limit := fs.Int("failure-limit", rollback.DefaultPolicy.Limit, "failures that judge a version")
	interval := fs.Duration("failure-interval", rollback.DefaultPolicy.Interval, "window in which a confirmed version's failures count toward its backoff")
	deadline := fs.Duration("confirm-deadline", 10*time.Minute, "an unconfirmed version must complete a reconcile within this, or it is rolled back")
	liveness := fs.Duration("liveness-limit", 60*time.Second, "a host that shows no sign of life this long is killed as hung")
	backoffMax := fs.Duration("backoff-max", rollback.DefaultPolicy.BackoffMax, "the longest wait before restarting a failed host")
	backoffMin := fs.Duration("backoff-min", rollback.DefaultPolicy.BackoffMin, "the first wait before restarting a failed host")
	stopTimeout := fs.Duration("stop-timeout", 90*time.Second, "how long a stopping host may take before it is killed")
	fs.Parse(args)
	if *limit < 1 {
		fmt.Fprintln(os.Stderr, "mesh-launcher: --failure-limit must be at least 1")
		return 2
	}
	if *liveness <= 0 || *deadline <= 0 {
		fmt.Fprintln(os.Stderr, "mesh-launcher: --liveness-limit and --confirm-deadline must be positive")
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "launcher", "launcher_version", version)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code, err := launcher.Run(ctx, launcher.Config{
		Root:            *root,
		Policy:          rollback.Policy{Limit: *limit, Interval: *interval, BackoffMin: *backoffMin, BackoffMax: *backoffMax},
		ConfirmDeadline: *deadline,
		LivenessLimit:   *liveness,
		StopTimeout:     *stopTimeout,
		Logger:          log,
		Notifier:        launcher.SystemdNotifier{},
	})
	if err != nil {
		log.Error("mesh-launcher cannot run", "err", err)
	}
	return code
}

func status(args []string) int {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	root := fs.String("root", defaultRoot(), "the root holding versions/ and records.db (MESH_HOST_ROOT)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	interval := fs.Duration("failure-interval", rollback.DefaultPolicy.Interval, "window in which a confirmed version's failures count (as given to run)")
	fs.Parse(args)
	p := rollback.DefaultPolicy
	p.Interval = *interval
	rep, err := launcher.ReadStatus(context.Background(), *root, p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mesh-launcher status: %v\n", err)
		return 1
	}
	if *asJSON {
		rep.WriteJSON(os.Stdout)
	} else {
		rep.WriteText(os.Stdout, time.Now())
	}
	return rep.ExitCode()
}
