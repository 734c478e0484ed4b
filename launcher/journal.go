package launcher

import (
	"io"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/journal"

	"github.com/novox/mesh-host/rollback"
)

// JournalFunc sends one entry to journald, as journal.Send does.
type JournalFunc func(message string, priority journal.Priority, fields map[string]string) error

// HostJournal is journal.Send when the launcher's stderr is journald's stream (JOURNAL_STREAM
// names its device and inode, as systemd sets it for a unit), and nil otherwise: a launcher run
// by hand, or whose stderr was redirected, writes the host's lines to stderr as it always did.
func HostJournal() JournalFunc {
	if ok, err := journal.StderrIsJournalStream(); err != nil || !ok {
		return nil
	}
	return journal.Send
}

// journalLines is where the host's output goes under journald: each line its own entry naming
// the host (`journalctl -t mesh-host`, `journalctl MESH_HOST_VERSION=v1.2.0`), not the launcher
// whose pipe it came through. relay writes one line per Write.
type journalLines struct {
	send     JournalFunc
	fields   map[string]string
	fallback io.Writer // a line journald refused goes here rather than nowhere
}

// hostFields names one host process; SYSLOG_PID makes journalctl print mesh-host[<host pid>].
func hostFields(version string, pid int) map[string]string {
	p := strconv.Itoa(pid)
	return map[string]string{"SYSLOG_IDENTIFIER": "mesh-host", "SYSLOG_PID": p, rollback.EnvVersion: version, "MESH_HOST_PID": p}
}

func (j journalLines) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	if err := j.send(line, priority(line), j.fields); err != nil {
		return j.fallback.Write(p)
	}
	return len(p), nil
}

// priority reads the level slog's text handler puts second (`time=… level=ERROR msg=…`), so
// `journalctl -p err` finds the host's errors; anything else is info.
func priority(line string) journal.Priority {
	first, rest, _ := strings.Cut(line, " ")
	level, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(first, "time=") {
		return journal.PriInfo
	}
	switch level {
	case "level=ERROR":
		return journal.PriErr
	case "level=WARN":
		return journal.PriWarning
	case "level=DEBUG":
		return journal.PriDebug
	}
	return journal.PriInfo
}
