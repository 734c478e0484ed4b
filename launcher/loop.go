package launcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// A start that stood aside is recorded as ended in the transaction that begins the next, so
	// one commit, not two, lies between the old host's exit and the new one's exec. With no next
	// start (stopped, failed, an error) it is recorded alone on the way out.
	var pending *rollback.EndedStart
	defer func() {
		if pending != nil {
			err = errors.Join(err, l.records.EndStart(context.WithoutCancel(ctx), pending.Start, pending.End))
		}
	}()
	// next is a choice made while judging how the last host ended (a stand-aside, a rollback),
	// passed on rather than made again; nil: choose now.
	var next *rollback.Choice
	stoodAside := ""
	for {
		choice := next
		if choice == nil {
			c, err := l.choose(ctx)
			if err != nil {
				return err
			}
			choice = &c
		}
		next = nil
		if stoodAside != "" {
			l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=%s stood aside; starting %s", stoodAside, choice.Version))
			stoodAside = ""
		}
		l.sayChoice(*choice)
		if choice.Version == "" {
			return errFailedState{reason: fmt.Sprintf("no version to run under %s%s", rollback.VersionsDir(l.cfg.Root), skippedSummary(choice.Skipped))}
		}
		h, end, err := l.getHost(ctx, choice.Version, &pending)
		if err != nil {
			return err
		}
		if h != nil {
			if end, next, err = l.ended(ctx, h, l.watch(ctx, h), &pending); err != nil {
				return err
			}
		}
		switch end.Outcome {
		case rollback.OutcomeStopped:
			return nil
		case rollback.OutcomeStoodAside:
			stoodAside = choice.Version
			continue // run what is on disk, at once
		}
		// The chosen version is judged, also after a stale adoption's host failed: what ran
		// then was not what is chosen now, and its end is recorded against its own start.
		if next, err = l.afterFailure(ctx, choice.Version, end); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// choose is what to start now: Choose's answer, or the version that waits for its maintenance
// window while the newer one is held (rollback.ChooseToStart). Every start's choice is made
// here, or passed on from the judgement of the last host's end.
func (l *Launcher) choose(ctx context.Context) (rollback.Choice, error) {
	w, err := rollback.ReadWindowWait(l.cfg.Root)
	if err != nil {
		l.log.Warn("the host's window wait cannot be read; holding nothing for a window", "err", err)
	}
	return l.records.ChooseToStart(ctx, l.cfg.Root, w, time.Now())
}

// sayChoice logs what the choice passed over or holds back.
func (l *Launcher) sayChoice(ch rollback.Choice) {
	for _, s := range ch.Skipped {
		if s.Mismatch != "" {
			l.log.Error("not running a version whose binary cannot be trusted", "version", s.Version, "why", s.Mismatch)
		}
	}
	if h := ch.Held; h != nil {
		l.log.Info("starting the version that waits for its maintenance window; the newer one waits with it",
			"version", ch.Version, "held", h.Version, "opens", h.Wait.Opens.Format(time.RFC3339), "window", h.Wait.Window)
	}
}

// hostRun is one host the loop watches, and what judging it needs.
type hostRun struct {
	p         *hostProcess
	version   string
	start     int64
	confirmed bool          // its version was confirmed when it started
	deadline  time.Duration // left of its confirm deadline; <0: none
	log       *slog.Logger
	said      string // the unit's STATUS= line last said for it
}

// getHost is the host to watch for version: the one the image before this one handed over
// (adopted, its start and deadline going on), that one still when the choice no longer names
// it (a stale adoption), or one started fresh. A fresh start that cannot even exec is a failed
// start of that version: it comes back as end, recorded, with no host. A stand-aside pending
// is recorded with the fresh start (and *pending set nil once it is).
func (l *Launcher) getHost(ctx context.Context, version string, pending **rollback.EndedStart) (*hostRun, rollback.End, error) {
	if a := l.adopted; a != nil {
		// The host the image before this one handed over: its start stays open, its deadline
		// goes on from where it was. Were its version retired or marked bad meanwhile by
		// another hand, the choice no longer names it: it runs on, judged as any host is.
		l.adopted = nil
		return l.hostRun(a.p, a.version, a.start, a.confirmed, a.deadline), rollback.End{}, nil
	}
	return l.startFresh(ctx, version, pending)
}

func (l *Launcher) hostRun(p *hostProcess, version string, start int64, confirmed bool, deadline time.Duration) *hostRun {
	return &hostRun{p: p, version: version, start: start, confirmed: confirmed, deadline: deadline,
		log: l.log.With("version", version, "start", start)}
}

// startFresh records a start of version and starts its host, with the confirm deadline unless
// the version is confirmed.
func (l *Launcher) startFresh(ctx context.Context, version string, pending **rollback.EndedStart) (*hostRun, rollback.End, error) {
	standing, err := l.records.Standing(ctx, l.cfg.Root, version, l.cfg.Policy)
	if err != nil {
		return nil, rollback.End{}, err
	}
	deadline := time.Duration(-1)
	if !standing.Confirmed {
		deadline = l.cfg.ConfirmDeadline
	}
	var start int64
	if *pending != nil {
		start, err = l.records.BeginStartAfter(ctx, version, **pending)
		if err == nil {
			*pending = nil
		}
	} else {
		start, err = l.records.BeginStart(ctx, version)
	}
	if err != nil {
		return nil, rollback.End{}, err
	}
	p, err := l.startHost(version, start)
	if err != nil {
		// A binary that cannot even be executed is a failure of that version like any other.
		l.log.Error("could not start the host", "version", version, "start", start, "err", err)
		end := rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: -1, Signal: "", Output: err.Error()}
		return nil, end, l.records.EndStart(context.WithoutCancel(ctx), start, end)
	}
	if err := l.records.SetPID(ctx, start, p.proc.Pid, p.started); err != nil {
		l.log.Error("could not record the host's pid", "version", version, "err", err)
	}
	l.log.Info("started the host", "version", version, "start", start, "pid", p.proc.Pid, "confirmed", standing.Confirmed)
	return l.hostRun(p, version, start, standing.Confirmed, deadline), rollback.End{}, nil
}

// watcher is the watch over one host: a clock per thing to check, each with a small handler.
type watcher struct {
	l *Launcher
	h *hostRun

	status, liveness, takeover *time.Ticker
	deadlineTimer              *time.Timer
	deadline                   <-chan time.Time // nil: no confirm deadline (any more)
	deadlineAt                 time.Time
	trialTicker                *time.Ticker
	trialCheck                 <-chan time.Time // nil: this image has nothing to confirm
	pulseAtTakeOn              int64
}

// watch waits for h's host to end, stopping it if ctx ends and killing it if it hangs or is
// unconfirmed at the confirm deadline; meanwhile it keeps the unit's status, confirms this
// launcher, and hands the host to a newer launcher. It returns the outcome it decided, or ""
// when the host ended by itself (ended judges that).
func (l *Launcher) watch(ctx context.Context, h *hostRun) rollback.Outcome {
	w := l.newWatcher(ctx, h)
	defer w.stop()
	for {
		var out rollback.Outcome
		select {
		case <-h.p.exited:
			return ""
		case <-ctx.Done():
			return w.onStop()
		case <-w.status.C:
			l.sayRunning(ctx, h.version, h.start, &h.said)
		case <-w.liveness.C:
			out = w.onLiveness()
		case <-w.trialCheck:
			w.onTrialCheck(ctx)
		case <-w.takeover.C:
			w.onTakeover(ctx)
		case <-w.deadline:
			out = w.onDeadline(ctx)
		}
		if out != "" {
			return out
		}
	}
}

func (l *Launcher) newWatcher(ctx context.Context, h *hostRun) *watcher {
	l.sayRunning(ctx, h.version, h.start, &h.said)
	w := &watcher{l: l, h: h,
		status:        time.NewTicker(statusEvery),
		liveness:      time.NewTicker(max(l.cfg.LivenessLimit/4, 10*time.Millisecond)),
		takeover:      time.NewTicker(l.cfg.TakeoverCheck),
		pulseAtTakeOn: h.p.lastAlive.Load(),
	}
	if h.deadline >= 0 {
		w.deadlineTimer = time.NewTimer(h.deadline)
		w.deadline, w.deadlineAt = w.deadlineTimer.C, time.Now().Add(h.deadline)
	}
	// A delivered launcher confirms once it has seen this host pulse after it took the host on:
	// on trial that ends the trial; confirmed before, it clears the count of its failed ends.
	if !l.isFloor && !l.confirmedThisImage {
		w.trialTicker = time.NewTicker(max(l.pulseInterval()/2, 10*time.Millisecond))
		w.trialCheck = w.trialTicker.C
	}
	return w
}

func (w *watcher) stop() {
	w.status.Stop()
	w.liveness.Stop()
	w.takeover.Stop()
	if w.deadlineTimer != nil {
		w.deadlineTimer.Stop()
	}
	if w.trialTicker != nil {
		w.trialTicker.Stop()
	}
}

// onStop stops the host at a safe point: the launcher is being stopped.
func (w *watcher) onStop() rollback.Outcome {
	w.h.log.Info("stopping the host at a safe point")
	w.l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=stopping %s at a safe point", w.h.version))
	w.h.p.stop(w.l.cfg.StopTimeout)
	return rollback.OutcomeStopped
}

// onLiveness kills a host silent past the liveness limit. SIGSTOP, a deadlock or a host stuck
// in the kernel all look the same from here: no pulse. Killing it lets the failure policy
// judge it like a crash.
func (w *watcher) onLiveness() rollback.Outcome {
	silent, ok := w.h.p.silentFor()
	if !ok || silent <= w.l.cfg.LivenessLimit {
		return ""
	}
	w.h.log.Error("the host showed no sign of life for the liveness limit; killing it as hung", "silent", silent.Round(time.Millisecond), "limit", w.l.cfg.LivenessLimit)
	w.h.p.kill()
	return rollback.OutcomeHung
}

// onTrialCheck confirms this launcher once the host pulsed after it took the host on.
func (w *watcher) onTrialCheck(ctx context.Context) {
	l := w.l
	if w.h.p.lastAlive.Load() == w.pulseAtTakeOn {
		return
	}
	if err := l.records.ConfirmLauncher(ctx, l.self); err != nil {
		w.h.log.Error("could not confirm this launcher", "err", err)
		return
	}
	if l.trial {
		w.h.log.Info("this launcher confirmed: it runs the host and sees it pulse", "launcher", l.self)
	}
	l.trial, l.confirmedThisImage, w.trialCheck = false, true, nil
}

// onTakeover hands the host to a newer launcher by exec, if there is one; it returns only when
// the exec did not happen.
func (w *watcher) onTakeover(ctx context.Context) {
	t := w.l.takeoverTarget(ctx)
	if t == nil {
		return
	}
	h := w.h
	left := int64(-1)
	if w.deadline != nil {
		left = int64(max(time.Until(w.deadlineAt), 0))
	}
	w.l.execLauncher(ctx, t, h.p, &handedHost{PID: h.p.proc.Pid, Version: h.version, Start: h.start, Confirmed: h.confirmed, Deadline: left})
}

// onDeadline kills a host still unconfirmed at its confirm deadline.
func (w *watcher) onDeadline(ctx context.Context) rollback.Outcome {
	h := w.h
	ok, err := w.l.records.StartConfirmed(ctx, h.start)
	if err != nil {
		h.log.Error("could not read whether the host confirmed", "err", err)
	}
	if ok {
		w.deadline = nil
		w.l.sayRunning(ctx, h.version, h.start, &h.said)
		return ""
	}
	h.log.Error("the host did not confirm within the confirm deadline; killing it", "deadline", w.l.cfg.ConfirmDeadline)
	h.p.kill()
	return rollback.OutcomeDeadline
}

// ended records how h's host ended, judging an end watch did not decide (judgeExit), and
// returns it with the choice the judgement made, to start next. A stand-aside is not recorded
// but left in *pending, which the next start records with itself.
func (l *Launcher) ended(ctx context.Context, h *hostRun, outcome rollback.Outcome, pending **rollback.EndedStart) (rollback.End, *rollback.Choice, error) {
	end := rollback.End{Outcome: outcome}
	end.ExitCode, end.Signal = h.p.exitOf()
	end.At = h.p.endedAt
	end.Output = h.p.output()
	var next *rollback.Choice
	if end.Outcome == "" {
		var err error
		if end.Outcome, next, err = l.judgeExit(ctx, h.version, end); err != nil {
			return end, nil, err
		}
	}
	h.log.Info("the host ended", "outcome", end.Outcome, "exit", end.ExitCode, "signal", end.Signal)
	if end.Outcome == rollback.OutcomeStoodAside {
		*pending = &rollback.EndedStart{Start: h.start, End: end}
		return end, next, nil
	}
	return end, nil, l.records.EndStart(context.WithoutCancel(ctx), h.start, end)
}

// judgeExit is docs/design.md's "run what is on disk": a clean exit while the launcher would
// start another version is standing aside, and that choice is returned to start next; a clean
// exit while it would start this one again (also while this one waits for its maintenance
// window), or any other exit, is a failure.
func (l *Launcher) judgeExit(ctx context.Context, version string, end rollback.End) (rollback.Outcome, *rollback.Choice, error) {
	if end.ExitCode != rollback.HostExitClean {
		return rollback.OutcomeFailed, nil, nil
	}
	choice, err := l.choose(ctx)
	if err != nil {
		return "", nil, err
	}
	if choice.Version != version {
		return rollback.OutcomeStoodAside, &choice, nil
	}
	return rollback.OutcomeFailed, nil, nil
}

// afterFailure applies the failure policy to a version that has just failed. A rollback
// returns the choice it made after marking the version bad, to start next; a restart returns
// none (it waited: what is on disk may have changed).
func (l *Launcher) afterFailure(ctx context.Context, version string, end rollback.End) (*rollback.Choice, error) {
	s, err := l.records.Standing(ctx, l.cfg.Root, version, l.cfg.Policy)
	if err != nil {
		return nil, err
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
		return nil, nil
	case rollback.RollBack:
		return l.rollBack(ctx, log, version, s, end, why)
	case rollback.StopRolledBack:
		return nil, l.stopRolledBack(ctx, version, s, why)
	default:
		return nil, errFailedState{reason: fmt.Sprintf("%s failed %d %s without ever confirming (last: %s) and there is no known-good version to roll back to; fix the machine or stage a working version, then restart mesh-launcher", version, s.Failures, txt.Plural(s.Failures, "time", "times"), why)}
	}
}

// rollBack marks version bad, records the rollback to what is chosen then, and returns that
// choice.
func (l *Launcher) rollBack(ctx context.Context, log *slog.Logger, version string, s rollback.Standing, end rollback.End, why string) (*rollback.Choice, error) {
	reason := fmt.Sprintf("%s failed %d %s without confirming (last: %s)", version, s.Failures, txt.Plural(s.Failures, "time", "times"), why)
	if s.Deadline() {
		reason = fmt.Sprintf("%s did not confirm within the confirm deadline (%s), its chance to prove itself (%d %s)", version, l.cfg.ConfirmDeadline, s.Failures, txt.Plural(s.Failures, "failure", "failures"))
	}
	if err := l.records.MarkBad(ctx, version, reason); err != nil {
		return nil, err
	}
	choice, err := l.choose(ctx)
	if err != nil {
		return nil, err
	}
	if err := l.records.RecordRollback(ctx, rollback.Rollback{From: version, To: choice.Version, Reason: reason, Output: end.Output}); err != nil {
		return nil, err
	}
	log.Error("rolling back", "to", choice.Version, "reason", reason)
	// Said for a moment; the running line that follows keeps the rollback visible.
	l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=rolling back from %s to %s: %s", version, choice.Version, text(reason)))
	return &choice, nil
}

// stopRolledBack is the failed state after the version rolled back to failed too.
func (l *Launcher) stopRolledBack(ctx context.Context, version string, s rollback.Standing, why string) error {
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
