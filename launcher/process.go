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

// hostProcess is one running host: started by this launcher image, or adopted from the image
// that exec'd it (takeover.go), which handed over the process and both pipes' read ends.
type hostProcess struct {
	proc    *os.Process
	state   *os.ProcessState
	tail    *tail
	errR    *os.File      // the read end of the host's stderr
	aliveR  *os.File      // the read end of its liveness pipe
	copied  chan struct{} // closed when the stderr relay ended (EOF, or stopped for a takeover)
	pulses  chan struct{} // closed when the pulse reader ended
	exited  chan struct{} // closed when Wait returned
	waitErr error
	started time.Time
	endedAt time.Time // when Wait returned: the moment the stand-aside gap is measured from

	// lastAlive is when the host last showed a sign of life on its pipe, as nanoseconds of
	// the monotonic clock since started; -1 until its first one. A host that never writes to
	// the pipe (one older than the pipe) is not judged by it.
	lastAlive atomic.Int64
	// partial is what the relay had read of a line not yet ended when it was stopped for a
	// takeover; the next image's relay starts with it.
	partial []byte
	out     io.Writer // where the relay writes the host's lines
	// errEOF and aliveEOF are set when a reader met its pipe's end and closed it: the pipes
	// can then no longer be handed to another image.
	errEOF, aliveEOF atomic.Bool
}

// startHost starts versions/<v>/mesh-host run with the launcher's environment, less systemd's
// notification variables (only the launcher may notify), plus the root, version and start id,
// and the write end of a pipe the host shows it is alive on. The host dies with the launcher
// (Pdeathsig), so killing the launcher never leaves it behind. Pdeathsig fires when the
// *thread* that forked the child ends: mesh-launcher forks and execs from its main thread only
// (the command locks it), which ends only with the process.
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
	p := &hostProcess{proc: cmd.Process, tail: &tail{max: tailLines}, errR: errR, aliveR: aliveR, started: time.Now()}
	p.lastAlive.Store(-1)
	p.watch(l.hostOut(version, cmd.Process.Pid))
	return p, nil
}

// hostOut is where the host's stderr lines go: the journal with fields naming the host, or the
// launcher's stderr.
func (l *Launcher) hostOut(version string, pid int) io.Writer {
	if l.cfg.Journal != nil {
		return journalLines{send: l.cfg.Journal, fields: hostFields(version, pid), fallback: l.cfg.Stderr}
	}
	return l.cfg.Stderr
}

// watch starts the three goroutines that follow a host: its output, its pulses, its exit.
func (p *hostProcess) watch(out io.Writer) {
	p.out = out
	p.readPipes()
	p.exited = make(chan struct{})
	go func() {
		p.state, p.waitErr = p.proc.Wait()
		p.endedAt = time.Now()
		close(p.exited)
	}()
}

// readPipes starts the relay of the host's stderr and the reader of its pulses. Each closes its
// pipe at EOF (the host and every child of it are gone), but not when stopped for a takeover.
func (p *hostProcess) readPipes() {
	p.copied, p.pulses = make(chan struct{}), make(chan struct{})
	partial := p.partial
	p.partial = nil
	go func() {
		defer close(p.copied)
		rest, err := relay(p.errR, p.out, p.tail, partial)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.partial = rest
			return
		}
		p.errEOF.Store(true)
		p.errR.Close()
	}()
	go func() {
		defer close(p.pulses)
		buf := make([]byte, 64)
		for {
			if _, err := p.aliveR.Read(buf); err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					p.aliveEOF.Store(true)
					p.aliveR.Close()
				}
				return
			}
			p.lastAlive.Store(int64(time.Since(p.started)))
		}
	}()
}

// pausePipes stops both readers where they are, without closing the pipes, and waits for them:
// what the relay had read of an unfinished line is kept in partial. It reports false when a
// reader had already reached EOF (the host is exiting), and then the pipes cannot be handed on.
func (p *hostProcess) pausePipes() bool {
	now := time.Now()
	p.errR.SetReadDeadline(now)
	p.aliveR.SetReadDeadline(now)
	<-p.copied
	<-p.pulses
	select {
	case <-p.exited:
		return false
	default:
	}
	return !p.errEOF.Load() && !p.aliveEOF.Load()
}

// resumePipes undoes pausePipes, when a takeover did not happen after all.
func (p *hostProcess) resumePipes() {
	p.errR.SetReadDeadline(time.Time{})
	p.aliveR.SetReadDeadline(time.Time{})
	p.readPipes()
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
//
// A read that fails with os.ErrDeadlineExceeded (the relay paused for a takeover) ends it
// without emitting the unfinished line: that is returned, for the next image to start with
// (partial, here).
func relay(r io.Reader, out io.Writer, t *tail, partial []byte) (rest []byte, err error) {
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
	line := append(make([]byte, 0, 4<<10), partial...)
	cut := 0
	for {
		var chunk []byte
		chunk, err = br.ReadSlice('\n')
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
		if errors.Is(err, os.ErrDeadlineExceeded) {
			rest = append([]byte(nil), line...)
			break
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
	return rest, err
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
	p.proc.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
	}
}

// kill kills the host and waits for it to be gone.
func (p *hostProcess) kill() {
	p.proc.Kill()
	<-p.exited
}

// exitOf describes how the process ended: exit code, or -1 and the signal's name.
func (p *hostProcess) exitOf() (code int, signal string) {
	if p.waitErr != nil {
		return -1, p.waitErr.Error()
	}
	if p.state == nil {
		return -1, "no exit status"
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return p.state.ExitCode(), ""
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
	mu   sync.Mutex
	max  int
	kept []string
}

func (t *tail) add(line string) {
	line = txt.Cut(strings.ToValidUTF8(line, "\uFFFD"), 512)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kept = append(t.kept, line)
	if len(t.kept) > t.max {
		t.kept = t.kept[len(t.kept)-t.max:]
	}
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.kept, "\n")
}

// lines is a copy of the lines kept, oldest first.
func (t *tail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.kept...)
}
