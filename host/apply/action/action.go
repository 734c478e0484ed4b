// Package action applies the "action" kind: a command run only when its verify command fails.
//
// Verify must pass after it. Both are argument vectors run directly, with no shell unless the
// vector names one (["/bin/sh", "-c", "…"]). Actions come only from a local bundle
// (wire.ParseTrustedDeclaration): the link refuses them, since they run anything as root.
package action

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// DefaultTimeout caps each run of a command or a verify, so a command that never returns
// cannot hold the reconcile (and with it the host's confirmation) for ever.
const DefaultTimeout = 10 * time.Minute

// Action returns the applier of the "action" kind.
func Action() apply.Applier { return applier{timeout: DefaultTimeout} }

type applier struct{ timeout time.Duration }

// Inspect runs verify: exit 0 means the action's state holds, anything else is one difference
// quoting its status and output. A verify that cannot be started is an error, not a
// difference: running the command would not fix it.
func (a applier) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	s, err := specOf(r)
	if err != nil {
		return nil, err
	}
	res, err := a.run(ctx, "verify", s.Verify)
	if err != nil {
		return nil, err
	}
	if res.ok() {
		return nil, nil
	}
	return []string{"verify failed (" + res.status() + "): " + res.output()}, nil
}

// Apply runs verify, and the command only if verify fails; then verify again, so a command
// that ran without fixing anything fails here saying so (the engine's read-back runs verify
// once more). It never creates anything the host could remove.
func (a applier) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	s, err := specOf(r)
	if err != nil {
		return false, err
	}
	before, err := a.run(ctx, "verify", s.Verify)
	if err != nil {
		return false, err
	}
	if before.ok() {
		return false, nil
	}
	res, err := a.run(ctx, "command", s.Command)
	if err != nil {
		return false, err
	}
	if !res.ok() {
		return false, fmt.Errorf("command %s failed (%s): %s", quoted(s.Command), res.status(), res.output())
	}
	after, err := a.run(ctx, "verify", s.Verify)
	if err != nil {
		return false, err
	}
	if !after.ok() {
		return false, fmt.Errorf("ran, but verify still fails (%s): %s", after.status(), after.output())
	}
	return false, nil
}

// Remove forgets: what a command did is not known, so there is nothing the host could undo.
func (applier) Remove(context.Context, apply.Owned) (string, error) {
	return "forgotten: an action has nothing to remove", nil
}

// specOf returns r's spec: the parser's when set, else decoded here (strictly, as the
// parser would) so a resource read back from the ledger without it still works.
func specOf(r wire.Resource) (*wire.ActionSpec, error) {
	var s *wire.ActionSpec
	switch p := r.Parsed.(type) {
	case *wire.ActionSpec:
		s = p
	case nil:
		s = new(wire.ActionSpec)
		if len(r.Spec) > 0 && string(r.Spec) != "null" {
			if err := wire.DecodeStrict(r.Spec, s); err != nil {
				return nil, fmt.Errorf("action spec: %w", err)
			}
		}
	default:
		return nil, fmt.Errorf("action spec: got %T, want *wire.ActionSpec", r.Parsed)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return nil, errors.New("action spec: command is empty")
	}
	if len(s.Verify) == 0 || s.Verify[0] == "" {
		return nil, errors.New("action spec: verify is empty (an action must say how to tell it is done)")
	}
	return s, nil
}

// result is how one run ended.
type result struct {
	state *exec.ExitError // nil when it exited 0
	out   *apply.Output
}

func (r result) ok() bool { return r.state == nil }

// status reads "exit 3", or "signal: killed" for a process that did not exit by itself.
func (r result) status() string {
	if r.state == nil {
		return "exit 0"
	}
	if code := r.state.ExitCode(); code >= 0 {
		return fmt.Sprintf("exit %d", code)
	}
	return r.state.ProcessState.String()
}

func (r result) output() string {
	s := r.out.String()
	if s == "" {
		return "(no output)"
	}
	return s
}

// run runs argv with no stdin, output (stdout and stderr together) kept bounded, in its own
// process group so that a timeout or a cancel kills what it started too — a shell's children
// would otherwise hold its output open and the wait with it.
func (a applier) run(parent context.Context, what string, argv []string) (result, error) {
	ctx, cancel := context.WithTimeout(parent, a.timeout)
	defer cancel()
	out := &apply.Output{}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	switch {
	case parent.Err() != nil: // the reconcile was stopped: not the command's doing
		return result{}, fmt.Errorf("%s %s: %w", what, quoted(argv), parent.Err())
	case ctx.Err() != nil:
		return result{}, fmt.Errorf("%s %s did not finish within %s, killed: %w; output: %s", what, quoted(argv), a.timeout, ctx.Err(), orNoOutput(out))
	}
	var exit *exec.ExitError
	switch {
	case err == nil, errors.Is(err, exec.ErrWaitDelay):
		// ErrWaitDelay: it exited 0 and left something running that holds its output (a
		// daemon it started); the exit status is the answer.
		return result{out: out}, nil
	case errors.As(err, &exit):
		return result{state: exit, out: out}, nil
	default:
		return result{}, fmt.Errorf("%s %s could not be run: %w", what, quoted(argv), err)
	}
}

func quoted(argv []string) string { return fmt.Sprintf("%q", text.Bound(argv[0])) }

func orNoOutput(h *apply.Output) string {
	if s := h.String(); s != "" {
		return s
	}
	return "(no output)"
}
