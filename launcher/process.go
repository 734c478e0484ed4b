package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// tailLines is how many of the host's last stderr lines a start's record keeps.
const tailLines = 20

// hostProcess is one running host.
type hostProcess struct {
	cmd     *exec.Cmd
	tail    *tail
	copied  chan struct{} // closed when the stderr pipe reached EOF
	exited  chan struct{} // closed when Wait returned
	waitErr error
	started time.Time
	endedAt time.Time // when Wait returned: the moment the stand-aside gap is measured from
}

// startHost starts versions/<v>/mesh-host run with the launcher's environment, less systemd's
// notification variables (only the launcher may notify), plus the root, version and start id.
// The host dies with the launcher (Pdeathsig), so killing the launcher never leaves it behind.
func (l *Launcher) startHost(version string, start int64) (*hostProcess, error) {
	cmd := exec.Command(rollback.BinaryPath(l.cfg.Root, version), "run")
	cmd.Env = append(hostEnv(os.Environ()),
		"MESH_HOST_ROOT="+l.cfg.Root,
		"MESH_HOST_VERSION="+version,
		"MESH_HOST_START_ID="+strconv.FormatInt(start, 10),
	)
	cmd.Stdout = l.cfg.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for the host's stderr: %w", err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	started := time.Now()
	pw.Close()
	p := &hostProcess{cmd: cmd, tail: &tail{max: tailLines}, copied: make(chan struct{}), exited: make(chan struct{}), started: started}
	go func() {
		defer close(p.copied)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			// Redacted here, for the journal and the records alike, so a host of any version
			// that prints a bus URL with its password leaves the password nowhere.
			line := rollback.Redact(sc.Text())
			fmt.Fprintln(l.cfg.Stderr, line)
			p.tail.add(line)
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		p.endedAt = time.Now()
		close(p.exited)
	}()
	return p, nil
}

// output waits briefly for the stderr copy to finish and returns the last lines. A grandchild
// holding the pipe open must not hold up the judgement, hence the bound.
func (p *hostProcess) output() string {
	select {
	case <-p.copied:
	case <-time.After(200 * time.Millisecond):
	}
	return p.tail.String()
}

// stop asks the host to stop at a safe point (SIGTERM) and kills it after timeout.
func (p *hostProcess) stop(timeout time.Duration) {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// exitOf describes how the process ended: exit code, or -1 and the signal's name.
func (p *hostProcess) exitOf() (code int, signal string) {
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		return -1, p.waitErr.Error()
	}
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return p.cmd.ProcessState.ExitCode(), ""
}

func hostEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
			"MESH_HOST_ROOT", "MESH_HOST_VERSION", "MESH_HOST_START_ID":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// tail keeps the last max lines written.
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(line) > 512 {
		line = strings.ToValidUTF8(line[:512], "") + "…"
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, "\n")
}
