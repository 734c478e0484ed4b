package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/novox/mesh-host/release/rollout"
)

// Controller is one `mesh-release …` run as a child process in the background — a rollout
// controller (`rollout start|resume|watch`) as an operator would leave it running — with its
// output read as it comes: every line kept, and lines that are rollout events (--json) decoded.
type Controller struct {
	Args []string // after the program name
	// OnLine, if set before Start, is called with each line of output as it comes (stdout and
	// stderr alike), from the goroutine reading it.
	OnLine func(line string)
	// Env is more environment (KEY=VALUE) for the process, after the test's own: the bus's
	// credentials and CA (MESH_NATS_CREDS, MESH_NATS_CA) when it is a cluster of stock servers.
	Env []string

	bin string

	mu      sync.Mutex
	cmd     *exec.Cmd
	lines   []string
	events  []rollout.Event
	changed chan struct{} // closed and replaced on every new line and at exit
	done    chan struct{}
	code    int
}

// NewController prepares `bin args…`; Start runs it.
func NewController(bin string, args ...string) *Controller {
	return &Controller{bin: bin, Args: args, changed: make(chan struct{})}
}

// Start starts the process.
func (c *Controller) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return fmt.Errorf("mesh-release %s: already started", strings.Join(c.Args, " "))
	}
	cmd := exec.Command(c.bin, c.Args...)
	cmd.Env = append(os.Environ(), c.Env...)
	out, errOut := &lineWriter{line: c.add}, &lineWriter{line: c.add}
	cmd.Stdout, cmd.Stderr = out, errOut
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mesh-release %s: %w", strings.Join(c.Args, " "), err)
	}
	c.cmd, c.done = cmd, make(chan struct{})
	go func() {
		cmd.Wait()
		out.flush()
		errOut.flush()
		c.mu.Lock()
		c.code = cmd.ProcessState.ExitCode()
		close(c.done)
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}()
	return nil
}

func (c *Controller) add(line string) {
	if c.OnLine != nil {
		c.OnLine(line)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, line)
	var e rollout.Event
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &e) == nil && e.Kind != "" {
		c.events = append(c.events, e)
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// PID is the process's pid (0 before Start).
func (c *Controller) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Lines is every line of output so far.
func (c *Controller) Lines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

// Output is every line of output so far, as text.
func (c *Controller) Output() string { return strings.Join(c.Lines(), "\n") }

// Events is every rollout event printed so far (with --json), in order.
func (c *Controller) Events() []rollout.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]rollout.Event(nil), c.events...)
}

// WaitEvent waits for an event, printed at any time (already, or from now on), that satisfies
// ok. It fails if the process exits without printing one.
func (c *Controller) WaitEvent(ctx context.Context, what string, ok func(rollout.Event) bool) (rollout.Event, error) {
	seen := 0
	for {
		c.mu.Lock()
		events, changed, done := c.events[seen:], c.changed, c.done
		seen = len(c.events)
		c.mu.Unlock()
		for _, e := range events {
			if ok(e) {
				return e, nil
			}
		}
		if done == nil {
			return rollout.Event{}, fmt.Errorf("mesh-release %s: not started", strings.Join(c.Args, " "))
		}
		select {
		case <-done:
			c.mu.Lock()
			rest := c.events[seen:]
			c.mu.Unlock()
			for _, e := range rest {
				if ok(e) {
					return e, nil
				}
			}
			return rollout.Event{}, fmt.Errorf("mesh-release %s exited (%d) without an event with %s; it printed:\n%s",
				strings.Join(c.Args, " "), c.exitCode(), what, c.tail(40))
		case <-changed:
		case <-ctx.Done():
			return rollout.Event{}, fmt.Errorf("waiting for an event with %s: %w; mesh-release printed:\n%s", what, ctx.Err(), c.tail(40))
		}
	}
}

// WaitLine waits for a line of output, printed at any time, that contains text.
func (c *Controller) WaitLine(ctx context.Context, text string) (string, error) {
	seen := 0
	for {
		c.mu.Lock()
		lines, changed, done := c.lines[seen:], c.changed, c.done
		seen = len(c.lines)
		c.mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, text) {
				return l, nil
			}
		}
		select {
		case <-done:
			c.mu.Lock()
			more := len(c.lines) > seen
			c.mu.Unlock()
			if more {
				continue // lines printed just before it exited
			}
			return "", fmt.Errorf("mesh-release %s exited (%d) without printing %q; it printed:\n%s", strings.Join(c.Args, " "), c.exitCode(), text, c.tail(40))
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for mesh-release to print %q: %w; it printed:\n%s", text, ctx.Err(), c.tail(40))
		}
	}
}

func (c *Controller) exitCode() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code
}

func (c *Controller) tail(n int) string {
	lines := c.Lines()
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// CPU is the user and system CPU time the process used, once it has exited (from wait4's
// rusage: /proc/<pid> is gone once the process is reaped).
func (c *Controller) CPU() (time.Duration, bool) {
	if exited, _ := c.Exited(); !exited {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd.ProcessState.UserTime() + c.cmd.ProcessState.SystemTime(), true
}

// Signal sends sig to the process.
func (c *Controller) Signal(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return fmt.Errorf("mesh-release %s: not started", strings.Join(c.Args, " "))
	}
	return c.cmd.Process.Signal(sig)
}

// Wait waits for the process to exit and returns its exit status (-1 when a signal ended it).
func (c *Controller) Wait(ctx context.Context) (int, error) {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done == nil {
		return 0, fmt.Errorf("mesh-release %s: not started", strings.Join(c.Args, " "))
	}
	select {
	case <-done:
		return c.exitCode(), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("mesh-release %s did not exit: %w; it printed:\n%s", strings.Join(c.Args, " "), ctx.Err(), c.tail(40))
	}
}

// Exited reports whether the process has exited, and its status.
func (c *Controller) Exited() (bool, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		return false, 0
	}
	select {
	case <-c.done:
		return true, c.code
	default:
		return false, 0
	}
}

// Stop sends SIGTERM and waits for the process to exit.
func (c *Controller) Stop(ctx context.Context) (int, error) {
	if exited, code := c.Exited(); exited {
		return code, nil
	}
	if err := c.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	return c.Wait(ctx)
}

// Kill sends SIGKILL (the controller gets no chance to write anything) and waits for it to go.
func (c *Controller) Kill(ctx context.Context) error {
	if exited, _ := c.Exited(); exited {
		return nil
	}
	if err := c.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	_, err := c.Wait(ctx)
	return err
}

// lineWriter cuts what a process writes into lines.
type lineWriter struct {
	line func(string)
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		i := bytes.IndexByte(w.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		line := string(w.buf.Next(i + 1))
		w.line(strings.TrimRight(line, "\r\n"))
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() > 0 {
		w.line(w.buf.String())
		w.buf.Reset()
	}
}
