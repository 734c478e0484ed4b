// Package launcher is mesh-launcher's job: lock the root, choose a version, run it, judge its end,
// roll back once.
//
// It has no network code; what it knows it reads from the versions directory and records.db,
// through the rollback package the host shares.
//
// It runs hosts on Linux only, where the kernel kills a host whose launcher died (Pdeathsig,
// process_linux.go); elsewhere it builds and reads status, and refuses to start a host.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// ExitFailed is the launcher's exit status when it stops in its failed state: the unit names
// it in RestartPreventExitStatus= so systemd does not start it again and again. `status`
// exits with it too.
const ExitFailed = rollback.ExitFailed

// ExitDegraded is `mesh-launcher status`'s exit status when the node is degraded: the host is
// crash-looping, was killed as hung, or is not running.
const ExitDegraded = rollback.ExitDegraded

// The launcher's defaults, for Config.Defaults and the command's flags alike.
const (
	DefaultConfirmDeadline = 10 * time.Minute // the confirm deadline (docs/design.md)
	DefaultLivenessLimit   = 60 * time.Second
	DefaultStopTimeout     = 90 * time.Second
	DefaultTakeoverCheck   = 5 * time.Second
)

// Config is the launcher's settings; Defaults fills what is left zero.
type Config struct {
	Root            string
	Policy          rollback.Policy
	ConfirmDeadline time.Duration // an unconfirmed version must confirm within this (DefaultConfirmDeadline)
	LivenessLimit   time.Duration // a host silent on its liveness pipe this long is killed as hung (DefaultLivenessLimit)
	StopTimeout     time.Duration // how long a stopping host may take before SIGKILL (DefaultStopTimeout)
	Logger          *slog.Logger
	Notifier        Notifier // systemd notifications; NopNotifier outside systemd
	Stderr          *os.File // where the host's stderr is passed through (os.Stderr)
	// Journal, when set, receives the host's stderr instead, a line per entry with fields naming
	// the host (HostJournal: set when stderr is journald's stream). The tail for the records is
	// kept either way.
	Journal JournalFunc
	Stdout  *os.File
	// Takeover lets this launcher replace itself by exec with a newer launcher (takeover.go):
	// only mesh-launcher itself sets it, whose main goroutine is locked to the main thread.
	Takeover bool
	// TakeoverCheck is how often a running launcher looks for a newer one on disk
	// (DefaultTakeoverCheck).
	TakeoverCheck time.Duration
	// Floor is the package's launcher, which the unit starts (this image's own path when the
	// unit started it, rollback.DefaultFloor when unknown).
	Floor string
}

// withDefaults returns c with every zero field at its default (decision 0041).
func (c Config) withDefaults() Config {
	d := rollback.DefaultPolicy
	if c.Policy.Limit == 0 {
		c.Policy.Limit = d.Limit
	}
	if c.Policy.Interval == 0 {
		c.Policy.Interval = d.Interval
	}
	if c.Policy.BackoffMin == 0 {
		c.Policy.BackoffMin = d.BackoffMin
	}
	if c.Policy.BackoffMax == 0 {
		c.Policy.BackoffMax = d.BackoffMax
	}
	if c.ConfirmDeadline == 0 {
		c.ConfirmDeadline = DefaultConfirmDeadline
	}
	if c.LivenessLimit == 0 {
		c.LivenessLimit = DefaultLivenessLimit
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.TakeoverCheck == 0 {
		c.TakeoverCheck = DefaultTakeoverCheck
	}
	if c.Floor == "" {
		c.Floor = rollback.DefaultFloor
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Notifier == nil {
		c.Notifier = NopNotifier{}
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	return c
}

// Launcher runs hosts for one root.
type Launcher struct {
	cfg     Config
	log     *slog.Logger
	records *rollback.Records
	lock    *rollback.Lock

	// This image: its launcher version, whether it is the floor or on trial.
	self    string
	isFloor bool
	trial   bool
	// confirmedThisImage: this image has seen a host pulse and said so in the records.
	confirmedThisImage bool
	// The floor as the unit's start found it (version, path, file identity).
	floorPath, floorVersion, floorID string
	// adopted is the host the image before this one handed over, until the loop takes it.
	adopted *adoptedHost
	// saidSkipped keeps each launcher passed over logged once; execFailed, the launcher versions
	// this image could not exec (not tried again until the unit starts again).
	saidSkipped, execFailed map[string]bool
}

// adoptedHost is a host handed over by exec, and what the image before knew of it.
type adoptedHost struct {
	p         *hostProcess
	version   string
	start     int64
	confirmed bool
	deadline  time.Duration // left of its confirm deadline; <0: none
}

// errFailedState carries the reason the launcher stops in its failed state.
type errFailedState struct{ reason string }

func (e errFailedState) Error() string { return e.reason }

// Run runs until ctx is cancelled (exit 0: the host was stopped at a safe point) or the launcher
// reaches its failed state (exit ExitFailed, reason recorded). Other errors (the root cannot be
// locked, the records cannot be opened) return a non-nil error and exit 1.
func Run(ctx context.Context, cfg Config) (int, error) {
	// The caller logs the error that ends Run to the journal; a delivered image also leaves it
	// in launcher.out, where the floor judging it reads why it ended ("cannot open records.db").
	var captured slog.Handler
	code, err := run(ctx, cfg, &captured)
	if err != nil && captured != nil {
		slog.New(captured).Error("mesh-launcher cannot run", "err", err)
	}
	return code, err
}

// run is Run; a delivered image's launcher.out handler, once opened, is put in *captured.
func run(ctx context.Context, cfg Config, captured *slog.Handler) (int, error) {
	cfg = cfg.withDefaults()
	log := cfg.Logger.With("root", cfg.Root)
	h, err := readHandover()
	if err != nil {
		return 1, err
	}
	log = tidyDescriptors(cfg.Root, h, log, captured)
	var lock *rollback.Lock
	if h != nil {
		lock, err = rollback.AdoptLock(os.NewFile(uintptr(h.LockFD), "launcher.lock"))
	} else {
		lock, err = rollback.LockLauncher(cfg.Root)
	}
	if err != nil {
		return 1, err
	}
	defer lock.Unlock()

	records, note, err := rollback.OpenForLauncher(ctx, cfg.Root)
	if err != nil {
		return 1, err
	}
	l := &Launcher{cfg: cfg, log: log, records: records, lock: lock, self: Version, saidSkipped: map[string]bool{}, execFailed: map[string]bool{}}
	defer func() { l.records.Close() }()
	records.SetPolicy(cfg.Policy) // pruning keeps every failure within the interval judged by
	if note != "" {
		log.Error(note)
	}
	if err := l.begin(ctx, h); err != nil {
		return 1, err
	}
	stopWatchdog := startWatchdog(ctx, cfg.Notifier)
	defer stopWatchdog()
	cfg.Notifier.Notify("READY=1")
	if h == nil && cfg.Takeover {
		// The floor runs the newest good launcher, before it starts any host.
		if t := l.takeoverTarget(ctx); t != nil {
			l.execLauncher(ctx, t, nil, nil)
		}
	}
	return l.exit(ctx, l.loop(ctx))
}

// tidyDescriptors keeps only what may pass through this image: descriptors a unit's start
// inherited (a shell's, a test harness's) go no further, not into a host nor into a launcher
// it execs; after an exec, nothing but what the handover names may come through, and a
// delivered image's log is also captured in launcher.out (the logger returned).
func tidyDescriptors(root string, h *handover, log *slog.Logger, captured *slog.Handler) *slog.Logger {
	if h == nil {
		closeOnExecInherited()
		return log
	}
	if leaked := unexpectedFDs(h); len(leaked) > 0 {
		log.Error("descriptors the launcher before did not hand over were open after exec; closed them", "fds", strings.Join(leaked, " "))
	}
	if !h.Floor {
		log, *captured = captureOutput(root, log)
	}
	return log
}

// begin readies the root: at the unit's start, made safe and the last launcher judged; after
// an exec, the handover taken on.
func (l *Launcher) begin(ctx context.Context, h *handover) error {
	if h != nil {
		return l.tookOver(ctx, h)
	}
	if err := l.prepare(ctx); err != nil {
		return err
	}
	return l.unitStarted(ctx)
}

// exit is the launcher's exit status for how the loop ended: 0 stopped, ExitFailed in the
// failed state (recorded), 1 with any other error.
func (l *Launcher) exit(ctx context.Context, err error) (int, error) {
	var failed errFailedState
	switch {
	case err == nil:
		l.endedAsALauncherShould(ctx)
		l.cfg.Notifier.Notify("STOPPING=1")
		return 0, nil
	case errors.As(err, &failed):
		l.log.Error("stopping in the failed state", "reason", failed.reason)
		if rerr := l.records.SetFailed(context.WithoutCancel(ctx), failed.reason); rerr != nil {
			l.log.Error("could not record the failed state", "err", rerr)
		}
		// The failed state is the host's; the launcher did its job.
		l.endedAsALauncherShould(ctx)
		l.cfg.Notifier.Notify("STATUS=failed: " + text(failed.reason))
		return ExitFailed, nil
	default:
		return 1, err
	}
}

// endedAsALauncherShould records that this image ends as a launcher should, so the unit's next
// start does not judge it.
func (l *Launcher) endedAsALauncherShould(ctx context.Context) {
	if err := l.records.EndCurrentLauncher(context.WithoutCancel(ctx)); err != nil {
		l.log.Error("could not record the launcher's end", "err", err)
	}
}

// prepare makes the root safe to run from: no host of a previous launcher still alive, starts it
// left open closed, the failed state of a previous run left (an operator started us again), and
// leftover staging directories removed.
func (l *Launcher) prepare(ctx context.Context) error {
	// Holding the host lock for a moment proves no host of an earlier launcher is still running.
	hl, err := rollback.LockHost(ctx, l.cfg.Root, 10*time.Second)
	if err != nil {
		return fmt.Errorf("a host from an earlier launcher is still running: %w", err)
	}
	defer hl.Unlock()
	if n, err := l.records.EndInterrupted(ctx); err != nil {
		return err
	} else if n > 0 {
		l.log.Warn("an earlier launcher ended without seeing its host end; that start is recorded as interrupted, not as a failure")
	}
	if was, err := l.records.ClearFailed(ctx); err != nil {
		return err
	} else if was != "" {
		l.log.Warn("the last run stopped in the failed state; trying again because the launcher was started again", "was", was)
	}
	removed, err := rollback.CleanStaging(l.cfg.Root)
	for _, d := range removed {
		l.log.Info("removed a staging directory left by a crash", "dir", d)
	}
	return err
}
