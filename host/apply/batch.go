package apply

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// maxBatch bounds a run applied at once: its temp files are open together until synced.
const maxBatch = 256

// runLength is how many resources from rs[0] on the engine applies as one run: consecutive
// resources of rs[0]'s kind when its applier is a BatchApplier, naming no path twice, at most
// maxBatch; 1 when rs[0] is applied alone.
func (e *Engine) runLength(rs []wire.Resource) int {
	if _, ok := e.Appliers[rs[0].Type].(BatchApplier); !ok {
		return 1
	}
	paths := map[string]bool{}
	n := 0
	for n < len(rs) && n < maxBatch && rs[n].Type == rs[0].Type {
		r := rs[n]
		if r.Parsed == nil {
			if _, err := e.prepare(&r); err != nil {
				break // applied alone, where its error is a step's
			}
		}
		ps := specPaths(r)
		for _, p := range ps {
			if paths[p] {
				return max(n, 1)
			}
		}
		for _, p := range ps {
			paths[p] = true
		}
		n++
	}
	return max(n, 1)
}

// runStep is one resource of a run on its way: what its inspection found and what is left to do.
type runStep struct {
	r      wire.Resource
	a      Applier
	step   Step
	drift  *wire.Drifted
	apply  bool // it differs: the batch applies it
	record bool // it is recorded once the run is durable (applied, or in state but not owned so)
}

// applyRun applies a run of resources of one BatchApplier's kind as applyOne would each, in
// four phases: inspect each (stopping at the first that cannot be), apply those that differ
// in one batch, read each back, and record them all in one transaction — only after the batch
// returned, so what is recorded is durable. It returns the index in rs of the step that failed
// with its error (the apply stops there; the steps before it stand, as applyOne's would).
func (e *Engine) applyRun(ctx context.Context, rep *Report, rs []wire.Resource, byKey map[key]Owned) (int, error) {
	steps := make([]runStep, 0, len(rs))
	fail, failErr := -1, error(nil)
	for i := range rs {
		e.pulse()
		s, err := e.inspectForRun(ctx, rs[i], byKey)
		steps = append(steps, s)
		if err != nil {
			fail, failErr = i, err
			break
		}
	}
	end := len(steps)
	if fail >= 0 {
		end = fail
	}
	if f, err := e.batchApply(ctx, steps[:end]); err != nil {
		end, fail, failErr = f, f, err
	}
	if f, err := e.readBack(ctx, steps[:end]); err != nil {
		end, fail, failErr = f, f, err
	}
	if f, err := e.recordRun(ctx, steps[:end]); err != nil {
		end, fail, failErr = f, f, err
	}
	for i := range steps[:end] {
		e.finishRunStep(rep, &steps[i], nil)
	}
	if fail >= 0 {
		e.finishRunStep(rep, &steps[fail], failErr)
	}
	return fail, failErr
}

// inspectForRun is applyOne up to the change: prepare, inspect, compare with what is owned,
// and check the paths with the guard.
func (e *Engine) inspectForRun(ctx context.Context, r wire.Resource, byKey map[key]Owned) (runStep, error) {
	s := runStep{r: r, step: Step{Type: r.Type, ID: r.ID}}
	a, err := e.prepare(&s.r)
	if err != nil {
		return s, err
	}
	s.a = a
	diffs, err := a.Inspect(ctx, s.r)
	if err != nil {
		return s, fmt.Errorf("inspect: %w", err)
	}
	o, wasOwned := byKey[key{r.Type, r.ID}]
	same := wasOwned && sameSpec(o.Spec, r.Spec)
	if len(diffs) == 0 {
		s.step.Action = e.unchanged(wasOwned)
		s.record = !same
		return s, nil
	}
	s.step.Diffs = boundDiffs(diffs)
	if same {
		s.step.Note = "drifted"
		s.drift = &wire.Drifted{Type: r.Type, ID: r.ID, What: cut(strings.Join(diffs, "; "), wire.MaxDriftWhatBytes), At: time.Now().UTC()}
	}
	if err := e.guard(s.r); err != nil {
		return s, err
	}
	s.apply, s.record = true, true
	return s, nil
}

// batchApply applies, in one batch, the steps that differ. On error it returns the index of
// the step that failed: those before it are in place and durable.
func (e *Engine) batchApply(ctx context.Context, steps []runStep) (int, error) {
	var batch []wire.Resource
	var at []int // steps' index of each in batch
	for i, s := range steps {
		if s.apply {
			batch, at = append(batch, s.r), append(at, i)
		}
	}
	if len(batch) == 0 {
		return 0, nil
	}
	created, err := steps[at[0]].a.(BatchApplier).ApplyBatch(ctx, batch)
	for k, c := range created {
		steps[at[k]].step.Action = ActionChanged
		if c {
			steps[at[k]].step.Action = ActionCreated
		}
	}
	if err != nil {
		return at[min(len(created), len(at)-1)], fmt.Errorf("apply: %w", err)
	}
	return 0, nil
}

// readBack inspects again each step applied; a difference left fails that step.
func (e *Engine) readBack(ctx context.Context, steps []runStep) (int, error) {
	for i, s := range steps {
		if !s.apply {
			continue
		}
		after, err := s.a.Inspect(ctx, s.r)
		if err != nil {
			return i, fmt.Errorf("read back: %w", err)
		}
		if len(after) > 0 {
			return i, fmt.Errorf("read back: still differs: %s", strings.Join(boundDiffs(after), "; "))
		}
	}
	return 0, nil
}

// recordRun records every step to be recorded, in order, in one transaction when the ledger
// can (BatchLedger). On error it returns the index of the first step not recorded.
func (e *Engine) recordRun(ctx context.Context, steps []runStep) (int, error) {
	now := time.Now()
	var all []Applied
	var at []int
	for i, s := range steps {
		if s.record {
			all, at = append(all, Applied{Resource: s.r, Created: s.step.Action == ActionCreated, At: now}), append(at, i)
		}
	}
	if len(all) == 0 {
		return 0, nil
	}
	if bl, ok := e.Ledger.(BatchLedger); ok {
		if err := bl.RecordAll(ctx, all); err != nil {
			return at[0], fmt.Errorf("record: %w", err)
		}
		return 0, nil
	}
	for k, a := range all {
		if err := e.Ledger.Record(ctx, a.Resource, a.Created, a.At); err != nil {
			return at[k], fmt.Errorf("record: %w", err)
		}
	}
	return 0, nil
}

// finishRunStep adds a step of a run to the report, as applyOne's deferred end does.
func (e *Engine) finishRunStep(rep *Report, s *runStep, err error) {
	if err != nil {
		s.step.Action, s.step.Error = ActionFailed, cut(err.Error(), maxErrorBytes)
		e.log().Warn("step failed", "type", s.r.Type, "id", text.Bound(s.r.ID), "err", s.step.Error)
	} else if s.apply {
		e.log().Info("applied", "type", s.r.Type, "id", text.Bound(s.r.ID), "action", s.step.Action, "drifted", s.drift != nil, "diffs", s.step.Diffs)
	}
	rep.add(s.step)
	if s.drift != nil {
		s.drift.Restored = err == nil
		rep.Drifted = append(rep.Drifted, *s.drift)
	}
}
