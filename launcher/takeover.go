package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/layout"
	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

// A launcher replaces itself by exec, never by asking systemd to restart it (seed 000's rule
// for the host, held for the launcher): the process keeps its pid, so systemd's MainPID, the
// watchdog and the host — a child, with its pipes — stay as they are. What the image before
// knew is handed to the next in one environment variable, and the descriptors it names (the
// root's lock and the read ends of the host's two pipes) are the only ones kept across exec.
const handoverEnv = "MESH_LAUNCHER_HANDOVER"

// maxHandover bounds the handover variable (a kernel argument string may hold 128 KiB).
const maxHandover = 64 << 10

// handover is what one launcher image tells the next it exec'd.
type handover struct {
	From  string `json:"from"`  // the launcher version that exec'd this one
	To    string `json:"to"`    // the version it exec'd, as named on disk (or the floor's)
	Floor bool   `json:"floor"` // the image exec'd is the floor
	Trial bool   `json:"trial"` // the image exec'd is on trial
	// The floor as the unit's start found it, and its file's identity then: a change to it is
	// the package replacing the floor.
	FloorPath    string      `json:"floor_path"`
	FloorVersion string      `json:"floor_version"`
	FloorID      string      `json:"floor_id"`
	LockFD       int         `json:"lock_fd"`
	Host         *handedHost `json:"host,omitempty"`
	// ExecNS is the monotonic instant exec was called, as CLOCK_BOOTTIME nanoseconds: the new
	// image measures how long nobody watched the host.
	ExecNS int64 `json:"exec_ns"`
}

// handedHost is the running host, handed over.
type handedHost struct {
	PID       int      `json:"pid"`
	Version   string   `json:"version"`
	Start     int64    `json:"start"`
	AgeNS     int64    `json:"age_ns"`      // how long it had been running
	SilentNS  int64    `json:"silent_ns"`   // since its last pulse; -1: it had shown none
	Confirmed bool     `json:"confirmed"`   // its version was confirmed when it started
	Deadline  int64    `json:"deadline_ns"` // what was left of its confirm deadline; -1: none
	StderrFD  int      `json:"stderr_fd"`
	AliveFD   int      `json:"alive_fd"`
	Tail      []string `json:"tail"`
	Partial   string   `json:"partial"`
}

// readHandover reads and removes the handover variable: nil when this image was started by the
// unit (or by hand), not exec'd by another launcher.
func readHandover() (*handover, error) {
	v, ok := os.LookupEnv(handoverEnv)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(handoverEnv)
	if len(v) > maxHandover {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d a launcher writes", handoverEnv, len(v), maxHandover)
	}
	var h handover
	if err := json.Unmarshal([]byte(v), &h); err != nil {
		return nil, fmt.Errorf("%s: %w", handoverEnv, err)
	}
	if h.LockFD < 3 || (h.Host != nil && (h.Host.PID <= 0 || h.Host.StderrFD < 3 || h.Host.AliveFD < 3)) {
		return nil, fmt.Errorf("%s names descriptors or a pid that cannot be a launcher's", handoverEnv)
	}
	return &h, nil
}

// launcherTarget is a launcher image to exec.
type launcherTarget struct {
	path    string
	version string
	floor   bool
	trial   bool
}

// fileID is a file's identity: the package replacing the floor changes it.
func fileID(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
	}
	return fmt.Sprintf("%d:%d:%d:%d", st.Dev, st.Ino, fi.Size(), fi.ModTime().UnixNano())
}

// probeVersion runs `FILE version` and returns the launcher version it prints, bounded in time
// and output as every preflight here.
func probeVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, rollback.CmdVersion)
	cmd.Env = hostEnv(os.Environ())
	var out boundedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s version: %w (%s)", path, err, strings.TrimSpace(txt.Cut(out.String(), 256)))
	}
	v := strings.TrimSpace(out.String())
	if f := strings.Fields(v); len(f) > 0 {
		v = f[len(f)-1]
	}
	if !layout.ValidVersion(v) {
		return "", fmt.Errorf("%s version printed %q, not a launcher version", path, txt.Cut(out.String(), 128))
	}
	return v, nil
}

// boundedBuffer keeps the first 4 KiB written to it.
type boundedBuffer struct{ b []byte }

func (w *boundedBuffer) Write(p []byte) (int, error) {
	if room := 4<<10 - len(w.b); room > 0 {
		w.b = append(w.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (w *boundedBuffer) String() string { return string(w.b) }

// takeoverTarget names the launcher image that should replace this one now, or nil: the floor
// when the package replaced it with a newer one (or replaced it at all, while the floor runs),
// else the newest good launcher version under ROOT/launchers newer than this image.
func (l *Launcher) takeoverTarget(ctx context.Context) *launcherTarget {
	if id := fileID(l.floorPath); id != "" && id != l.floorID {
		l.floorID = id
		v, err := probeVersion(ctx, l.floorPath)
		if err != nil {
			l.log.Error("the floor launcher changed on disk and does not answer its version; not taking it", "floor", l.floorPath, "err", err)
		} else {
			l.log.Info("the floor launcher changed on disk", "floor", l.floorPath, "floor_version", v)
			l.floorVersion = v
			if err := l.records.SetFloor(ctx, v, l.floorPath); err != nil {
				l.log.Warn("could not record the floor's version", "err", err)
			}
			if l.isFloor || semver.Compare(v, l.self) > 0 {
				return &launcherTarget{path: l.floorPath, version: v, floor: true}
			}
		}
	}
	c, err := l.records.ChooseLauncher(ctx, l.cfg.Root, l.newest())
	if err != nil {
		l.log.Warn("could not choose a launcher version", "err", err)
		return nil
	}
	for _, s := range c.Skipped {
		if !l.saidSkipped[s.Version+s.Why] {
			l.saidSkipped[s.Version+s.Why] = true
			l.log.Warn("not taking a launcher version", "launcher", s.Version, "why", s.Why)
		}
	}
	if c.Version == "" || l.execFailed[c.Version] {
		return nil
	}
	return &launcherTarget{path: rollback.LauncherPath(l.cfg.Root, c.Version), version: c.Version, trial: !c.Confirmed}
}

// newest is the version below which no launcher is taken: this image's, or the floor's when
// that is newer (a delivered launcher older than the package's is never run).
func (l *Launcher) newest() string {
	if l.floorVersion != "" && semver.Compare(l.floorVersion, l.self) > 0 {
		return l.floorVersion
	}
	return l.self
}

// execLauncher replaces this image by t, handing over the running host p (nil when none runs).
// It returns only when the exec did not happen: then everything is as it was before, and a
// delivered launcher that could not be exec'd is marked bad.
func (l *Launcher) execLauncher(ctx context.Context, t *launcherTarget, p *hostProcess, info *handedHost) {
	if !l.cfg.Takeover {
		return
	}
	log := l.log.With("to", t.version, "path", t.path)
	// Pdeathsig fires when the thread that forked the host ends, and exec ends every thread but
	// the caller: only the thread that forked may exec, and mesh-launcher does both on its main.
	if !onMainThread() {
		log.Error("not taking over: this goroutine is not on the main thread, and an exec from here would kill the host")
		l.cfg.Takeover = false
		return
	}
	h := handover{From: l.self, To: t.version, Floor: t.floor, Trial: t.trial, FloorPath: l.floorPath,
		FloorVersion: l.floorVersion, FloorID: l.floorID, LockFD: int(l.lock.File().Fd()), Host: info}
	if p != nil && !pauseForHandover(p, info) {
		log.Info("not taking over now: the host is exiting")
		return
	}
	keep := []uintptr{uintptr(h.LockFD)}
	if p != nil {
		keep = append(keep, uintptr(info.StderrFD), uintptr(info.AliveFD))
	}
	if err := l.records.SetCurrentLauncher(ctx, t.version, t.floor, t.trial); err != nil {
		log.Error("not taking over: could not record the launcher taking over", "err", err)
		if p != nil {
			p.resumePipes()
		}
		return
	}
	b, err := json.Marshal(h)
	if err == nil && len(b) > maxHandover {
		err = fmt.Errorf("the handover is %d bytes, more than %d", len(b), maxHandover)
	}
	if err != nil {
		l.execUndone(ctx, log, t, p, keep, err)
		return
	}
	for _, fd := range keep {
		setCloexec(fd, false)
	}
	log.Info("taking the new launcher by exec; the host keeps running", "from", l.self, "trial", t.trial, "floor", t.floor, "host_pid", hostPID(info))
	l.cfg.Notifier.Notify(fmt.Sprintf("STATUS=launcher %s taking over from %s", t.version, l.self))
	l.records.Close()
	h.ExecNS = monoNow()
	b, _ = json.Marshal(h)
	env := append(withoutEnv(os.Environ(), handoverEnv), handoverEnv+"="+string(b))
	err = syscall.Exec(t.path, append([]string{t.path}, os.Args[1:]...), env)
	l.execUndone(ctx, log, t, p, keep, err)
}

// pauseForHandover stops relaying the host's pipes and fills in what the next image needs of
// them; false (pipes resumed) when the host is exiting and cannot be handed over.
func pauseForHandover(p *hostProcess, info *handedHost) bool {
	if !p.pausePipes() {
		p.resumePipes()
		return false
	}
	info.Tail, info.Partial = p.tail.lines(), string(p.partial)
	info.SilentNS = -1
	if d, ok := p.silentFor(); ok {
		info.SilentNS = int64(d)
	}
	info.AgeNS = int64(time.Since(p.started))
	info.StderrFD, info.AliveFD = int(fdOf(p.errR)), int(fdOf(p.aliveR))
	return true
}

// execUndone puts everything back as it was before an exec that did not happen (err says why):
// descriptors closed on exec again, the records reopened, the host's pipes relayed, this image
// recorded as running. Only the bytes' fault marks a delivered launcher bad.
func (l *Launcher) execUndone(ctx context.Context, log *slog.Logger, t *launcherTarget, p *hostProcess, keep []uintptr, err error) {
	for _, fd := range keep {
		setCloexec(fd, true)
	}
	l.reopenRecords(ctx)
	if p != nil {
		p.resumePipes()
	}
	if err := l.records.SetCurrentLauncher(ctx, l.self, l.isFloor, l.trial); err != nil {
		log.Error("could not record the launcher running", "err", err)
	}
	// Only the bytes' fault marks a launcher bad (not an executable for this machine); a
	// failure of the machine (memory, a vanished file) never does (decision 0003).
	if !t.floor && errors.Is(err, syscall.ENOEXEC) {
		reason := fmt.Sprintf("launcher %s could not be exec'd: %v", t.version, err)
		if merr := l.records.MarkLauncherBad(ctx, t.version, reason, ""); merr != nil {
			log.Error("could not mark the launcher bad", "err", merr)
		}
	}
	// Not tried again by this image: an exec that failed for the machine's reasons (a noexec
	// mount, memory) would fail every check. The unit's next start tries again.
	if !t.floor {
		l.execFailed[t.version] = true
	}
	log.Error("could not take the new launcher; this one keeps running", "err", err)
}

func hostPID(h *handedHost) int {
	if h == nil {
		return 0
	}
	return h.PID
}

// fdOf is f's descriptor, read without Fd (which would put a pollable pipe in blocking mode).
func fdOf(f *os.File) uintptr {
	var fd uintptr
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(d uintptr) { fd = d })
	}
	return fd
}

func setCloexec(fd uintptr, on bool) {
	flag := 0
	if on {
		flag = syscall.FD_CLOEXEC
	}
	syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETFD, uintptr(flag))
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// reopenRecords opens records.db again after an exec that did not happen closed it.
func (l *Launcher) reopenRecords(ctx context.Context) {
	r, _, err := rollback.OpenForLauncher(ctx, l.cfg.Root)
	if err != nil {
		// Nothing sane is left to do without records: the unit's next start judges.
		l.log.Error("could not open records.db again after a failed exec", "err", err)
		os.Exit(1)
	}
	r.SetPolicy(l.cfg.Policy)
	l.records = r
}

// adopt makes a hostProcess of the host a previous image handed over: still this process's
// child, its pipes' read ends open under the descriptors named.
func (l *Launcher) adopt(h *handedHost) (*hostProcess, error) {
	proc, err := os.FindProcess(h.PID)
	if err != nil {
		return nil, fmt.Errorf("find the host handed over (pid %d): %w", h.PID, err)
	}
	errR := os.NewFile(uintptr(h.StderrFD), "host-stderr")
	aliveR := os.NewFile(uintptr(h.AliveFD), "host-alive")
	if errR == nil || aliveR == nil {
		return nil, fmt.Errorf("the host's pipes handed over as descriptors %d and %d are not open", h.StderrFD, h.AliveFD)
	}
	setCloexec(uintptr(h.StderrFD), true)
	setCloexec(uintptr(h.AliveFD), true)
	p := &hostProcess{proc: proc, tail: &tail{max: tailLines}, errR: errR, aliveR: aliveR,
		started: time.Now().Add(-time.Duration(h.AgeNS)), partial: []byte(h.Partial)}
	for _, line := range h.Tail {
		p.tail.add(line)
	}
	p.lastAlive.Store(-1)
	if h.SilentNS >= 0 {
		p.lastAlive.Store(max(h.AgeNS-h.SilentNS, 0))
	}
	p.watch(l.hostOut(h.Version, h.PID))
	return p, nil
}

// unexpectedFDs lists the descriptors open in this image that it neither was handed nor the Go
// runtime made for itself, and closes them: nothing but what the handover names may leak from
// one image into the next. It runs first thing after an exec.
func unexpectedFDs(h *handover) []string {
	keep := map[int]bool{0: true, 1: true, 2: true, h.LockFD: true}
	if h.Host != nil {
		keep[h.Host.StderrFD], keep[h.Host.AliveFD] = true, true
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var leaked []string
	for _, e := range entries {
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err != nil || keep[fd] {
			continue
		}
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		if strings.HasPrefix(target, "anon_inode:[eventpoll]") || strings.HasPrefix(target, "anon_inode:[eventfd]") ||
			strings.HasPrefix(target, "anon_inode:[pidfd]") || strings.HasPrefix(target, "/sys/fs/cgroup/") ||
			strings.HasPrefix(target, "/proc/") && strings.HasSuffix(target, "/fd") {
			continue // the runtime's own (its poller, the cgroup CPU limit it follows), and the listing itself
		}
		leaked = append(leaked, fmt.Sprintf("%d→%s", fd, txt.Cut(target, 128)))
		syscall.Close(fd)
	}
	return leaked
}

// closeOnExecInherited marks every descriptor above stderr close-on-exec: what the unit or a
// shell gave this image is not handed on.
func closeOnExecInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		var fd uintptr
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil && fd > 2 {
			setCloexec(fd, true)
		}
	}
}
