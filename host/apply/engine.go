package apply

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// What a step did (Step.Action).
const (
	ActionUnchanged = "unchanged" // already in its declared state
	ActionCreated   = "created"   // did not exist; the host made it
	ActionChanged   = "changed"   // existed and differed; the host changed what differed
	ActionRemoved   = "removed"   // no longer declared; the host removed what it had created
	ActionForgotten = "forgotten" // no longer declared; left on the machine, no longer owned
	ActionKept      = "kept"      // no longer declared, but this host cannot remove it (no applier): still owned
	ActionFailed    = "failed"    // the step failed; the apply stopped here
	// ActionAdopted is a rescue's (Engine.Adopt): found in its declared state, not owned, and
	// now owned as it is, the machine untouched (only the host's own record of it written).
	ActionAdopted = "adopted"
)

// Unrecorded begins a difference that is only the host's own record missing (an archive
// extracted as declared with no record of what it placed): applying it writes the record and
// changes nothing on the machine, so a rescue counts it adopted.
const Unrecorded = "unrecorded:"

// Missing begins the difference an applier reports for a thing that does not exist at all
// ("absent", or "missing: …"); `owned` reads it as "missing", not "differs".
const (
	Missing = "missing"
	Absent  = "absent" // host/apply/files' word
)

// ErrStopped ends an apply between steps when the caller asked it to stop.
var ErrStopped = errors.New("stopped between steps")

// Bounds of what an apply reports: every text in it comes from a declaration or the machine.
const (
	maxDiffs       = 10   // differences kept per step
	maxDiffBytes   = 256  // each difference
	maxErrorBytes  = 768  // a step's error, id included
	maxReportSteps = 1000 // steps listed; the counts cover every step
	maxIDBytes     = 256  // a resource id quoted in an error
)

// Engine applies declarations through the appliers, keeping what it owns in the Ledger. The
// host's reconcile and `mesh-host apply` use the same Engine: one behaviour, two sources.
type Engine struct {
	Appliers Appliers
	Ledger   Ledger
	Guard    Guard        // checks every path a resource names before anything changes it
	Log      *slog.Logger // nil: silent
	Pulse    func()       // called between steps (the launcher's liveness pipe); nil: none
	// Adopt marks a rescue (docs/decisions/0048): a resource found in its declared state that
	// the ledger does not own is reported ActionAdopted rather than ActionUnchanged.
	Adopt bool
}

// Step is what happened to one resource.
type Step struct {
	Type   string   `json:"type"`
	ID     string   `json:"id"`
	Action string   `json:"action"`
	Diffs  []string `json:"diffs,omitempty"` // what differed before the step, bounded
	Note   string   `json:"note,omitempty"`  // why forgotten or kept; "drifted" for a drift put back
	Error  string   `json:"error,omitempty"` // why the step failed, bounded
}

// Report is what an apply (or plan) did, step by step, with its counts by action. Steps lists
// at most the first maxReportSteps; Counts counts every step.
type Report struct {
	Steps    []Step         `json:"steps"`
	Counts   map[string]int `json:"counts"`
	Drifted  []wire.Drifted `json:"drifted"`
	Complete bool           `json:"complete"` // every declared resource applied, and removals ran
}

// Changed is how many steps changed the machine (or, for a plan, would): 0 is "nothing changed".
func (r Report) Changed() int {
	return r.Counts[ActionCreated] + r.Counts[ActionChanged] + r.Counts[ActionRemoved] + r.Counts[ActionForgotten]
}

func (r *Report) add(s Step) {
	if r.Counts == nil {
		r.Counts = map[string]int{}
	}
	r.Counts[s.Action]++
	if len(r.Steps) < maxReportSteps {
		r.Steps = append(r.Steps, s)
	}
}

// Observed is an owned resource as the machine shows it now.
type Observed struct {
	Type      string    `json:"type"`
	ID        string    `json:"id"`
	Created   bool      `json:"created"`
	Seq       int64     `json:"seq"`
	AppliedAt time.Time `json:"applied_at"`
	State     string    `json:"state"` // StateInState, StateDiffers, StateMissing or StateUnknown
	Diffs     []string  `json:"diffs,omitempty"`
	Error     string    `json:"error,omitempty"` // why the state is unknown
}

// What Observe found of an owned resource.
const (
	StateInState = "in state" // present and as last applied
	StateDiffers = "differs"  // present, but differs from what was applied (Diffs say how)
	StateMissing = "missing"  // gone from the machine
	StateUnknown = "unknown"  // could not be read (Error says why)
)

type key struct{ typ, id string }

// Apply makes the machine match d: each resource in order (inspect; if it differs, apply, then
// inspect again as the read-back, and record it only once that passed), then — only when every
// resource applied — removes in reverse order of first application what the host owns and d no
// longer declares. A run of consecutive resources whose applier batches them (BatchApplier) goes
// through the same steps a phase at a time — all inspected, applied in one batch, read back,
// recorded in one transaction (batch.go). A failed step stops the apply there and the error names the resource; steps
// before it stay recorded. An owned resource found differing from the very spec it was applied
// with has drifted: it is put back and reported in Report.Drifted. stop is checked between
// steps (ErrStopped).
func (e *Engine) Apply(ctx context.Context, d wire.Declaration, stop <-chan struct{}) (Report, error) {
	var rep Report
	owned, byKey, err := e.owned(ctx)
	if err != nil {
		return rep, err
	}
	declared := make(map[key]bool, len(d.Resources))
	for _, r := range d.Resources {
		declared[key{r.Type, r.ID}] = true
	}
	for i := 0; i < len(d.Resources); {
		if stopped(stop) {
			return rep, ErrStopped
		}
		e.pulse()
		// A run of resources whose applier batches them shares its durability (batch.go).
		n, failed, err := e.runLength(d.Resources[i:]), 0, error(nil)
		if n > 1 {
			failed, err = e.applyRun(ctx, &rep, d.Resources[i:i+n], byKey)
		} else {
			err = e.applyOne(ctx, &rep, d.Resources[i], byKey)
		}
		if err != nil {
			r := d.Resources[i+failed]
			return rep, &stepError{text: cut(fmt.Sprintf("resources[%d] %s %q: %v", i+failed, r.Type, cut(r.ID, maxIDBytes), err), maxErrorBytes), err: err}
		}
		i += n
	}
	for i := len(owned) - 1; i >= 0; i-- {
		o := owned[i]
		if declared[key{o.Type, o.ID}] {
			continue
		}
		if stopped(stop) {
			return rep, ErrStopped
		}
		e.pulse()
		if err := e.removeOne(ctx, &rep, o); err != nil {
			return rep, &stepError{text: cut(fmt.Sprintf("%s %q (no longer declared): %v", o.Type, cut(o.ID, maxIDBytes), err), maxErrorBytes), err: err}
		}
	}
	rep.Complete = true
	return rep, nil
}

// applyOne brings one resource to its declared state; an error fails the step (and the apply).
func (e *Engine) applyOne(ctx context.Context, rep *Report, r wire.Resource, byKey map[key]Owned) (err error) {
	step := Step{Type: r.Type, ID: r.ID}
	var drift *wire.Drifted
	defer func() {
		if err != nil {
			step.Action, step.Error = ActionFailed, cut(err.Error(), maxErrorBytes)
			e.log().Warn("step failed", "type", r.Type, "id", text.Bound(r.ID), "err", step.Error)
		}
		rep.add(step)
		if drift != nil {
			drift.Restored = err == nil
			rep.Drifted = append(rep.Drifted, *drift)
		}
	}()
	a, err := e.prepare(&r)
	if err != nil {
		return err
	}
	diffs, err := a.Inspect(ctx, r)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	o, wasOwned := byKey[key{r.Type, r.ID}]
	same := wasOwned && sameSpec(o.Spec, r.Spec)
	if len(diffs) == 0 {
		step.Action = e.unchanged(wasOwned)
		if same {
			return nil // owned as it is: nothing to write, which keeps the drift check cheap
		}
		// In state but not yet owned with this spec (it was there before, or the spec changed
		// only in words): own it now. A thing the host finds already there it did not create.
		if err := e.Ledger.Record(ctx, r, false, time.Now()); err != nil {
			return fmt.Errorf("record: %w", err)
		}
		return nil
	}
	step.Diffs = boundDiffs(diffs)
	if same {
		step.Note = "drifted"
		drift = &wire.Drifted{Type: r.Type, ID: r.ID, What: cut(strings.Join(diffs, "; "), wire.MaxDriftWhatBytes), At: time.Now().UTC()}
	}
	if err := e.guard(r); err != nil {
		return err
	}
	created, err := a.Apply(ctx, r)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	after, err := a.Inspect(ctx, r)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if len(after) > 0 {
		return fmt.Errorf("read back: still differs: %s", strings.Join(boundDiffs(after), "; "))
	}
	if err := e.Ledger.Record(ctx, r, created, time.Now()); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	step.Action = ActionChanged
	switch {
	case created:
		step.Action = ActionCreated
	case e.Adopt && !wasOwned && onlyUnrecorded(diffs):
		step.Action = ActionAdopted
	}
	e.log().Info("applied", "type", r.Type, "id", text.Bound(r.ID), "action", step.Action, "drifted", drift != nil, "diffs", step.Diffs)
	return nil
}

// removeOne removes (or forgets) one owned resource that is no longer declared.
func (e *Engine) removeOne(ctx context.Context, rep *Report, o Owned) (err error) {
	step := Step{Type: o.Type, ID: o.ID}
	defer func() {
		if err != nil {
			step.Action, step.Error = ActionFailed, cut(err.Error(), maxErrorBytes)
			e.log().Warn("removal failed", "type", o.Type, "id", text.Bound(o.ID), "err", step.Error)
		}
		rep.add(step)
	}()
	a := e.Appliers[o.Type]
	switch {
	case a == nil:
		step.Action, step.Note = ActionKept, fmt.Sprintf("no longer declared, but this host has no applier for %q resources: kept as owned, not removed", o.Type)
		e.log().Warn("kept an owned resource it cannot remove", "type", o.Type, "id", text.Bound(o.ID))
		return nil
	case !parse(&o):
		step.Action, step.Note = ActionKept, "no longer declared, but the spec it was applied with no longer parses: kept as owned, not removed"
		return nil
	}
	if err := e.guard(o.Resource()); err != nil {
		return err
	}
	said, err := a.Remove(ctx, o)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	step.Action = ActionRemoved
	if strings.HasPrefix(said, ActionForgotten) {
		step.Action = ActionForgotten
	}
	if said != ActionRemoved {
		step.Note = cut(said, maxDiffBytes)
	}
	if err := e.Ledger.Drop(ctx, o.Type, o.ID); err != nil {
		return fmt.Errorf("%s, but could not drop it from the ledger: %w", step.Action, err)
	}
	e.log().Info("no longer declared", "type", o.Type, "id", text.Bound(o.ID), "action", step.Action, "note", step.Note)
	return nil
}

// Plan says what Apply would do with d, changing nothing: each resource inspected (a step that
// cannot be inspected is reported failed and the plan goes on), then what would be removed or
// forgotten. An owned resource that would be put back is noted "drifted".
func (e *Engine) Plan(ctx context.Context, d wire.Declaration) (Report, error) {
	var rep Report
	owned, byKey, err := e.owned(ctx)
	if err != nil {
		return rep, err
	}
	declared := make(map[key]bool, len(d.Resources))
	for _, r := range d.Resources {
		declared[key{r.Type, r.ID}] = true
		step := Step{Type: r.Type, ID: r.ID}
		a, err := e.prepare(&r)
		var diffs []string
		if err == nil {
			if diffs, err = a.Inspect(ctx, r); err != nil {
				err = fmt.Errorf("inspect: %w", err)
			}
		}
		switch o, wasOwned := byKey[key{r.Type, r.ID}]; {
		case err != nil:
			step.Action, step.Error = ActionFailed, cut(err.Error(), maxErrorBytes)
		case len(diffs) == 0:
			step.Action = e.unchanged(wasOwned)
		case e.Adopt && !wasOwned && onlyUnrecorded(diffs):
			step.Action, step.Diffs = ActionAdopted, boundDiffs(diffs)
		default:
			step.Action, step.Diffs = ActionChanged, boundDiffs(diffs)
			if wasOwned && sameSpec(o.Spec, r.Spec) {
				step.Note = "drifted"
			}
		}
		rep.add(step)
	}
	for i := len(owned) - 1; i >= 0; i-- {
		o := owned[i]
		if declared[key{o.Type, o.ID}] {
			continue
		}
		step := Step{Type: o.Type, ID: o.ID}
		switch {
		case e.Appliers[o.Type] == nil || !parse(&o):
			step.Action, step.Note = ActionKept, "no longer declared, but this host cannot remove it: kept as owned"
		case o.Type == wire.KindPackage:
			// The package applier never uninstalls: the host cannot know what else needs it.
			step.Action, step.Note = ActionForgotten, "forgotten: packages are never uninstalled"
		case o.Created:
			step.Action = ActionRemoved
		default:
			step.Action, step.Note = ActionForgotten, "forgotten: the host did not create it, so it is left as it is"
		}
		rep.add(step)
	}
	rep.Complete = rep.Counts[ActionFailed] == 0
	return rep, nil
}

// Observe inspects every resource the host owns, now: what `mesh-host owned` shows is the
// machine, not the ledger's memory of it.
func (e *Engine) Observe(ctx context.Context) ([]Observed, error) {
	owned, _, err := e.owned(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Observed, 0, len(owned))
	for _, o := range owned {
		ob := Observed{Type: o.Type, ID: o.ID, Created: o.Created, Seq: o.Seq, AppliedAt: o.AppliedAt}
		r := o.Resource()
		a, err := e.prepare(&r)
		var diffs []string
		if err == nil {
			diffs, err = a.Inspect(ctx, r)
		}
		switch {
		case err != nil:
			ob.State, ob.Error = StateUnknown, cut(err.Error(), maxErrorBytes)
		case len(diffs) == 0:
			ob.State = StateInState
		case strings.HasPrefix(diffs[0], Missing) || strings.HasPrefix(diffs[0], Absent):
			ob.State, ob.Diffs = StateMissing, boundDiffs(diffs)
		default:
			ob.State, ob.Diffs = StateDiffers, boundDiffs(diffs)
		}
		out = append(out, ob)
	}
	return out, nil
}

// unchanged is the action of a resource found in its declared state: adopted, in a rescue, when
// the ledger did not own it.
func (e *Engine) unchanged(owned bool) string {
	if e.Adopt && !owned {
		return ActionAdopted
	}
	return ActionUnchanged
}

// onlyUnrecorded says every difference is the host's own record missing (Unrecorded).
func onlyUnrecorded(diffs []string) bool {
	for _, d := range diffs {
		if !strings.HasPrefix(d, Unrecorded) {
			return false
		}
	}
	return len(diffs) > 0
}

// prepare finds r's applier and parses its spec when the caller did not.
func (e *Engine) prepare(r *wire.Resource) (Applier, error) {
	a := e.Appliers[r.Type]
	if a == nil {
		return nil, fmt.Errorf("this host has no applier for %q resources", r.Type)
	}
	if r.Parsed == nil {
		p, err := ParseSpec(r.Type, r.ID, r.Spec)
		if err != nil {
			return nil, err
		}
		r.Parsed = p
	}
	return a, nil
}

// guard checks every path r names against the Guard, just before it is changed: a symlink
// placed since the declaration was parsed may now lead into the host's root. (The appliers
// check again at the moment they write, and the file appliers when they read: a path that leads
// into the root is refused, not inspected.)
func (e *Engine) guard(r wire.Resource) error {
	for _, p := range specPaths(r) {
		if err := e.Guard.Check(p); err != nil {
			return fmt.Errorf("refused: %w", err)
		}
	}
	return nil
}

// unparsedLedger is a Ledger that can also list what it owns without parsing the specs: the
// drift check needs only the raw spec of what is still declared (compared as bytes), so the
// engine parses just what it removes or observes.
type unparsedLedger interface {
	OwnedUnparsed(ctx context.Context) ([]Owned, error)
}

// parse sets o.Parsed from its recorded spec when the ledger left it unparsed; false when the
// spec no longer parses.
func parse(o *Owned) bool {
	if o.Parsed == nil {
		o.Parsed, _ = ParseSpec(o.Type, o.ID, o.Spec)
	}
	return o.Parsed != nil
}

// owned reads the ledger, in order of first application, and indexes it.
func (e *Engine) owned(ctx context.Context) ([]Owned, map[key]Owned, error) {
	list := e.Ledger.Owned
	if u, ok := e.Ledger.(unparsedLedger); ok {
		list = u.OwnedUnparsed
	}
	owned, err := list(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("read what the host owns: %w", err)
	}
	byKey := make(map[key]Owned, len(owned))
	for _, o := range owned {
		byKey[key{o.Type, o.ID}] = o
	}
	return owned, byKey, nil
}

func (e *Engine) pulse() {
	if e.Pulse != nil {
		e.Pulse()
	}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func (e *Engine) log() *slog.Logger {
	if e.Log == nil {
		return discard
	}
	return e.Log
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// stepError is a failed step's error: its text bounded (it quotes the declaration and the
// machine), the applier's error still reachable with errors.Is/As.
type stepError struct {
	text string
	err  error
}

func (e *stepError) Error() string { return e.text }
func (e *stepError) Unwrap() error { return e.err }

// boundDiffs keeps the first maxDiffs differences, each cut to maxDiffBytes.
func boundDiffs(diffs []string) []string {
	out := make([]string, 0, min(len(diffs), maxDiffs+1))
	for i, d := range diffs {
		if i == maxDiffs {
			out = append(out, fmt.Sprintf("and %d more", len(diffs)-maxDiffs))
			break
		}
		out = append(out, cut(d, maxDiffBytes))
	}
	return out
}

// cut bounds s to max bytes on a character boundary, marking the cut.
func cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const mark = "…"
	n := max - len(mark)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + mark
}
