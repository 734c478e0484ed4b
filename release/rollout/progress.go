package rollout

import (
	"fmt"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// quietProgress is how many Progress intervals go by without an event while nothing but the
// clock changes: a soak of minutes is a few lines with the time left, not one every interval.
const quietProgress = 5

// progressView is what a progress event says of the batch in progress.
type progressView struct {
	confirmed, soaked, nodes int
	elapsed, windowLeft      time.Duration
	// soaking are the confirmed nodes still in their soak by the controller's clock, soakLeft
	// the time until the last of them is through it.
	soaking  int
	soakLeft time.Duration
	// waiting are the nodes whose soak is over by the clock but not yet shown: their next
	// heartbeat must show the uptime (at most maxListed; waitingN counts them all). For one,
	// heardAgo is since its last heartbeat and every how often it heartbeats, as its heartbeat
	// says (0: unknown, a host older than interval_s).
	waiting  []string
	waitingN int
	heardAgo time.Duration
	every    time.Duration
	busAway  bool
	moved    int64 // the fleet's bytes moved so far (not in the gist: it alone is no news)
	// windows are the nodes that staged the version and wait for their maintenance windows, in
	// batch order (at most maxListed; windowsN counts them all).
	windows  []NodeWindow
	windowsN int
	// platforms is the batch by platform (nil when its nodes said none).
	platforms []PlatformOutcome
}

// gist is what the view says beyond the clock: an event is due when it changes.
func (v progressView) gist() string {
	return fmt.Sprintf("%d/%d/%d soaking %d waiting %d %v away %v windows %d %v", v.confirmed, v.soaked, v.nodes, v.soaking, v.waitingN, v.waiting, v.busAway, v.windowsN, v.windows)
}

// progressSaid is the last progress event emitted: its gist, and when.
type progressSaid struct {
	gist string
	at   time.Time
}

// due reports whether a progress event of gist is to be emitted at now: it says something new,
// or the last one is quiet old.
func (p progressSaid) due(gist string, now time.Time, quiet time.Duration) bool {
	return p.at.IsZero() || gist != p.gist || now.Sub(p.at) >= quiet
}

// progress emits EventProgress when due (every is Config.Progress).
func (r *runner) progress(now time.Time, every time.Duration) {
	r.lastProgress = now
	v := r.progressView(now)
	gist := v.gist()
	if !r.said.due(gist, now, quietProgress*every) {
		return
	}
	r.said = progressSaid{gist: gist, at: now}
	i := r.st.Current
	ev := Event{Kind: EventProgress, Batch: i + 1, Batches: len(r.st.Batches), BatchName: r.st.Batches[i].Name,
		Nodes: v.nodes, Confirmed: v.confirmed, Soaked: v.soaked, ElapsedS: v.elapsed.Seconds(), WindowLeftS: v.windowLeft.Seconds(),
		Waiting: v.waiting, WindowWaiting: v.windows, BytesMoved: v.moved, Platforms: v.platforms, Message: progressMessage(r.st, i, v)}
	if v.soaking > 0 {
		ev.SoakLeftS = v.soakLeft.Seconds()
	}
	r.c.emit(&r.st, ev)
}

func (r *runner) progressView(now time.Time) progressView {
	i := r.st.Current
	started := r.st.Batches[i].Started
	v := progressView{confirmed: r.confirmedN, soaked: r.soakedN, nodes: r.judgedN, elapsed: now.Sub(started),
		windowLeft: max(started.Add(r.window+r.paused).Sub(now), 0), busAway: !r.wasUp, moved: r.moved(), platforms: r.batchOutcomes(i, nil)}
	for _, n := range r.st.BatchNodes(i) {
		t := r.tracks[n]
		if opens, ok := t.waitingForWindow(r.version); ok && t.judged() && t.trouble == nil {
			if v.windowsN++; len(v.windows) < maxListed {
				v.windows = append(v.windows, NodeWindow{Node: n, Opens: opens})
			}
		}
		if !t.judged() || !t.confirmed || t.soaked || t.trouble != nil {
			continue
		}
		if left := t.soakLeft(r.soak, now); left > 0 {
			v.soaking++
			v.soakLeft = max(v.soakLeft, left)
			continue
		}
		if v.waitingN++; v.waitingN == 1 {
			v.heardAgo, v.every = now.Sub(t.last.Heard), t.interval()
		}
		if len(v.waiting) < maxListed {
			v.waiting = append(v.waiting, n)
		}
	}
	return v
}

// maxInterval bounds the heartbeat interval a heartbeat states (a week): what is beyond it is no
// interval a person waits on, and would overflow a time.Duration.
const maxInterval = 7 * 24 * time.Hour

// interval is how often the node heartbeats, as its last heartbeat says; 0 when it does not say
// (a host older than interval_s) or says what cannot be.
func (t *track) interval() time.Duration {
	s := t.last.Heartbeat.IntervalS
	if t.last.Err != nil || !(s > 0) || s > maxInterval.Seconds() {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// soakLeft is how much of its soak a confirmed node has left by the controller's clock: the
// soak less the uptime its heartbeats showed since it confirmed and the time since the last.
// Only a heartbeat ends it (the node's own uptime is what is judged), so at 0 the node waits
// for its next one.
func (t *track) soakLeft(soak time.Duration, now time.Time) time.Duration {
	return soak - time.Duration(t.lastUptime-t.firstUptime)*time.Second - now.Sub(t.last.Heard)
}

// progressMessage says v in one line: "batch 1/3 (canary): 1/2 confirmed, 0/2 soaked; 40s
// elapsed, 9m20s left in the window; about 1m20s of the soak left".
func progressMessage(st State, i int, v progressView) string {
	m := fmt.Sprintf("%s: %d/%d confirmed, %d/%d soaked", batchLabel(st, i), v.confirmed, v.nodes, v.soaked, v.nodes)
	if by := progressText(v.platforms); by != "" {
		m += " (" + by + ")"
	}
	m += "; " + human(v.elapsed) + " elapsed"
	if v.confirmed < v.nodes {
		m += fmt.Sprintf(", %s left in the window", human(v.windowLeft))
	}
	if v.soaking > 0 {
		m += fmt.Sprintf("; about %s of the soak left", human(v.soakLeft))
	}
	if v.waitingN > 0 {
		names := strings.Join(v.waiting, ", ")
		if more := v.waitingN - len(v.waiting); more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		m += "; soak over, waiting for the next heartbeat of " + names
		if v.waitingN == 1 {
			m += fmt.Sprintf(" (last heard %s ago", human(v.heardAgo))
			if v.every > 0 {
				// Only a heartbeat ends a soak, and the next may be a whole interval away.
				m += fmt.Sprintf("; it heartbeats every %s, so a soak can last up to %s more", human(v.every), human(v.every))
			}
			m += ")"
		}
	}
	if v.moved > 0 {
		m += "; " + movedText(v.moved) + " moved"
	}
	if v.windowsN > 0 {
		parts := make([]string, len(v.windows))
		for i, w := range v.windows {
			parts[i] = fmt.Sprintf("%s (opens %s)", w.Node, w.Opens.Format(wire.WindowTimeLayout))
		}
		names := strings.Join(parts, ", ")
		if more := v.windowsN - len(v.windows); more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		m += fmt.Sprintf("; %d staged and waiting for %s maintenance window: %s", v.windowsN, txt.Plural(v.windowsN, "its", "their"), names)
	}
	if v.busAway {
		m += "; judging paused: the bus is away"
	}
	return m
}

// moved is the fleet's bytes moved so far: each node's most, as its heartbeats said.
func (r *runner) moved() int64 {
	var n int64
	for _, t := range r.tracks {
		n += t.moved
	}
	return n
}

// movedText writes bytes moved in decimal units, as link budgets are counted: "2.1 MB",
// "366 KB", "912 bytes".
func movedText(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f KB", float64(n)/1e3)
	}
	return fmt.Sprintf("%d bytes", n)
}

// waitingForWindow reports whether the node's last heartbeat says it staged version and waits
// for its maintenance window, and when that opens.
func (t *track) waitingForWindow(version string) (time.Time, bool) {
	w := t.last.Heartbeat.Window
	if !t.heard || t.last.Err != nil || w == nil || w.WaitingFor != version || t.confirmed {
		return time.Time{}, false
	}
	return w.Opens, true
}
