package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// Watch upgrades the fleet by build announcement (0006, "Build announcement"): it follows the
// releases bucket and starts a rollout with o (o.Version ignored) for each version announced
// that is newer than the fleet target and than every completed rollout, superseding a running
// rollout of an older version; a version that was halted or aborted, or is withdrawn, is
// skipped, saying so. While it runs it keeps the targets of its key from expiring. On
// start it resumes the current rollout if it runs and its lease has lapsed, and considers the
// newest version announced. It runs until ctx ends (then it returns nil, its rollout left
// running and released for `rollout resume`) or the bus fails in a way it cannot recover from.
func (c *Controller) Watch(ctx context.Context, o Options) error {
	probe := o
	probe.Version = "v0.0.0"
	if err := probe.Validate(); err != nil {
		return err
	}
	s, err := openStore(ctx, c.cfg.JS, c.cfg.Names, c.signer, c.log)
	if err != nil {
		return err
	}
	rel, err := openKV(ctx, c.cfg.JS, c.cfg.Names.Releases(), c.log)
	if err != nil {
		return err
	}
	w := &watcher{c: c, s: s, rel: rel, o: o, done: make(chan runResult, 1), seen: make(map[string]bool)}
	defer c.keeping()() // targets are kept while it waits for the next release, too
	defer w.stopRun()
	w.resumeCurrent(ctx)
	return w.follow(ctx)
}

type watcher struct {
	c    *Controller
	s    *store
	rel  jetstream.KeyValue
	o    Options
	run  *watchedRun
	done chan runResult
	seen map[string]bool // versions announced and already considered
}

// watchedRun is the rollout this watch is driving.
type watchedRun struct {
	id, version string
	cancel      context.CancelFunc
}

type runResult struct {
	id  string
	st  State
	err error
}

// follow reads the announcements, re-establishing the watch whenever it dies.
func (w *watcher) follow(ctx context.Context) error {
	retryResume := time.NewTimer(time.Hour)
	retryResume.Stop()
	defer retryResume.Stop()
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		back := reconnected(wctx, w.c.cfg.JS.Conn())
		kw, err := w.rel.WatchAll(wctx, jetstream.IncludeHistory())
		if err != nil {
			cancel()
			if !transient(ctx, err) && ctx.Err() == nil {
				return fmt.Errorf("watch %s: %w", w.c.cfg.Names.Releases(), err)
			}
			sleep(ctx, time.Second)
			continue
		}
		var fresh []string
		caughtUp := false
	read:
		for {
			select {
			case <-ctx.Done():
				_ = kw.Stop()
				cancel()
				return nil
			case <-back:
				break read // after a server restart the watch may be gone without a word
			case res := <-w.done:
				w.ended(ctx, res, retryResume)
			case <-retryResume.C:
				w.resumeCurrent(ctx)
			case e, ok := <-kw.Updates():
				if !ok {
					break read // the watch died with the server: establish it again
				}
				if e == nil {
					caughtUp = true
					if v := newest(w.notWithdrawn(ctx, fresh)); v != "" {
						w.emit(v, EventPublished, fmt.Sprintf("%s is the newest release published", v))
						w.consider(ctx, v)
					}
					fresh = nil
					continue
				}
				v := e.Key()
				if e.Operation() != jetstream.KeyValuePut || w.seen[v] || !wire.ValidVersion(v) {
					continue
				}
				w.seen[v] = true
				if !caughtUp {
					fresh = append(fresh, v)
					continue
				}
				w.emit(v, EventPublished, fmt.Sprintf("%s was published", v))
				w.consider(ctx, v)
			}
		}
		_ = kw.Stop()
		cancel()
		sleep(ctx, 200*time.Millisecond)
	}
	return nil
}

func newest(vs []string) string {
	best := ""
	for _, v := range vs {
		if best == "" || semver.Compare(v, best) > 0 {
			best = v
		}
	}
	return best
}

func (w *watcher) emit(version, kind, msg string) {
	w.c.emit(&State{Version: version}, Event{Kind: kind, Message: msg})
}

// consider decides whether version v is rolled out, and starts it.
func (w *watcher) consider(ctx context.Context, v string) {
	skip := func(why string) { w.emit(v, EventSkipped, fmt.Sprintf("%s is not rolled out: %s", v, why)) }
	list, err := w.withdrawals(ctx)
	if err != nil {
		w.c.log.Error("could not read the withdrawals", "err", err)
		return
	}
	if e, ok := list.Has(v); ok {
		skip("it is withdrawn (" + targets.Describe(e) + ")")
		return
	}
	fleetV, err := w.s.fleetTarget(ctx)
	if err != nil {
		w.c.log.Error("could not read the fleet target", "err", err)
		return
	}
	if fleetV != "" && semver.Compare(v, fleetV) <= 0 {
		skip(fmt.Sprintf("it is not newer than the fleet target %s", fleetV))
		return
	}
	ids, err := w.s.rolloutIDs(ctx)
	if err != nil {
		w.c.log.Error("could not list the rollouts", "err", err)
		return
	}
	for _, id := range ids {
		u := versionOfID(id)
		if !wire.ValidVersion(u) || semver.Compare(u, v) < 0 {
			continue
		}
		st, _, err := w.s.get(ctx, id)
		if err != nil {
			w.c.log.Warn("could not read a rollout", "rollout", id, "err", err)
			continue
		}
		switch {
		case u == v && (st.Status == StatusHalted || st.Status == StatusAborted):
			skip(fmt.Sprintf("rollout %s %s it; a %s version is not rolled out again", id, verb(st.Status), st.Status))
			return
		case st.Status == StatusCompleted && u == v:
			skip(fmt.Sprintf("rollout %s completed it already", id))
			return
		case st.Status == StatusCompleted:
			skip(fmt.Sprintf("the newer %s was rolled out (rollout %s)", u, id))
			return
		case st.Status == StatusRunning && w.run != nil && w.run.id == id:
			return // this watch drives it already
		case st.Status == StatusRunning && u == v:
			w.resumeCurrent(ctx)
			return
		case st.Status == StatusRunning:
			skip(fmt.Sprintf("the newer %s is being rolled out (rollout %s)", u, id))
			return
		}
	}
	w.stopRun()
	o := w.o
	o.Version, o.Supersede = v, true
	st, err := w.c.Start(ctx, o)
	if err != nil {
		if ctx.Err() == nil {
			skip("it could not start: " + err.Error())
		}
		return
	}
	if !st.Status.Final() {
		w.startRun(ctx, st.ID, st.Version)
	}
}

// withdrawals reads the withdrawal list; a bus without its bucket has withdrawn nothing.
func (w *watcher) withdrawals(ctx context.Context) (wire.Withdrawals, error) {
	var list wire.Withdrawals
	err := retry(ctx, w.c.log, "read the withdrawals", func(ctx context.Context) (err error) {
		list, _, err = targets.ReadWithdrawals(ctx, w.c.cfg.JS, w.c.cfg.Names)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return wire.Withdrawals{}, nil
	}
	return list, err
}

// notWithdrawn is vs without the versions withdrawn, so that the newest release considered on
// start is the newest one that may be rolled out; each withdrawn one is said.
func (w *watcher) notWithdrawn(ctx context.Context, vs []string) []string {
	list, err := w.withdrawals(ctx)
	if err != nil {
		w.c.log.Error("could not read the withdrawals", "err", err)
		return vs
	}
	var out, gone []string
	for _, v := range vs {
		if _, ok := list.Has(v); ok {
			gone = append(gone, v)
		} else {
			out = append(out, v)
		}
	}
	best := newest(out)
	for _, v := range gone {
		if best == "" || semver.Compare(v, best) > 0 {
			e, _ := list.Has(v)
			w.emit(v, EventSkipped, fmt.Sprintf("%s is not rolled out: it is withdrawn (%s)", v, targets.Describe(e)))
		}
	}
	return out
}

func verb(s Status) string {
	if s == StatusHalted {
		return "halted"
	}
	return "was aborted in"
}

// resumeCurrent runs the current rollout if it runs and no live controller holds it.
func (w *watcher) resumeCurrent(ctx context.Context) {
	id, _, err := w.s.current(ctx)
	if err != nil || id == "" || (w.run != nil && w.run.id == id) {
		return
	}
	st, _, err := w.s.get(ctx, id)
	if err != nil || st.Status.Final() {
		return
	}
	if ok, _ := w.c.mayTake(st.Holder, time.Now()); !ok {
		w.c.log.Info("the current rollout is held by another controller", "rollout", id, "holder", st.Holder.describe())
		return
	}
	w.startRun(ctx, st.ID, st.Version)
}

func (w *watcher) startRun(ctx context.Context, id, version string) {
	rctx, cancel := context.WithCancel(ctx)
	w.run = &watchedRun{id: id, version: version, cancel: cancel}
	go func() {
		st, err := w.c.Run(rctx, id)
		w.done <- runResult{id: id, st: st, err: err}
	}()
}

// stopRun cancels the rollout this watch drives and waits until its lease is released.
func (w *watcher) stopRun() {
	if w.run == nil {
		return
	}
	w.run.cancel()
	<-w.done
	w.run = nil
}

// ended notes that the run finished; a run that failed on the bus is resumed later.
func (w *watcher) ended(ctx context.Context, res runResult, retry *time.Timer) {
	if w.run != nil && w.run.id == res.id {
		w.run.cancel()
		w.run = nil
	}
	var held *HeldError
	switch {
	case res.err == nil, ctx.Err() != nil:
	case errors.As(res.err, &held):
		w.c.log.Info("the rollout is held by another controller", "rollout", res.id, "err", res.err)
	default:
		w.c.log.Error("the rollout stopped on an error; resuming it shortly", "rollout", res.id, "err", res.err)
		retry.Reset(5 * time.Second)
	}
}
