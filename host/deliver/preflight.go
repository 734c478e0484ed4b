package deliver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// preflight runs `BIN preflight [args…]` with MESH_HOST_ROOT=root and the host's environment
// and returns the first line of its output, which must be the binary's version. A non-zero
// exit, a hang past timeout and a binary that cannot be executed are refusals, each saying so.
// A binary that exits 0 but whose output could not be read within WaitDelay (a starved copying
// goroutine, or a child left holding stdout) passes if the version was read, and otherwise is
// a local failure, retried: that is the machine's doing, not the release's.
func (d *Deliverer) preflight(ctx context.Context, version, bin string) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.PreflightTimeout)
	defer cancel()
	args := append([]string{rollback.CmdPreflight}, d.cfg.PreflightArgs...)
	var stdout, stderr capped
	stdout.max, stderr.max = 64<<10, 4<<10
	cmd, err := d.runStaged(ctx, bin, args, d.cfg.PreflightEnv, &stdout, &stderr)
	// Checked before the context: the process had exited 0 before WaitDelay began, so a
	// deadline that passed during it does not make this a hang.
	waitDelay := errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success()
	if waitDelay {
		_ = killGroup(cmd) // whatever it left holding the pipe; the group leader is already reaped
	}
	switch {
	case waitDelay:
		first, _, _ := strings.Cut(stdout.buf.String(), "\n")
		if strings.TrimSpace(first) == version {
			return nil
		}
		return &Error{Version: version, Kind: KindLocal, Err: fmt.Errorf("`mesh-host preflight` exited 0 but its output could not be read in time (%w); a loaded machine or a process it left holding its output, not the release: retrying%s", err, stderr.tail())}
	case errors.Is(err, syscall.ENOEXEC):
		return refuse(version, KindWrongPlatform, "the staged binary cannot be executed on this machine (exec format error): it was built for another architecture or is not a program; build it for this machine's platform")
	case ctx.Err() == context.DeadlineExceeded:
		return refuse(version, KindPreflight, "`mesh-host preflight` did not finish within %s; a binary that hangs before it runs is refused%s", d.cfg.PreflightTimeout, stderr.tail())
	case err != nil && ctx.Err() != nil:
		return &Error{Version: version, Kind: KindLocal, Err: fmt.Errorf("preflight interrupted: %w", ctx.Err())}
	case err != nil:
		return refuse(version, KindPreflight, "`mesh-host preflight` failed (%v): this binary cannot run on this node as it is configured%s", err, stderr.tail())
	}
	first, _, _ := strings.Cut(stdout.buf.String(), "\n")
	if got := strings.TrimSpace(first); got != version {
		return refuse(version, KindVersionMismatch, "the binary reports version %q but its manifest says %s; it was stamped wrongly (build it with --version %s)", got, version, version)
	}
	return nil
}

// runStaged runs a binary just staged (BIN args…) in the root, with the host's environment, env
// and MESH_HOST_ROOT, its output into stdout and stderr, in its own process group, waiting at
// most 2 s for its output after it exits. A file just written may be briefly busy if another
// goroutine forked while it was open for writing (golang.org/issue/22315): that is tried again.
func (d *Deliverer) runStaged(ctx context.Context, bin string, args, env []string, stdout, stderr *capped) (*exec.Cmd, error) {
	for try := 0; ; try++ {
		stdout.buf.Reset()
		stderr.buf.Reset()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(append(os.Environ(), env...), rollback.EnvRoot+"="+d.cfg.Root)
		cmd.Dir = d.cfg.Root
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.WaitDelay = 2 * time.Second
		ownGroup(cmd)
		err := cmd.Run()
		if errors.Is(err, syscall.ETXTBSY) && try < 10 && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return cmd, err
	}
}

// capped keeps at most max bytes written to it (the first ones), discarding the rest, so a
// chatty or hostile binary cannot fill memory.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
		} else {
			c.buf.Write(p)
		}
	}
	return len(p), nil
}

func (c *capped) tail() string {
	s := strings.TrimSpace(c.buf.String())
	if s == "" {
		return ""
	}
	return "; it said: " + s
}
