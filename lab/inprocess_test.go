package lab

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/profile"
	"github.com/novox/mesh-host/rollback"
)

// launchInProcess does for one root what mesh-launcher does, with the hosts in this process:
// choose a version (rollback.Choose), record the start, run that version's host.Host until it
// returns, record how it ended, and run what Choose names next when it stood aside — until ctx
// ends. The host confirms itself after its first reconcile as usual, so a version delivered
// over the bus is staged, stood aside for, run and confirmed without a process per version.
// Nothing here judges failures: the versions it runs are this tree's host.
func launchInProcess(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	err := launchLoop(ctx, cfg, log)
	if ctx.Err() != nil {
		return nil // stopped: whatever was interrupted no longer matters
	}
	return err
}

func launchLoop(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	records, _, err := rollback.OpenForLauncher(ctx, cfg.Root)
	if err != nil {
		return err
	}
	defer records.Close()
	for {
		choice, err := records.Choose(ctx, cfg.Root)
		if err != nil {
			return err
		}
		if choice.Version == "" {
			return fmt.Errorf("%s: no version to run", cfg.Root)
		}
		start, err := records.BeginStart(ctx, choice.Version)
		if err != nil {
			return err
		}
		h, err := host.New(host.Options{Config: cfg, Version: choice.Version, StartID: start, Logger: log, Detector: fleetDetector})
		if err != nil {
			return err
		}
		res, err := h.Run(ctx)
		end := rollback.End{Outcome: rollback.OutcomeStopped, At: time.Now()}
		if res.StoodAsideFor != "" {
			end.Outcome = rollback.OutcomeStoodAside
		}
		if err != nil {
			end = rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: err.Error(), At: time.Now()}
		}
		if eerr := records.EndStart(context.WithoutCancel(ctx), start, end); eerr != nil {
			return eerr
		}
		if err != nil || res.StoodAsideFor == "" {
			return err
		}
	}
}

// fleetDetector is shared by the hosts of the in-process fleets: one machine, one detection.
var fleetDetector = profile.NewDetector(time.Hour)
