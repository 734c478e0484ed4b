package launcher

import (
	"context"
	"fmt"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

// statusEvery is how often the unit's STATUS= is checked against the records while a host runs:
// the host confirms, and failures age out of the policy's window, without telling the launcher.
const statusEvery = 2 * time.Second

// runningStatus is the unit's STATUS= while version runs, from what the records say: on trial or
// confirmed (this start confirmed, or the version is known-good and not on its last chance after
// a rollback), the rollback that brought it here for as long as it runs, and failures that still
// count against a confirmed version (the node is degraded, as `status` says).
func runningStatus(version string, s rollback.Standing, startConfirmed bool, last *rollback.Rollback, p rollback.Policy, now time.Time) string {
	line := "running " + version
	if startConfirmed || (s.Confirmed && !s.RollbackTarget) {
		line += " (confirmed)"
	} else {
		line += fmt.Sprintf(" (trial %d/%d)", min(s.Failures+1, p.Limit), p.Limit)
	}
	if last != nil && last.To == version {
		line += fmt.Sprintf("; rolled back from %s at %s", last.From, clock(last.At, now))
	}
	if s.Confirmed && !s.RollbackTarget && s.Failures > 0 {
		line += fmt.Sprintf("; degraded: %d %s recently (last: %s)", s.Failures, txt.Plural(s.Failures, "failure", "failures"), text(s.Last.Describe()))
	}
	return line
}

// clock says when, for a person reading `systemctl status` on the machine: the local time, with
// the date when it was not today.
func clock(at, now time.Time) string {
	at, now = at.Local(), now.Local()
	if y, m, d := at.Date(); now.Year() == y && now.Month() == m && now.Day() == d {
		return at.Format("15:04")
	}
	return at.Format("2006-01-02 15:04")
}

// sayRunning tells systemd what runs, if that changed since said; said holds the last line. A
// records error leaves the last line standing: it was true when said.
func (l *Launcher) sayRunning(ctx context.Context, version string, start int64, said *string) {
	line, err := l.runningLine(ctx, version, start)
	if err != nil {
		l.log.Warn("could not read the records for the unit's status line", "err", err)
		return
	}
	if line != *said {
		*said = line
		l.cfg.Notifier.Notify("STATUS=" + line)
	}
}

func (l *Launcher) runningLine(ctx context.Context, version string, start int64) (string, error) {
	s, err := l.records.Standing(ctx, l.cfg.Root, version, l.cfg.Policy)
	if err != nil {
		return "", err
	}
	confirmed, err := l.records.StartConfirmed(ctx, start)
	if err != nil {
		return "", err
	}
	rbs, err := l.records.Rollbacks(ctx, 1)
	if err != nil {
		return "", err
	}
	var last *rollback.Rollback
	if len(rbs) == 1 {
		last = &rbs[0]
	}
	return runningStatus(version, s, confirmed, last, l.cfg.Policy, time.Now()), nil
}
