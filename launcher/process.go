package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

const (
	// tailLines is how many of the host's last stderr lines a start's record keeps.
	tailLines = 20
	// maxLine is the longest host output line relayed; the rest of a line is cut, with a
	// marker saying how much (journald splits lines past 48 KiB anyway).
	maxLine = 16 << 10
	// relayQueue is how many lines may wait for a slow log before lines are dropped; the
	// host is never held up by the log.
	relayQueue = 1024
	// aliveFD is the descriptor the host's liveness pipe is given as (ExtraFiles[0]).
	aliveFD = rollback.AliveFD
)

// hostProcess is one running host.
type hostProcess struct {
	cmd     *exec.Cmd
	tail    *tail
	copied  chan struct{} // closed when the stderr pipe reached EOF
	exited  chan struct{} // closed when Wait returned
	waitErr error
	started time.Time
	endedAt time.Time // when Wait returned: the moment the stand-aside gap is measured from

	// lastAlive is when the host last showed a sign of life on its pipe, as nanoseconds of
	// the monotonic clock since started; -1 until its first one. A host that never writes to
	// the pipe (one older than the pipe) is not judged by it.
	lastAlive atomic.Int64
}

// startHost starts versions/<v>/mesh-host run with the launcher's environment, less systemd's
// notification variables (only the launcher may notify), plus the root, version and start id,
// and the write end of a pipe the host shows it is alive on. The host dies with the launcher
// (Pdeathsig), so killing the launcher never leaves it behind.
func (l *Launcher) startHost(version string, start int64) (*hostProcess, error) {
	attr, err := diesWithLauncher()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(rollback.BinaryPath(l.cfg.Root, version), rollback.CmdRun)
	cmd.Env = append(hostEnv(os.Environ()),
		rollback.EnvRoot+"="+l.cfg.Root,
		rollback.EnvVersion+"="+version,
		rollback.EnvStartID+"="+strconv.FormatInt(start, 10),
		rollback.EnvAliveFD+"="+strconv.Itoa(aliveFD),
		rollback.EnvAliveInterval+"="+l.pulseInterval().String(),
	)
	cmd.Stdout = l.cfg.Stdout
	cmd.SysProcAttr = attr
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe for the host's stderr: %w", err)
	}
	aliveR, aliveW, err := os.Pipe()
	if err != nil {
		errR.Close()
		errW.Close()
		return nil, fmt.Errorf("pipe for the host's liveness: %w", err)
	}
	cmd.Stderr = errW
	cmd.ExtraFiles = []*os.File{aliveW}
	err = cmd.Start()
	errW.Close() // the child holds its own copies now
	aliveW.Close()
	if err != nil {
		errR.Close()
		aliveR.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &hostProcess{cmd: cmd, tail: &tail{max: tailLines}, copied: make(chan struct{}), exited: make(chan struct{}), started: time.Now()}
	p.lastAlive.Store(-1)
	var out io.Writer = l.cfg.Stderr
	if l.cfg.Journal != nil {
		out = journalLines{send: l.cfg.Journal, fields: hostFields(version, cmd.Process.Pid), fallback: l.cfg.Stderr}
	}
	go func() {
		defer close(p.copied)
		defer errR.Close()
		relay(errR, out, p.tail)
	}()
	go func() {
		defer aliveR.Close()
		buf := make([]byte, 64)
		for {
			if _, err := aliveR.Read(buf); err != nil {
				return
			}
			p.lastAlive.Store(int64(time.Since(p.started)))
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		p.endedAt = time.Now()
		close(p.exited)
	}()
	return p, nil
}

// pulseInterval is how often the host is asked to show it is alive: often enough that a few
// missed pulses are not yet the liveness limit.
func (l *Launcher) pulseInterval() time.Duration {
	return max(l.cfg.LivenessLimit/6, 10*time.Millisecond)
}

// silentFor is how long the host has shown no sign of life; ok is false while it has not
// shown its first (it is then not judged by the pipe).
func (p *hostProcess) silentFor() (d time.Duration, ok bool) {
	last := p.lastAlive.Load()
	if last < 0 {
		return 0, false
	}
	return time.Since(p.started) - time.Duration(last), true
}

// relay copies the host's output to out line by line, whatever it is. A line longer than
// maxLine is cut with a marker; bytes are passed as they are. Reading never stops before EOF,
// so the host is never blocked on a full pipe nor killed by a closed one (SIGPIPE); lines wait
// for out in a bounded queue, and when out cannot keep up, lines are dropped and counted.
func relay(r io.Reader, out io.Writer, t *tail) {
	lines := make(chan []byte, relayQueue)
	var dropped atomic.Int64
	written := make(chan struct{})
	sayDropped := func() {
		if n := dropped.Swap(0); n > 0 {
			fmt.Fprintf(out, "[mesh-launcher: %d %s dropped: the log could not keep up]\n", n, txt.Plural(int(n), "line of the host's output was", "lines of the host's output were"))
		}
	}
	go func() {
		defer close(written)
		for line := range lines {
			sayDropped()
			out.Write(line)
		}
		sayDropped()
	}()
	emit := func(line []byte, cut int) {
		// Redacted here, for the journal and the records alike, so a host of any version that
		// prints a bus URL with its password leaves the password nowhere.
		text := txt.Redact(string(line))
		if cut > 0 {
			text += fmt.Sprintf(" …[line cut: %d more bytes]", cut)
		}
		t.add(text)
		select {
		case lines <- []byte(text + "\n"):
		default:
			dropped.Add(1)
		}
	}
	br := bufio.NewReaderSize(r, 64<<10)
	line := make([]byte, 0, 4<<10)
	cut := 0
	for {
		chunk, err := br.ReadSlice('\n')
		complete := len(chunk) > 0 && chunk[len(chunk)-1] == '\n'
		if complete {
			chunk = chunk[:len(chunk)-1]
		}
		if room := maxLine - len(line); len(chunk) > room {
			cut += len(chunk) - room
			chunk = chunk[:room]
		}
		line = append(line, chunk...)
		if complete {
			emit(line, cut)
			line, cut = line[:0], 0
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(line) > 0 || cut > 0 {
				emit(line, cut)
			}
			break
		}
	}
	close(lines)
	<-written
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
		p.kill()
	}
}

// kill kills the host and waits for it to be gone.
func (p *hostProcess) kill() {
	p.cmd.Process.Kill()
	<-p.exited
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
		case "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES":
			continue
		}
		if slices.Contains(rollback.EnvContract, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// tail keeps the last max lines written, each cut to a length a record and a heartbeat can
// carry, as valid UTF-8 (printing them safely is the reader's job: text.Printable).
type tail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (t *tail) add(line string) {
	line = txt.Cut(strings.ToValidUTF8(line, "\uFFFD"), 512)
	t.mu.Lock()
	defer t.mu.Unlock()
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
