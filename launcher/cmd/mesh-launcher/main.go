// Command mesh-launcher runs the newest good version of mesh-host under ROOT/versions, rolling back
// once.
//
// It owns the systemd unit, judging how each run ends and rolling back once. See launcher.Run.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/novox/mesh-host/internal/cmdline"
	"github.com/novox/mesh-host/internal/layout"
	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
)

// prog answers --help, bad flags and stray arguments as every mesh command does; `status` uses
// 1, 3 and 4 for what it finds.
const (
	prog      = cmdline.Program("mesh-launcher")
	exitUsage = cmdline.ExitUsage
)

// The main goroutine stays on the main thread for the life of the process: it forks every host
// and is the one that execs a new launcher, and the host's Pdeathsig fires when the thread that
// forked it ends — exec ends every thread but the caller (launcher/takeover.go).
func init() { runtime.LockOSThread() }

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr, os.Getenv)) }

// cli runs the command line args (without the program name) and returns the exit status.
func cli(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	return prog.Dispatch(args, stdout, stderr, launcher.Version, "Run `mesh-launcher <command> --help` for a command's flags. ROOT is --root, else\nMESH_HOST_ROOT, else "+rollback.DefaultRoot+".", []cmdline.Command{
		{Name: rollback.CmdRun, Summary: "run the newest good mesh-host under ROOT/versions (the systemd unit's command)",
			Run: func(args []string) int { return run(args, stdout, stderr, getenv) }},
		{Name: "install", Summary: "place a mesh-host binary under ROOT/versions as a version, checked and recorded",
			Run: func(args []string) int { return install(args, stdout, stderr, getenv) }},
		{Name: "stopped", Summary: "record how systemd saw the launcher end (the unit's ExecStopPost; not for people)",
			Run: func(args []string) int { return stopped(args, stdout, stderr, getenv) }},
		{Name: "status", Summary: "show the versions, the running one, failures and the last rollback",
			Run: func(args []string) int { return status(args, stdout, stderr, getenv) }},
		{Name: "supports", Summary: "exit 0 if this launcher has FEATURE (" + strings.Join(features, ", ") + "), 1 if not",
			Run: func(args []string) int { return supports(args, stdout, stderr) }},
	})
}

// features are what this binary can do that an older launcher could not, asked of the running
// image by the package's postinst (`/proc/$MAINPID/exe supports takeover`): takeover is taking
// a new /usr/bin/mesh-launcher by exec, keeping the host, so the postinst need not restart the
// unit. A launcher older than the word exits 2 (unknown command), which the postinst reads as no.
var features = []string{"takeover"}

func supports(args []string, stdout, stderr io.Writer) int {
	fs := prog.NewFlagSetWithOperands("supports", "FEATURE", "Exit 0 if this launcher has FEATURE, 1 (saying so) if it does not. Features: "+strings.Join(features, ", ")+".\nThe package's postinst asks the running launcher `supports takeover` to know whether a\nnew /usr/bin/mesh-launcher is taken without restarting the unit.")
	ops, code, ok := prog.ParseOperands(fs, args, []string{"FEATURE"}, stdout, stderr)
	if !ok {
		return code
	}
	if slices.Contains(features, ops[0]) {
		return 0
	}
	fmt.Fprintf(stderr, "mesh-launcher supports: this launcher (%s) does not have %.64q; it has: %s\n", launcher.Version, ops[0], strings.Join(features, ", "))
	return 1
}

func defaultRoot(getenv func(string) string) string {
	if v := getenv(rollback.EnvRoot); v != "" {
		return v
	}
	return rollback.DefaultRoot
}

func run(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := prog.NewFlagSet(rollback.CmdRun, "Run the newest good version of mesh-host under ROOT/versions, judge how each run ends, and roll\nback once to the known-good predecessor. Exit 3 is the failed state (the unit's\nRestartPreventExitStatus).")
	root := fs.String("root", defaultRoot(getenv), "the root holding versions/ and records.db (MESH_HOST_ROOT)")
	limit := fs.Int("failure-limit", rollback.DefaultPolicy.Limit, "failures that judge a version")
	interval := fs.Duration("failure-interval", rollback.DefaultPolicy.Interval, "window in which a confirmed version's failures count toward its backoff")
	deadline := fs.Duration("confirm-deadline", launcher.DefaultConfirmDeadline, "an unconfirmed version must complete a reconcile within this, or it is rolled back")
	liveness := fs.Duration("liveness-limit", launcher.DefaultLivenessLimit, "a host that shows no sign of life this long is killed as hung")
	backoffMax := fs.Duration("backoff-max", rollback.DefaultPolicy.BackoffMax, "the longest wait before restarting a failed host")
	backoffMin := fs.Duration("backoff-min", rollback.DefaultPolicy.BackoffMin, "the first wait before restarting a failed host")
	stopTimeout := fs.Duration("stop-timeout", launcher.DefaultStopTimeout, "how long a stopping host may take before it is killed")
	takeoverCheck := fs.Duration("launcher-check", launcher.DefaultTakeoverCheck, "how often the launcher looks for a newer launcher on disk (under ROOT/launchers, or the package's replaced) to take over by exec, the host kept running")
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if *limit < 1 {
		fmt.Fprintln(stderr, "mesh-launcher run: --failure-limit must be at least 1")
		return exitUsage
	}
	if *liveness <= 0 || *deadline <= 0 || *takeoverCheck <= 0 {
		fmt.Fprintln(stderr, "mesh-launcher run: --liveness-limit, --confirm-deadline and --launcher-check must be positive")
		return exitUsage
	}
	log := logkey.Text(stderr, nil).With("component", "launcher", "launcher_version", launcher.Version)
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
		Journal:         launcher.HostJournal(),
		Takeover:        true,
		TakeoverCheck:   *takeoverCheck,
		Floor:           floorPath(),
	})
	if err != nil {
		log.Error("mesh-launcher cannot run", "err", err)
	}
	return code
}

// floorPath is this binary's own path when the unit (or a person) started it: the floor. An
// image exec'd by another launcher is told the floor by its handover instead.
func floorPath() string {
	exe, err := os.Executable()
	if err != nil {
		return rollback.DefaultFloor
	}
	return exe
}

func status(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := prog.NewFlagSet("status", "Show the versions and their states, the running version and pid, known-good, and the last\nrollback with the failed version's last output. Versions are listed newest first.\nExit status: 0 healthy, 4 degraded, 3 failed, 1 error (no root there, no records, unreadable\nrecords).")
	root := fs.String("root", defaultRoot(getenv), "the root holding versions/ and records.db (MESH_HOST_ROOT)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	interval := fs.Duration("failure-interval", rollback.DefaultPolicy.Interval, "window in which a confirmed version's failures count (as given to run)")
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	p := rollback.DefaultPolicy
	p.Interval = *interval
	rep, err := launcher.ReadStatus(context.Background(), *root, p)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-launcher status: %v\n", err)
		return 1
	}
	if *asJSON {
		rep.WriteJSON(stdout)
	} else {
		rep.WriteText(stdout, time.Now())
	}
	return rep.ExitCode()
}

func install(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := prog.NewFlagSetWithOperands("install", "FILE", "Place the mesh-host binary FILE under ROOT/versions/<version>, as delivery stages a version:\ncopied to a staging directory, checked to run (`FILE version` must print the version),\nits digest recorded in records.db as installed by hand, then renamed into place. The\nsame bytes already installed are no error; other bytes under the same version are\nrefused. The launcher still runs the newest good version, whatever is installed.\nExit status: 0 installed (or already there), 1 refused or failed.")
	root := fs.String("root", defaultRoot(getenv), "the root holding versions/ and records.db (MESH_HOST_ROOT)")
	ver := fs.String("version", "", "the version FILE must be (default: the one \"FILE version\" prints)")
	ops, code, ok := prog.ParseOperands(fs, args, []string{"FILE"}, stdout, stderr)
	if !ok {
		return code
	}
	if *ver != "" && !layout.ValidVersion(*ver) {
		fmt.Fprintf(stderr, "mesh-launcher install: --version %q is not %s\n", *ver, layout.VersionRule)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	in, err := launcher.Install(ctx, *root, ops[0], *ver)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-launcher install: %v\n", err)
		return 1
	}
	in.WriteText(stdout)
	return 0
}

// stopped is the unit's ExecStopPost: systemd's word on how the launcher ended, kept for the next
// start's judgement of a launcher on trial. It never fails the unit for want of records.
func stopped(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := prog.NewFlagSet("stopped", "Record how systemd saw the unit's main process end ($SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS),\nso the next start can tell a launcher that failed from one killed from outside. The unit's\nExecStopPost runs it.")
	root := fs.String("root", defaultRoot(getenv), "the root holding versions/ and records.db (MESH_HOST_ROOT)")
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := launcher.RecordUnitExit(ctx, *root, getenv); err != nil {
		fmt.Fprintf(stderr, "mesh-launcher stopped: %v\n", err)
		return 1
	}
	return 0
}
