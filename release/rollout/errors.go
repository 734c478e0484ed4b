package rollout

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoRollout is returned when the rollouts bucket names no current rollout.
var ErrNoRollout = errors.New("no rollout has been started on this bus")

// HeldError says that another live controller holds the rollout: only it may act on it until
// its lease lapses.
type HeldError struct {
	ID     string
	Holder Holder
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("rollout %s is held by %s since %s; its lease runs until %s — it lapses then if that controller is gone",
		e.ID, e.Holder.describe(), stamp(e.Holder.Since), stamp(e.Holder.Until))
}

// RunningError refuses to start a rollout while another runs (without Supersede).
type RunningError struct{ State State }

func (e *RunningError) Error() string {
	s := e.State
	word, held := "running", "held by no controller: `mesh-release rollout resume` continues it"
	switch {
	case s.Paused(time.Now()):
		word = "paused"
		if s.Holder != nil {
			held = fmt.Sprintf("no controller since the lease of %s lapsed at %s: `mesh-release rollout resume` continues it", s.Holder.describe(), stamp(s.Holder.Until))
		}
	case s.Holder != nil:
		held = "held by " + s.Holder.describe()
	}
	return fmt.Sprintf("rollout %s of %s is %s (batch %d of %d, %s); add --supersede to replace it, or `mesh-release rollout abort`",
		s.ID, s.Version, word, min(s.Current+1, len(s.Batches)), len(s.Batches), held)
}

// NotRunningError says that the rollout asked for has ended.
type NotRunningError struct{ State State }

func (e *NotRunningError) Error() string {
	s := e.State
	return fmt.Sprintf("rollout %s of %s is %s (ended %s); nothing to resume or abort", s.ID, s.Version, s.Status, stamp(s.Ended))
}

// describe names a holder for a person: "web-01 pid 4242 (watch)".
func (h Holder) describe() string {
	if h.ID != "" {
		return text(h.ID)
	}
	return text(fmt.Sprintf("%s pid %d", h.Host, h.PID))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// errStopped ends a run whose rollout someone else ended (aborted, superseded).
type errStopped struct{ State State }

func (e *errStopped) Error() string {
	return fmt.Sprintf("rollout %s was %s", e.State.ID, e.State.Status)
}
