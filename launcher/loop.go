package launcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

// loop chooses, runs and judges until stopped or failed. A stop that lands between steps ends
// it cleanly: whatever was being read or judged no longer matters.
func (l *Launcher) loop(ctx context.Context) error {
	err := l.steps(ctx)
	if err != nil && ctx.Err() != nil && !errors.As(err, new(errFailedState)) {
		return nil
	}
	return err
}

func (l *Launcher) steps(ctx context.Context) (err error) {
	stoodAside := ""
	// A start that stood aside is recorded as ended in the transaction that begins the next, so
	// one commit, not two, lies between the old host's exit and the new one's exec. With no next
	// start (stopped, failed, an error) it is recorded alone on the way out.
	var pending *rollback.EndedStart
	defer func() {
		if pending != nil {
			err = errors.Join(err, l.records.EndStart(context.WithoutCancel(ctx), pending.Start, pending.End))
		}
	}()
	for {
		choice, err := l.records.Choose(ctx, l.cfg.Root)
		if err != nil {
			return err
		}
		if stoodAside != "" {
			l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=%s stood aside; starting %s", stoodAside, choice.Version))
			stoodAside = ""
		}
		for _, s := range choice.Skipped {
			if s.Mismatch != "" {
				l.log.Error("not running a version whose binary cannot be trusted", "version", s.Version, "why", s.Mismatch)
			}
		}
		if choice.Version == "" {
			return errFailedState{reason: fmt.Sprintf("no version to run under %s%s", rollback.VersionsDir(l.cfg.Root), skippedSummary(choice.Skipped))}
		}
		end, err := l.runOnce(ctx, choice.Version, &pending)
		if err != nil {
			return err
		}
		switch end.Outcome {
		case rollback.OutcomeStopped:
			return nil
		case rollback.OutcomeStoodAside:
			stoodAside = choice.Version
			continue // run what is on disk, at once
		}
		if err := l.afterFailure(ctx, choice.Version, end); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// runOnce starts one version and waits for it to end, stopping it if ctx ends and killing it
// if it is unconfirmed at the confirm deadline. It records and returns how it ended, except a
// stand-aside: that is left in *pending, which the next start records with itself (and sets
// nil once it did).
func (l *Launcher) runOnce(ctx context.Context, version string, pending **rollback.EndedStart) (rollback.End, error) {
	var (
		p         *hostProcess
		start     int64
		confirmed bool
		deadlineD time.Duration = -1
	)
	if a := l.adopted; a != nil && a.version == version {
		// The host the image before this one handed over: its start stays open, its deadline
		// goes on from where it was.
		l.adopted = nil
		p, start, confirmed, deadlineD = a.p, a.start, a.confirmed, a.deadline
	} else {
		if a != nil {
			// Choose no longer names the host handed over (its version was retired or marked
			// bad meanwhile by another hand): it runs on, judged as any host is.
			l.adopted = nil
			p, start, confirmed, deadlineD, version = a.p, a.start, a.confirmed, a.deadline, a.version
		} else {
			standing, err := l.records.Standing(ctx, l.cfg.Root, version, l.cfg.Policy)
			if err != nil {
				return rollback.End{}, err
			}
			confirmed = standing.Confirmed
			if !confirmed {
				deadlineD = l.cfg.ConfirmDeadline
			}
			if *pending != nil {
				start, err = l.records.BeginStartAfter(ctx, version, **pending)
				if err == nil {
					*pending = nil
				}
			} else {
				start, err = l.records.BeginStart(ctx, version)
			}
			if err != nil {
				return rollback.End{}, err
			}
			p, err = l.startHost(version, start)
			if err != nil {
				// A binary that cannot even be executed is a failure of that version like any other.
				l.log.Error("could not start the host", "version", version, "start", start, "err", err)
				end := rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: -1, Signal: "", Output: err.Error()}
				return end, l.records.EndStart(context.WithoutCancel(ctx), start, end)
			}
			if err := l.records.SetPID(ctx, start, p.proc.Pid, p.started); err != nil {
				l.log.Error("could not record the host's pid", "version", version, "err", err)
			}
			l.log.Info("started the host", "version", version, "start", start, "pid", p.proc.Pid, "confirmed", confirmed)
		}
	}
	log := l.log.With("version", version, "start", start)
	var said string
	l.sayRunning(ctx, version, start, &said)
	status := time.NewTicker(statusEvery)
	defer status.Stop()

	var deadline <-chan time.Time
	var deadlineAt time.Time
	if deadlineD >= 0 {
		t := time.NewTimer(deadlineD)
		defer t.Stop()
		deadline, deadlineAt = t.C, time.Now().Add(deadlineD)
	}
	liveness := time.NewTicker(max(l.cfg.LivenessLimit/4, 10*time.Millisecond))
	defer liveness.Stop()
	takeover := time.NewTicker(l.cfg.TakeoverCheck)
	defer takeover.Stop()
	// A delivered launcher confirms once it has seen this host pulse after it took the host on:
	// on trial that ends the trial; confirmed before, it clears the count of its failed ends.
	var trialCheck <-chan time.Time
	pulseAtTakeOn := p.lastAlive.Load()
	if !l.isFloor && !l.confirmedThisImage {
		t := time.NewTicker(max(l.pulseInterval()/2, 10*time.Millisecond))
		defer t.Stop()
		trialCheck = t.C
	}
	end := rollback.End{}
wait:
	for {
		select {
		case <-p.exited:
			break wait
		case <-status.C:
			l.sayRunning(ctx, version, start, &said)
		case <-ctx.Done():
			log.Info("stopping the host at a safe point")
			l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=stopping %s at a safe point", version))
			p.stop(l.cfg.StopTimeout)
			end.Outcome = rollback.OutcomeStopped
			break wait
		case <-liveness.C:
			// SIGSTOP, a deadlock or a host stuck in the kernel all look the same from here:
			// no pulse. Killing it lets the failure policy judge it like a crash.
			if silent, ok := p.silentFor(); ok && silent > l.cfg.LivenessLimit {
				log.Error("the host showed no sign of life for the liveness limit; killing it as hung", "silent", silent.Round(time.Millisecond), "limit", l.cfg.LivenessLimit)
				p.kill()
				end.Outcome = rollback.OutcomeHung
				break wait
			}
		case <-trialCheck:
			if p.lastAlive.Load() != pulseAtTakeOn {
				if err := l.records.ConfirmLauncher(ctx, l.self); err != nil {
					log.Error("could not confirm this launcher", "err", err)
					continue
				}
				if l.trial {
					log.Info("this launcher confirmed: it runs the host and sees it pulse", "launcher", l.self)
				}
				l.trial, l.confirmedThisImage, trialCheck = false, true, nil
			}
		case <-takeover.C:
			if t := l.takeoverTarget(ctx); t != nil {
				left := int64(-1)
				if deadline != nil {
					left = int64(max(time.Until(deadlineAt), 0))
				}
				l.execLauncher(ctx, t, p, &handedHost{PID: p.proc.Pid, Version: version, Start: start, Confirmed: confirmed, Deadline: left})
			}
		case <-deadline:
			ok, err := l.records.StartConfirmed(ctx, start)
			if err != nil {
				log.Error("could not read whether the host confirmed", "err", err)
			}
			if ok {
				deadline = nil
				l.sayRunning(ctx, version, start, &said)
				continue
			}
			log.Error("the host did not confirm within the confirm deadline; killing it", "deadline", l.cfg.ConfirmDeadline)
			p.kill()
			end.Outcome = rollback.OutcomeDeadline
			break wait
		}
	}
	end.ExitCode, end.Signal = p.exitOf()
	end.At = p.endedAt
	end.Output = p.output()
	if end.Outcome == "" {
		var err error
		end.Outcome, err = l.judgeExit(ctx, version, end)
		if err != nil {
			return end, err
		}
	}
	log.Info("the host ended", "outcome", end.Outcome, "exit", end.ExitCode, "signal", end.Signal)
	if end.Outcome == rollback.OutcomeStoodAside {
		*pending = &rollback.EndedStart{Start: start, End: end}
		return end, nil
	}
	return end, l.records.EndStart(context.WithoutCancel(ctx), start, end)
}

// judgeExit is docs/design.md's "run what is on disk": a clean exit while Choose names another version
// is standing aside; a clean exit while it still names this one, or any other exit, is a failure.
func (l *Launcher) judgeExit(ctx context.Context, version string, end rollback.End) (rollback.Outcome, error) {
	if end.ExitCode != rollback.HostExitClean {
		return rollback.OutcomeFailed, nil
	}
	choice, err := l.records.Choose(ctx, l.cfg.Root)
	if err != nil {
		return "", err
	}
	if choice.Version != version {
		return rollback.OutcomeStoodAside, nil
	}
	return rollback.OutcomeFailed, nil
}

// afterFailure applies the failure policy to a version that has just failed.
func (l *Launcher) afterFailure(ctx context.Context, version string, end rollback.End) error {
	s, err := l.records.Standing(ctx, l.cfg.Root, version, l.cfg.Policy)
	if err != nil {
		return err
	}
	v := l.cfg.Policy.Judge(s)
	why := end.Describe()
	log := l.log.With("version", version, "failures", s.Failures, "limit", l.cfg.Policy.Limit, "why", why)
	switch v.Action {
	case rollback.Restart:
		log.Warn("the host failed; restarting it after a backoff", "delay", v.Delay)
		l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=degraded: %s %s; restarting in %s", version, text(why), v.Delay))
		select {
		case <-ctx.Done():
		case <-time.After(v.Delay):
		}
		return nil
	case rollback.RollBack:
		reason := fmt.Sprintf("%s failed %d %s without confirming (last: %s)", version, s.Failures, txt.Plural(s.Failures, "time", "times"), why)
		if s.Deadline() {
			reason = fmt.Sprintf("%s did not confirm within the confirm deadline (%s), its chance to prove itself (%d %s)", version, l.cfg.ConfirmDeadline, s.Failures, txt.Plural(s.Failures, "failure", "failures"))
		}
		if err := l.records.MarkBad(ctx, version, reason); err != nil {
			return err
		}
		choice, err := l.records.Choose(ctx, l.cfg.Root)
		if err != nil {
			return err
		}
		if err := l.records.RecordRollback(ctx, rollback.Rollback{From: version, To: choice.Version, Reason: reason, Output: end.Output}); err != nil {
			return err
		}
		log.Error("rolling back", "to", choice.Version, "reason", reason)
		// Said for a moment; the running line that follows keeps the rollback visible.
		l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=rolling back from %s to %s: %s", version, choice.Version, text(reason)))
		return nil
	case rollback.StopRolledBack:
		reason := fmt.Sprintf("%s, the version rolled back to, failed %d %s too (last: %s): the machine is the problem, not the release", version, s.Failures, txt.Plural(s.Failures, "time", "times"), why)
		// What made the rollback target fail probably made the release it replaced fail as
		// well: the machine or its input, which never marks a release bad (decision 0003).
		if rbs, err := l.records.Rollbacks(ctx, 1); err != nil {
			return err
		} else if len(rbs) == 1 && rbs[0].To == version {
			lifted, err := l.records.WithdrawBad(ctx, rbs[0].From)
			if err != nil {
				return err
			}
			if lifted {
				reason += fmt.Sprintf("; %s is no longer marked bad and gets fresh trials", rbs[0].From)
			}
		}
		return errFailedState{reason: reason + "; fix the machine and restart mesh-launcher"}
	default:
		return errFailedState{reason: fmt.Sprintf("%s failed %d %s without ever confirming (last: %s) and there is no known-good version to roll back to; fix the machine or stage a working version, then restart mesh-launcher", version, s.Failures, txt.Plural(s.Failures, "time", "times"), why)}
	}
}

func skippedSummary(skipped []rollback.Candidate) string {
	if len(skipped) == 0 {
		return ""
	}
	var parts []string
	for _, c := range skipped {
		why := c.Mismatch
		if c.Bad {
			why = "marked bad"
		}
		parts = append(parts, c.Version+": "+why)
	}
	return " (passed over: " + strings.Join(parts, "; ") + ")"
}
