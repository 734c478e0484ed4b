package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/novox/mesh-host/release/fleet"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Bounds of the texts a halt report quotes from a heartbeat.
const (
	maxDetailBytes = 1024
	maxFieldBytes  = 128
)

// track is what the controller knows of one node of the rollout: its last heartbeat, and,
// while its batch runs, how far it got.
type track struct {
	last  fleet.Entry
	heard bool
	// platform is the node's platform as its heartbeats said it last, "" while none did.
	platform string

	// Set when its batch begins.
	inBatch   bool
	leftOut   bool   // silent when its batch began: not targeted, not judged
	done      bool   // already had the version (or a newer one) when its batch began
	targetRev uint64 // the revision of node.<id> naming the version, or of the plan holding it
	// reader: the node takes the rollout's plan, not a target of its own, so a refusal of it
	// is said as the plan's (refused.what "plan", decision 0047).
	reader bool
	// priorRollback is when (by the node's clock) the node last rolled back from the version
	// before its batch began: that rollback is history — the node marked the version bad then,
	// and now refuses it, which is what it is judged on.
	priorRollback time.Time
	// priorLauncher is the launcher rollback the node reported when its batch began: history,
	// like priorRollback. Only one it reports after that halts the rollout.
	priorLauncher launcherRollback

	confirmed   bool
	firstUptime int64 // uptime_s of the first confirmed heartbeat this controller saw
	lastUptime  int64 // uptime_s of the last heartbeat of the version
	soaked      bool
	trouble     *NodeReason // sticky: the first trouble seen on a heartbeat
	// moved is the most the node's heartbeats said it fetched delivering the version
	// (fetch.moved: a delta, or the archive, or both): what the fleet's total adds up. A
	// delivery the heartbeats never showed counts 0.
	moved int64
	// windowOpens is when the node's maintenance window opens, by its last heartbeat that said
	// it had staged the version and waits for that window (decision 0029): until window after
	// it the node is neither silent nor late, and its deadline to confirm counts from it.
	windowOpens time.Time
}

// lastRollbackFrom is when, by the node's clock, e says it last rolled back from version.
func lastRollbackFrom(e fleet.Entry, version string) time.Time {
	var at time.Time
	for _, rb := range e.Heartbeat.Rollbacks {
		if rb.From == version && rb.At.After(at) {
			at = rb.At
		}
	}
	return at
}

// launcherRollback is a launcher rollback as a heartbeat names it: what it rolled back from,
// and when by the node's clock.
type launcherRollback struct {
	from string
	at   time.Time
}

// priorLauncherRollback is the launcher rollback e reports that happened before started (the
// batch's start, zero while it starts now): a controller that takes over a batch already
// running counts one after the batch began as the batch's, as the controller before it would
// (the node's clock against the controller's, only then).
func priorLauncherRollback(e fleet.Entry, started time.Time) launcherRollback {
	l := e.Heartbeat.Launcher
	if e.Err != nil || l == nil || l.RolledBackFrom == "" || (!started.IsZero() && !l.RolledBackAt.Before(started)) {
		return launcherRollback{}
	}
	return launcherRollback{l.RolledBackFrom, l.RolledBackAt}
}

// newLauncherRollback is the launcher rollback hb reports when it is not the one prior: another
// version rolled back from, or a later one.
func newLauncherRollback(hb wire.Heartbeat, prior launcherRollback) *wire.Launcher {
	l := hb.Launcher
	if l == nil || l.RolledBackFrom == "" || (l.RolledBackFrom == prior.from && !l.RolledBackAt.After(prior.at)) {
		return nil
	}
	return l
}

// judged reports whether t counts towards its batch: targeted and not left out.
func (t *track) judged() bool { return t.inBatch && !t.leftOut && !t.done }

// reset forgets what a previous batch (or controller) saw; its last heartbeat stays.
// refusalWhat is what a refusal of the node's target is said as: "plan" for a node taking the
// plan, else "target".
func (t *track) refusalWhat() string {
	if t.reader {
		return "plan"
	}
	return "target"
}

func (t *track) reset() {
	*t = track{last: t.last, heard: t.heard, platform: t.platform}
}

// change is what a heartbeat changed in a node's standing.
type change int

const (
	changeNone change = iota
	changeConfirmed
	changeSoaked
	changeTrouble
)

// observe judges one heartbeat of a node of the batch in progress (0006, "A batch" and
// "Halt"): confirmed, soaked, or trouble (rolled back, its launcher rolled back, its trust
// expired, refused, restarted).
func (t *track) observe(e fleet.Entry, version string, soak time.Duration) change {
	if t.heard && e.Heard.Before(t.last.Heard) {
		return changeNone // an older word than the one held
	}
	t.last, t.heard = e, true
	if _, p := platformOf(e.Heartbeat); e.Err == nil && p != "" {
		t.platform = p
	}
	if f := e.Heartbeat.Fetch; e.Err == nil && f != nil && f.Version == version && f.Moved > t.moved {
		t.moved = f.Moved
	}
	if w := e.Heartbeat.Window; e.Err == nil && w != nil && w.WaitingFor == version && !w.Opens.IsZero() {
		t.windowOpens = w.Opens
	}
	if !t.judged() || t.trouble != nil || e.Err != nil {
		return changeNone
	}
	hb := e.Heartbeat
	for _, rb := range hb.Rollbacks {
		if rb.From == version && rb.At.After(t.priorRollback) {
			t.trouble = &NodeReason{Node: e.Node, Why: WhyRolledBack, Since: rb.At,
				Detail: detail(fmt.Sprintf("rolled back from %s to %s at %s: %s", version, field(rb.To), clock(rb.At), rb.Reason)),
				Output: output(rb.Output)}
			return changeTrouble
		}
	}
	// A launcher that rolled back during the batch halts it as a host rollback does (issue 19):
	// the release carries the launcher, and a launcher that cannot run costs the next batch.
	if l := newLauncherRollback(hb, t.priorLauncher); l != nil {
		t.trouble = &NodeReason{Node: e.Node, Why: WhyLauncherRolledBack, Since: l.RolledBackAt,
			Detail: detail(fmt.Sprintf("launcher rolled back from %s: %s", field(l.RolledBackFrom), l.RollbackReason))}
		return changeTrouble
	}
	// A node whose trust expired takes no new target (decision 0045): said now, by that name,
	// rather than as a node that never confirmed once the window is out.
	if since := hb.TrustExpiredSince; since != nil && !t.confirmed {
		t.trouble = &NodeReason{Node: e.Node, Why: WhyTrustExpired, Since: *since,
			Detail: detail(wire.TrustExpiredLine(*since) + ": it runs what it has and takes no new target until a fresher root reaches it (`mesh-release trust publish`)")}
		return changeTrouble
	}
	if r := hb.Refused; r != nil && r.What == t.refusalWhat() && t.targetRev != 0 && r.Revision >= t.targetRev {
		t.trouble = &NodeReason{Node: e.Node, Why: WhyRefused, Since: r.At,
			Detail: detail(fmt.Sprintf("refused its target (revision %d) at %s: %s", r.Revision, clock(r.At), r.Error))}
		return changeTrouble
	}
	if f := hb.Fetch; f != nil && f.State == "failed" && f.Version == version && f.RetryAt.IsZero() {
		t.trouble = &NodeReason{Node: e.Node, Why: WhyRefused, Since: e.Heard,
			Detail: detail(fmt.Sprintf("could not fetch %s and will not try again: %s", version, f.Error))}
		return changeTrouble
	}
	confirmed := hb.State == wire.StateRunning && hb.Running == version && hb.KnownGood == version
	switch {
	case t.confirmed && (hb.Running != version || hb.State != wire.StateRunning):
		t.trouble = &NodeReason{Node: e.Node, Why: WhyRestarted, Since: e.Heard,
			Detail: detail(fmt.Sprintf("confirmed %s, then no longer ran it: state %s, running %s", version, field(hb.State), dash(field(hb.Running))))}
		return changeTrouble
	case t.confirmed && hb.UptimeS < t.lastUptime:
		t.trouble = &NodeReason{Node: e.Node, Why: WhyRestarted, Since: e.Heard,
			Detail: detail(fmt.Sprintf("%s restarted after confirming: up %s, was up %s", version, secs(hb.UptimeS), secs(t.lastUptime)))}
		return changeTrouble
	case t.confirmed:
		t.lastUptime = hb.UptimeS
		if !t.soaked && time.Duration(hb.UptimeS-t.firstUptime)*time.Second >= soak {
			t.soaked = true
			return changeSoaked
		}
	case confirmed:
		t.confirmed, t.firstUptime, t.lastUptime = true, hb.UptimeS, hb.UptimeS
		return changeConfirmed
	}
	return changeNone
}

// overdue judges what only time shows: a node silent past the window (unheard: for how long
// while the bus was up), or not confirmed within the window of its target being set (deadline).
// A node that said it waits for its maintenance window to stand aside is neither, until window
// past the window's opening; its deadline counts from that opening.
func (t *track) overdue(node, version string, now, deadline time.Time, window, unheard time.Duration) *NodeReason {
	if !t.judged() {
		return nil
	}
	if t.trouble != nil {
		return t.trouble
	}
	if !t.heard {
		return nil // left out when its batch began if it was never heard
	}
	if !t.windowOpens.IsZero() {
		if now.Before(t.windowOpens.Add(window)) && !t.confirmed {
			return nil // waiting for its window, by its own clock: it stands aside when it opens
		}
		if opened := t.windowOpens.Add(window); opened.After(deadline) {
			deadline = opened
		}
	}
	if age := now.Sub(t.last.Heard); unheard > window {
		return &NodeReason{Node: node, Why: WhySilent, Since: t.last.Heard,
			Detail: detail(fmt.Sprintf("unheard for %s, longer than the window %s; its last word at %s: %s", roundDur(age), window, clock(t.last.Heard), lastWord(t.last)))}
	}
	if !t.confirmed && now.After(deadline) {
		return &NodeReason{Node: node, Why: WhyNotConfirmed, Since: t.last.Heard,
			Detail: detail(fmt.Sprintf("did not confirm %s within the window %s of its target being set; its last word %s ago: %s",
				version, window, roundDur(now.Sub(t.last.Heard)), lastWord(t.last)))}
	}
	return nil
}

// lastWord describes a heartbeat in one bounded line: what the node was doing.
func lastWord(e fleet.Entry) string {
	if e.Err != nil {
		return "unreadable (" + field(e.Err.Error()) + ")"
	}
	hb := e.Heartbeat
	parts := []string{"state " + field(hb.State), "running " + dash(field(hb.Running)), "known good " + dash(field(hb.KnownGood)), "target " + dash(field(hb.Target))}
	if f := hb.Fetch; f != nil {
		s := fmt.Sprintf("fetch of %s %s", field(f.Version), field(f.State))
		if f.State == "fetching" {
			s += fmt.Sprintf(" %.0f%%", f.Percent)
			if f.StalledS > 0 {
				s += fmt.Sprintf(", stalled %ds", f.StalledS)
			}
		}
		if f.Error != "" {
			s += ": " + field(f.Error)
		}
		parts = append(parts, s)
	}
	if r := hb.Refused; r != nil {
		parts = append(parts, fmt.Sprintf("refused %s revision %d: %s", field(r.What), r.Revision, field(r.Error)))
	}
	if lr := hb.LastReconcile; lr != nil && !lr.OK {
		parts = append(parts, "last reconcile failed: "+field(lr.Error))
	}
	if hb.StandingAsideFor != "" {
		parts = append(parts, "standing aside for "+field(hb.StandingAsideFor))
	}
	if since := hb.TrustExpiredSince; since != nil {
		parts = append(parts, wire.TrustExpiredLine(*since))
	}
	parts = append(parts, "up "+secs(hb.UptimeS))
	return strings.Join(parts, ", ")
}

// text is a short bus-borne string made printable and bounded, for messages.
func text(s string) string { return txt.Cut(txt.Printable(s), maxFieldBytes) }

func field(s string) string { return text(strings.Join(strings.Fields(s), " ")) }

func detail(s string) string { return txt.Cut(txt.Printable(s), maxDetailBytes) }

// output keeps the failed version's output lines, each made printable, within
// wire.MaxOutputBytes; its last lines matter most, so the head is what is cut.
func output(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = txt.Printable(l)
	}
	out := strings.Join(lines, "\n")
	if len(out) <= wire.MaxOutputBytes {
		return out
	}
	const marker = "…[cut] "
	keep := out[len(out)-(wire.MaxOutputBytes-len(marker)):]
	if i := strings.IndexByte(keep, '\n'); i >= 0 && i < len(keep)-1 {
		keep = keep[i+1:]
	}
	return strings.ToValidUTF8(marker+keep, "")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "an unknown time"
	}
	return t.UTC().Format("15:04:05")
}

func secs(s int64) string { return (time.Duration(s) * time.Second).String() }

// roundDur is d rounded for a person: whole seconds, or tenths under 10s.
func roundDur(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
