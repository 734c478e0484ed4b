package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

// A launcher version is on trial until it has adopted or started a host and seen it pulse. One
// that crashes, exits, hangs until the watchdog kills it, or cannot open records.db ends
// without recording that it ended: systemd's Restart=always then starts the unit again, which
// runs the floor, and the floor judges it here before it does anything else.

// outputName is ROOT/launcher.out: the last output of the delivered launcher image running,
// its log and anything the Go runtime prints as it dies (debug.SetCrashOutput), for the floor
// to keep with a launcher it judges. The floor never writes it.
const outputName = "launcher.out"

// maxOutputFile bounds launcher.out: written past it, the file starts again.
const maxOutputFile = 256 << 10

// unitStarted is the unit's start (this image was not exec'd): the floor judges the image the
// unit ran last if it ended without saying so, and records itself as running.
func (l *Launcher) unitStarted(ctx context.Context) error {
	l.isFloor = true
	l.floorPath, l.floorVersion = l.cfg.Floor, l.self
	l.floorID = fileID(l.floorPath)
	if !l.records.HasLaunchers() {
		return nil
	}
	if err := l.judgeLastLauncher(ctx); err != nil {
		return err
	}
	if err := l.records.UnitStarted(ctx, l.self, l.floorPath); err != nil {
		return err
	}
	l.recordUnitFile(ctx)
	return l.records.SetCurrentLauncher(ctx, l.self, true, false)
}

// judgeLastLauncher judges the launcher image the unit ran last when it ended, on this boot,
// without recording that it ended as a launcher should. On trial it is marked bad, with its
// reason and last output, and a rollback to what runs next is recorded. Confirmed, it is run
// again once; if it was the launcher rolled back to, or it ends so twice in a row, the floor
// runs from now on (pinned) — the machine is then the suspect, and nothing is marked bad.
func (l *Launcher) judgeLastLauncher(ctx context.Context) error {
	cur, err := l.records.CurrentLauncher(ctx)
	if err != nil {
		return err
	}
	switch {
	case cur.Version == "" || cur.Ended:
		return nil
	case cur.Boot != l.records.BootID():
		l.log.Info("the launcher running when the machine last stopped ended with it; not judged", "launcher", cur.Version)
		return l.records.EndCurrentLauncher(ctx)
	case cur.Floor:
		l.log.Warn("the floor launcher ended without stopping; starting again", "launcher", cur.Version)
		return l.records.EndCurrentLauncher(ctx)
	}
	out, how := lastOutput(l.cfg.Root)
	// systemd's own word, when the unit's ExecStopPost recorded it after this image began.
	if u := cur.UnitExit; !u.At.IsZero() && !u.At.Before(cur.Since) {
		switch {
		case u.Result == "watchdog":
			how = "it hung and systemd's watchdog killed it (" + u.String() + ")"
		case u.Result == "oom-kill", u.Code == "killed" && (u.Status == "KILL" || u.Status == "TERM"):
			// Killed from outside: an operator, the OOM killer, a shutdown that did not wait.
			// Not the launcher's failure (decision 0003): it runs again, still on trial if it was.
			l.log.Warn("the launcher the unit ran last was killed from outside; not judged", "launcher", cur.Version, "how", u.String())
			return l.records.EndCurrentLauncher(ctx)
		default:
			how += " (" + u.String() + ")"
		}
	}
	n, err := l.records.CountLauncherFailure(ctx)
	if err != nil {
		return err
	}
	if cur.Trial {
		reason := fmt.Sprintf("launcher %s ended on trial without confirming: %s", cur.Version, how)
		if err := l.records.MarkLauncherBad(ctx, cur.Version, reason, out); err != nil {
			return err
		}
		to := l.floorVersion
		if c, err := l.records.ChooseLauncher(ctx, l.cfg.Root, l.self); err == nil && c.Version != "" {
			to = c.Version
		}
		l.log.Error("rolling back the launcher", "from", cur.Version, "to", to, "reason", reason)
		return l.records.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: cur.Version, To: to, Reason: reason, Output: out})
	}
	rbs, err := l.records.LauncherRollbacks(ctx, 1)
	if err != nil {
		return err
	}
	// The launcher a rollback went to, failing before it ever ran a host this time: the
	// rollback's one chance is spent. One that ran a host before failing is counted instead.
	rolledBackTo := len(rbs) == 1 && rbs[0].To == cur.Version && !cur.ConfirmedThisRun
	if !rolledBackTo && n < 2 {
		l.log.Warn("the launcher ended without stopping; running it again once", "launcher", cur.Version, "how", how)
		return nil
	}
	reason := fmt.Sprintf("launcher %s, confirmed here, ended without stopping %d %s in a row: %s; the floor runs until a newer launcher arrives", cur.Version, n, txt.Plural(n, "time", "times"), how)
	if rolledBackTo {
		reason = fmt.Sprintf("launcher %s, the launcher rolled back to, ended without stopping too: %s; the floor runs until a newer launcher arrives", cur.Version, how)
	}
	if err := l.records.PinFloor(ctx, reason); err != nil {
		return err
	}
	l.log.Error("running the floor launcher", "from", cur.Version, "floor", l.floorVersion, "reason", reason)
	return l.records.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: cur.Version, To: l.floorVersion, Reason: reason, Output: out})
}

// tookOver sets this image up from what the image that exec'd it handed over: the floor it
// knew, whether this image is the floor or on trial, and the host, adopted.
func (l *Launcher) tookOver(ctx context.Context, h *handover) error {
	l.floorPath, l.floorVersion, l.floorID = h.FloorPath, h.FloorVersion, h.FloorID
	l.isFloor, l.trial = h.Floor, h.Trial
	log := l.log.With("from", h.From)
	if h.To != l.self {
		// The directory's name and the binary's own version disagree: run on, but never take
		// this one again (it would be taken again and again).
		reason := fmt.Sprintf("launcher %s's binary says it is %s", h.To, l.self)
		log.Error("this launcher is not the version it was taken as", "reason", reason)
		if !l.isFloor {
			if err := l.records.MarkLauncherBad(ctx, h.To, reason, ""); err != nil {
				return err
			}
		}
		if err := l.records.SetCurrentLauncher(ctx, l.self, l.isFloor, l.trial); err != nil {
			return err
		}
	}
	if h.Host != nil {
		p, err := l.adopt(h.Host)
		if err != nil {
			return err
		}
		l.adopted = &adoptedHost{p: p, version: h.Host.Version, start: h.Host.Start, confirmed: h.Host.Confirmed, deadline: time.Duration(h.Host.Deadline)}
		// unwatched: from the old image's exec to the host adopted, watched again (make bench).
		unwatched := time.Duration(monoNow() - h.ExecNS)
		log.Info("took over as launcher; the host keeps running", "host_pid", h.Host.PID, "version", h.Host.Version, "trial", l.trial, "unwatched", unwatched.Round(time.Microsecond))
	} else {
		log.Info("took over as launcher", "trial", l.trial)
	}
	return nil
}

// CaptureOutput copies a delivered launcher image's log, and what the Go runtime prints if it
// dies, to ROOT/launcher.out, for the floor to keep if this image ends without saying so. It
// runs before records.db is opened: an image that cannot open it is judged by what it said.
func CaptureOutput(root string, log *slog.Logger) *slog.Logger {
	l, _ := captureOutput(root, log)
	return l
}

// captureOutput is CaptureOutput, also returning the handler writing launcher.out alone (nil
// when it could not be opened).
func captureOutput(root string, log *slog.Logger) (*slog.Logger, slog.Handler) {
	f, err := os.OpenFile(filepath.Join(root, outputName), os.O_RDWR|os.O_CREATE|os.O_TRUNC|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		log.Warn("could not keep this launcher's output for its judge", "err", err)
		return log, nil
	}
	if err := debug.SetCrashOutput(f, debug.CrashOptions{}); err != nil {
		log.Warn("could not keep this launcher's crash output for its judge", "err", err)
	}
	// f stays open for the life of the image: the runtime writes to it as the image dies.
	out := slog.NewTextHandler(&cappedFile{f: f, max: maxOutputFile}, nil)
	return slog.New(slog.NewMultiHandler(log.Handler(), out)), out
}

// cappedFile writes to f until it holds max bytes, then starts it again. A record longer than
// max is cut to its beginning (its level and message), so the file never holds more.
type cappedFile struct {
	f       *os.File
	max     int64
	written int64
}

func (c *cappedFile) Write(p []byte) (int, error) {
	n := len(p)
	if int64(len(p)) > c.max {
		p = append(p[:c.max-1:c.max-1], '\n')
	}
	if c.written+int64(len(p)) > c.max {
		c.f.Truncate(0)
		c.f.Seek(0, io.SeekStart)
		c.written = 0
	}
	m, err := c.f.Write(p)
	c.written += int64(m)
	if err != nil {
		return m, err
	}
	return n, nil
}

// lastOutput reads what a delivered launcher wrote to ROOT/launcher.out: its last lines, and
// how it ended as far as they tell. A Go crash's first line ("panic: …", "SIGABRT: abort")
// heads a dump longer than the tail, so the whole file is read for it and it is kept first.
func lastOutput(root string) (out, how string) {
	f, err := os.Open(filepath.Join(root, outputName))
	if err != nil {
		return "", howUnknown
	}
	defer f.Close()
	// The lines before a crash (what it was doing), then the crash's first lines (what and
	// where); a register dump and the other goroutines are left out.
	before := &tail{max: tailLines / 2}
	after := &tail{max: tailLines / 2}
	var crash, lastError string
	br := bufio.NewReaderSize(io.LimitReader(f, maxOutputFile+1<<10), 64<<10)
	for {
		raw, err := readCutLine(br)
		if raw == "" && err != nil {
			break
		}
		line := txt.Redact(raw)
		switch {
		case crash != "":
			if len(after.lines()) < after.max {
				after.add(line)
			}
		case strings.HasPrefix(line, "SIGABRT"), strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "fatal error:"):
			crash = txt.Cut(line, 256)
			after.add(line)
		default:
			before.add(line)
			if strings.Contains(line, "level=ERROR") {
				lastError = txt.Cut(line, 256)
			}
		}
		if err != nil {
			break
		}
	}
	out = strings.Trim(before.String()+"\n"+after.String(), "\n")
	switch {
	case strings.HasPrefix(crash, "SIGABRT"):
		how = "it hung and the watchdog killed it (SIGABRT)"
	case crash != "":
		how = "it crashed: " + crash
	case lastError != "":
		how = "it failed: " + lastError
	default:
		how = howUnknown
	}
	return out, how
}

// readCutLine reads one line without its newline, keeping at most the reader's buffer of it: a
// longer line is cut, not an end of reading (a crash after it must still be found).
func readCutLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	line := strings.TrimSuffix(string(b), "\n")
	for errors.Is(err, bufio.ErrBufferFull) {
		_, err = br.ReadSlice('\n')
	}
	return line, err
}

const howUnknown = "it crashed, exited, hung or was killed before it said why"

// RecordUnitExit is `mesh-launcher stopped`, the unit's ExecStopPost: it records systemd's word
// on how the unit's main process ended ($SERVICE_RESULT, $EXIT_CODE, $EXIT_STATUS), so the next
// start can tell a launcher that failed from one killed from outside. Records older than schema
// 6, or none at all, are left alone.
func RecordUnitExit(ctx context.Context, root string, getenv func(string) string) error {
	result, code, status := getenv("SERVICE_RESULT"), getenv("EXIT_CODE"), getenv("EXIT_STATUS")
	if result == "" || code == "" || status == "" {
		return fmt.Errorf("SERVICE_RESULT, EXIT_CODE and EXIT_STATUS are not all set: run by the unit's ExecStopPost only")
	}
	r, err := rollback.OpenForHost(ctx, root)
	if err != nil {
		return err
	}
	defer r.Close()
	if !r.HasLaunchers() {
		return nil
	}
	return r.RecordUnitExit(ctx, result, code, status)
}
