package rollout

import "errors"

// ErrNoRollout is returned when the rollouts bucket names no current rollout.
var ErrNoRollout = errors.New("no rollout has been started on this bus")

// HeldError says that another live controller holds the rollout.
type HeldError struct {
	ID     string
	Holder Holder
}

func (e *HeldError) Error() string { return "not implemented yet" }

// RunningError refuses to start a rollout while another runs (without Supersede).
type RunningError struct{ State State }

func (e *RunningError) Error() string { return "not implemented yet" }

// NotRunningError says that the rollout asked for has ended.
type NotRunningError struct{ State State }

func (e *NotRunningError) Error() string { return "not implemented yet" }
