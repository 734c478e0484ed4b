package fleet

import (
	"fmt"
	"time"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/wire"
)

// Kind is the STATE column in one word, for machines (`status_kind` in --json).
type Kind string

// The kinds, in the order they take precedence.
const (
	KindSilent        Kind = "silent"
	KindUnreadable    Kind = "unreadable"
	KindStopping      Kind = "stopping"
	KindStandingAside Kind = "standing-aside"
	KindWithdrawn     Kind = "withdrawn"
	KindSteppedDown   Kind = "stepped-down"
	KindRolledBack    Kind = "rolled-back"
	KindTrustExpired  Kind = "trust-expired"
	KindRefused       Kind = "refused"
	KindWaiting       Kind = "waiting-for-window"
	KindFetching      Kind = "fetching"
	KindTargetExpired Kind = "target-expired"
	KindRestarted     Kind = "restarting"
	KindTrying        Kind = "trying"
	KindFailing       Kind = "failing"
	KindOK            Kind = "ok"
)

// Trouble reports whether k is a node an operator should look at: it runs a withdrawn version,
// rolled back, takes no new target (its trust expired), refused, acts on no target (it
// expired), restarted, runs a version not yet confirmed or failed its last reconcile. Such rows sort right after silent and unreadable ones.
func (k Kind) Trouble() bool {
	switch k {
	case KindWithdrawn, KindRolledBack, KindTrustExpired, KindRefused, KindTargetExpired, KindRestarted, KindTrying, KindFailing:
		return true
	}
	return false
}

// RestartShownFor is how long a view that saw a node restart (--watch) keeps saying so.
const RestartShownFor = 5 * time.Minute

// The STATE column tells what a node is doing, from its last heartbeat alone (and, in a View,
// the heartbeat before it). The first rule that matches wins:
//
//  1. silent: unheard for longer than silentAfter — "SILENT since 13:02:11 (was …)", the
//     rest of these rules applied to its last word.
//  2. unreadable: the last heartbeat could not be read — "UNREADABLE".
//  3. stopping: state stopping (the launcher restarts it unless its unit is being stopped).
//  4. standing-aside: state standing-aside — "standing aside for v1.2.0".
//  5. withdrawn: running is on the withdrawal list on the bus — "runs withdrawn v1.2.0: why"
//     (the host steps down from it at its next reconcile, unless nothing else is on its disk).
//  6. stepped-down: the target is on the withdrawal list and running is older, with no rollback
//     from the target or a newer version — "stepped down from v1.3.0, withdrawn: why": the node
//     left the withdrawn version for what it ran before (or, away when it was withdrawn, never
//     took it) and stays there until a newer target. Not a rollback of a bad release, and not
//     trouble; a rollback from a version older than the target is history.
//  7. rolled-back: the newest rollbacks[] entry whose from is newer than running — "rolled back
//     from v1.2.0 at 13:15". A rollback from a version no newer than running is history.
//  8. trust-expired: trust_expired_since is set — "trust expired since 2026-12-02T12:00:00Z"
//     (wire.TrustExpiredLine): the newest root the node holds has expired; it keeps running and
//     reconciling what it has and takes no new target until a fresher root reaches it.
//  9. refused: refused.what is "target" and the node does not run its target — "refused v1.2.0:
//     why" — unless its fetch shows it working on that target (fetching, verifying, staged, or
//     failed with a retry), which means the refusal was of an earlier target; or refused.what
//     is "declaration" and refused.revision is newer than declaration_revision (the newest
//     declaration was refused, an older one is held) — "refused declaration rev 43: why"; or
//     refused.what is "withdrawals" and refused.revision is the withdrawal list's revision on
//     the bus (the list in force was refused) — "refused withdrawal list rev 9: why". A failed
//     fetch of the target that is not retried is a refusal too.
//  10. waiting-for-window: window.waiting_for is set and not running — "staged v1.2.0,
//     waiting for the window (opens 2026-12-02T02:00+01:00)": the node stands aside when its
//     maintenance window opens, by its own clock (decision 0029). Not trouble.
//  11. fetching: fetch.version is the target and not running — "fetching v1.2.0 42%",
//     "verifying v1.2.0", "fetch of v1.2.0 failed, retry at 13:16:05: why", "staged v1.2.0".
//  12. target-expired: target_expired_since is set — "target expired since 2026-12-06 12:00":
//     the node acts on no target until one signed again arrives (`mesh-release serve --key`
//     or a rollout controller signs targets again before they expire).
//  13. restarted: a View saw a heartbeat of the same running version with a larger uptime_s
//     within RestartShownFor — "restarting (up 3s)"; trying: running is not known_good, the
//     version is on trial — "trying v1.2.0 (not confirmed, up 3s)".
//  14. failing: last_reconcile.ok is false — "reconcile failed at 13:15": the declaration does
//     not hold on the node (the LAST RECONCILE column says why; the host tries again on its
//     next reconcile). Before its first reconcile a node is not failing.
//  15. ok.
//
// Times are UTC (with the date when not within a day of now); "up" is uptime_s plus the time
// since the heartbeat was heard.
var rules = []struct {
	kind  Kind
	judge func(f facts) (text string, ok bool)
}{
	{KindStopping, stopping},
	{KindStandingAside, standingAside},
	{KindWithdrawn, withdrawn},
	{KindSteppedDown, steppedDown},
	{KindRolledBack, rolledBack},
	{KindTrustExpired, trustExpired},
	{KindRefused, refused},
	{KindWaiting, waitingForWindow},
	{KindFetching, fetching},
	{KindTargetExpired, targetExpired},
	{KindRestarted, restarted},
	{KindTrying, trying},
	{KindFailing, failing},
}

// facts is what a node's status is judged from.
type facts struct {
	hb        wire.Heartbeat
	heard     time.Time // when the server stored hb
	now       time.Time
	restarted bool // a View saw the running version start again, lately
	withdrawn withdrawals
}

// withdrawals is the withdrawal list on the bus, as the rules read it.
type withdrawals struct {
	list wire.Withdrawals
	rev  uint64 // its revision (0: none)
}

// status is the STATE cell (bounded and printable) and its kind for entry e as of now.
// restarted says whether a View saw e's running version start again within RestartShownFor.
func status(e Entry, now time.Time, silentAfter time.Duration, restarted bool, w withdrawals) (Kind, string) {
	kind, text := lastWord(e, now, restarted, w)
	if now.Sub(e.Heard) > silentAfter {
		was := text
		switch {
		case kind == KindUnreadable:
			was = "unreadable"
		case kind == KindOK && e.Heartbeat.Running != "":
			was = "running " + e.Heartbeat.Running
		case kind == KindOK:
			was = "running"
		}
		return KindSilent, cell("SILENT since "+clock(e.Heard, now, time.TimeOnly)+" (was "+was+")", maxStatusCell)
	}
	return kind, cell(text, maxStatusCell)
}

// lastWord is the status the node's last heartbeat gives, silence aside.
func lastWord(e Entry, now time.Time, restarted bool, w withdrawals) (Kind, string) {
	if e.Err != nil {
		return KindUnreadable, "UNREADABLE"
	}
	f := facts{hb: e.Heartbeat, heard: e.Heard, now: now, restarted: restarted, withdrawn: w}
	for _, r := range rules {
		if text, ok := r.judge(f); ok {
			return r.kind, text
		}
	}
	return KindOK, "ok"
}

func stopping(f facts) (string, bool) {
	return "stopping", f.hb.State == wire.StateStopping
}

func standingAside(f facts) (string, bool) {
	if f.hb.State != wire.StateStandingAside {
		return "", false
	}
	if f.hb.StandingAsideFor == "" {
		return "standing aside", true
	}
	return "standing aside for " + version(f.hb.StandingAsideFor), true
}

func withdrawn(f facts) (string, bool) {
	e, ok := f.withdrawn.list.Has(f.hb.Running)
	if !ok || f.hb.Running == "" {
		return "", false
	}
	return "runs withdrawn " + version(f.hb.Running) + why(e.Reason), true
}

func steppedDown(f facts) (string, bool) {
	hb := f.hb
	e, ok := f.withdrawn.list.Has(hb.Target)
	if !ok || hb.Target == "" || semver.Compare(hb.Running, hb.Target) >= 0 {
		return "", false
	}
	for _, rb := range hb.Rollbacks {
		if semver.Compare(rb.From, hb.Target) >= 0 {
			return "", false // it rolled back from the withdrawn version (or past it): rolled back
		}
	}
	return "stepped down from " + version(hb.Target) + ", withdrawn" + why(e.Reason), true
}

func targetExpired(f facts) (string, bool) {
	since := f.hb.TargetExpiredSince
	if since == nil {
		return "", false
	}
	return "target expired since " + clock(*since, f.now, "15:04"), true
}

func rolledBack(f facts) (string, bool) {
	var newest *wire.Rollback
	for i, rb := range f.hb.Rollbacks {
		if semver.Compare(rb.From, f.hb.Running) <= 0 {
			continue
		}
		if newest == nil || rb.At.After(newest.At) {
			newest = &f.hb.Rollbacks[i]
		}
	}
	if newest == nil {
		return "", false
	}
	text := "rolled back from " + version(newest.From)
	if !newest.At.IsZero() {
		text += " at " + clock(newest.At, f.now, "15:04")
	}
	return text, true
}

func refused(f facts) (string, bool) {
	hb := f.hb
	if fe := hb.Fetch; fe != nil && fe.State == "failed" && fe.RetryAt.IsZero() && fe.Version == hb.Target && hb.Target != hb.Running {
		return "fetch of " + version(fe.Version) + " failed, not retried" + why(fe.Error), true
	}
	r := hb.Refused
	if r == nil {
		return "", false
	}
	switch r.What {
	case "target":
		if hb.Target == hb.Running || workingOnTarget(hb) {
			return "", false
		}
		if hb.Target == "" {
			return fmt.Sprintf("refused target rev %d", r.Revision) + why(r.Error), true
		}
		return "refused " + version(hb.Target) + why(r.Error), true
	case "declaration":
		if r.Revision <= hb.DeclarationRevision {
			return "", false
		}
		return fmt.Sprintf("refused declaration rev %d", r.Revision) + why(r.Error), true
	case "withdrawals":
		if f.withdrawn.rev == 0 || r.Revision != f.withdrawn.rev {
			return "", false // a list since replaced, or one this view does not know
		}
		return fmt.Sprintf("refused withdrawal list rev %d", r.Revision) + why(r.Error), true
	}
	return "", false
}

// workingOnTarget reports whether the heartbeat's fetch shows the host delivering its target: a
// refusal it also carries must then be of an earlier target (the host keeps its last refusal).
func workingOnTarget(hb wire.Heartbeat) bool {
	fe := hb.Fetch
	if fe == nil || fe.Version != hb.Target {
		return false
	}
	return fe.State != "failed" || !fe.RetryAt.IsZero()
}

func waitingForWindow(f facts) (string, bool) {
	w := f.hb.Window
	if w == nil || w.WaitingFor == "" || w.WaitingFor == f.hb.Running {
		return "", false
	}
	return wire.WaitingLine(version(w.WaitingFor), w.Opens), true
}

func fetching(f facts) (string, bool) {
	fe := f.hb.Fetch
	if fe == nil || fe.Version != f.hb.Target || fe.Version == f.hb.Running {
		return "", false
	}
	v := version(fe.Version)
	switch fe.State {
	case "fetching":
		text := "fetching " + v
		if fe.Delta != "" {
			text += " as a delta from " + version(fe.Delta) // decision 0028
		}
		if fe.Total > 0 {
			text += fmt.Sprintf(" %.0f%%", min(max(fe.Percent, 0), 100))
		}
		if fe.StalledS > 0 {
			text += ", stalled " + span(time.Duration(min(fe.StalledS, maxSpanS))*time.Second)
		}
		return text, true
	case "verifying":
		return "verifying " + v, true
	case "staged":
		return "staged " + v, true
	case "failed":
		text := "fetch of " + v + " failed"
		if !fe.RetryAt.IsZero() {
			text += ", retry at " + clock(fe.RetryAt, f.now, time.TimeOnly)
		}
		return text + why(fe.Error), true
	}
	return "", false
}

func restarted(f facts) (string, bool) {
	return "restarting (up " + uptime(f) + ")", f.restarted
}

func trying(f facts) (string, bool) {
	if f.hb.Running == f.hb.KnownGood {
		return "", false
	}
	return "trying " + version(f.hb.Running) + " (not confirmed, up " + uptime(f) + ")", true
}

func failing(f facts) (string, bool) {
	lr := f.hb.LastReconcile
	if lr == nil || lr.OK {
		return "", false
	}
	if lr.At.IsZero() {
		return "reconcile failed", true
	}
	return "reconcile failed at " + clock(lr.At, f.now, "15:04"), true
}

// maxSpanS bounds durations read from a heartbeat (a century), so none overflows.
const maxSpanS = 100 * 365 * 24 * 3600

// uptime is the node's uptime now: what its last heartbeat said plus the time since it was heard.
func uptime(f facts) string {
	d := time.Duration(min(max(f.hb.UptimeS, 0), maxSpanS)) * time.Second
	if since := f.now.Sub(f.heard); since > 0 {
		d += min(since, maxSpanS*time.Second)
	}
	return span(d)
}

// span is d for a person: 3s, 4m12s, 3h05m, 2d.
func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// clock is t in UTC as layout, with the date in front when t is not within a day of now.
func clock(t, now time.Time, layout string) string {
	if d := now.Sub(t); d > 24*time.Hour || d < -24*time.Hour {
		layout = time.DateOnly + " " + layout
	}
	return t.UTC().Format(layout)
}

// version is a version from a heartbeat, bounded (the whole cell is made printable).
func version(v string) string { return cell(v, maxIDCell) }

// why is ": reason", or nothing without one. The cell it goes in bounds it.
func why(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}
