package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Story is one node's whole story as its last heartbeat tells it (`mesh-release fleet NODE`):
// its row, judged by the fleet view's rules, with the whole heartbeat, and a timeline of what the
// heartbeat dates. The stream keeps a node's last heartbeat only; Heard lists the heartbeats seen
// while watching (--watch), newest last.
type Story struct {
	Row
	Timeline []Moment `json:"timeline"`
	Heard    []Beat   `json:"heard,omitempty"`
}

// Moment is one dated thing a heartbeat says.
type Moment struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Beat is one heartbeat seen while watching a node, in a line.
type Beat struct {
	At      time.Time `json:"at"` // when the server stored it
	State   string    `json:"state"`
	Running string    `json:"running"`
	UptimeS int64     `json:"uptime_s"`
	Status  string    `json:"status"`
}

// MaxHeard bounds Story.Heard: a watch keeps the newest.
const MaxHeard = 20

// StoryOf is e's story as of now, judged with o.
func StoryOf(e Entry, now time.Time, o RowOptions) Story {
	r := RowsWith([]Entry{e}, now, o)[0]
	return Story{Row: r, Timeline: timeline(e)}
}

// BeatOf is r as a line of a watch's list.
func BeatOf(r Row) Beat {
	h := Beat{At: r.LastHeard, State: r.State, Running: r.Running, Status: r.Status}
	if r.Heartbeat != nil {
		h.UptimeS = r.Heartbeat.UptimeS
	}
	return h
}

// maxTimeline bounds the timeline: a heartbeat holds a bounded number of dated things, but the
// rollbacks and drift lists are the host's to bound.
const maxTimeline = 40

// timeline is every dated thing e's heartbeat says, oldest first, the newest maxTimeline.
func timeline(e Entry) []Moment {
	var m []Moment
	add := func(at time.Time, what string) {
		if !at.IsZero() {
			m = append(m, Moment{At: at.UTC(), What: cell(what, maxTextCell)})
		}
	}
	add(e.Heard, "heard (the server stored its last heartbeat)")
	if e.Err != nil {
		return m
	}
	hb := e.Heartbeat
	if hb.UptimeS > 0 && !hb.SentAt.IsZero() {
		add(hb.SentAt.Add(-time.Duration(hb.UptimeS)*time.Second), "host started "+dash(cell(hb.Running, maxIDCell))+" (by its clock)")
	}
	add(hb.SentAt, "sent its last heartbeat (by its clock)")
	for _, rb := range hb.Rollbacks {
		add(rb.At, fmt.Sprintf("rolled back from %s to %s: %s", dash(cell(rb.From, maxIDCell)), dash(cell(rb.To, maxIDCell)), rb.Reason))
	}
	if l := hb.Launcher; l != nil && l.RolledBackFrom != "" {
		add(l.RolledBackAt, "launcher rolled back from "+cell(l.RolledBackFrom, maxIDCell)+": "+l.RollbackReason)
	}
	if lr := hb.LastReconcile; lr != nil {
		what := "reconciled (" + string(lr.Trigger) + "): ok"
		if !lr.OK {
			what = "reconcile (" + string(lr.Trigger) + ") failed: " + lr.Error
		}
		add(lr.At, what)
	}
	if r := hb.Refused; r != nil {
		add(r.At, fmt.Sprintf("refused %s revision %d: %s", r.What, r.Revision, r.Error))
	}
	if l := hb.Link; l != nil {
		add(l.At, fmt.Sprintf("could not reach the bus (%d attempts): %s", l.Attempts, l.LastError))
	}
	for _, d := range hb.Drift {
		add(d.At, "drift: "+driftText(d))
	}
	if p := hb.Profile; p != nil {
		add(p.DetectedAt, "profile detected")
	}
	if in := hb.Inventory; in != nil && in.Owned.AppliedAt != nil {
		add(*in.Owned.AppliedAt, "applied a declaration completely")
	}
	if t := hb.TargetExpiredSince; t != nil {
		add(*t, "the target in force expired")
	}
	if at, what, ok := trustMoment(hb); ok {
		add(at, what)
	}
	if f := hb.Fetch; f != nil && f.State == "failed" {
		add(f.RetryAt, "fetch of "+cell(f.Version, maxIDCell)+" retried")
	}
	sort.SliceStable(m, func(i, j int) bool { return m[i].At.Before(m[j].At) })
	if len(m) > maxTimeline {
		m = m[len(m)-maxTimeline:]
	}
	return m
}

func driftText(d wire.Drifted) string {
	s := cell(d.Type, maxIDCell) + " " + cell(d.ID, maxTextCell) + ": " + cell(d.What, maxTextCell)
	if d.Restored {
		s += " (restored)"
	}
	return s
}

// maxOutputLines is how many of a failed version's last output lines a rollback shows.
const maxOutputLines = 10

// WriteStory writes s for a person, as of now: the node's state, versions and platform, launcher,
// reconcile, fetch, refusal, link, withdrawal, then its rollbacks with the failed version's last
// output, drift, profile, inventory, timeline and, when watched, the heartbeats seen. Every text
// from the bus is made printable and bounded, as in the table.
func WriteStory(w io.Writer, s Story, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s\n", cell(s.Node, maxIDCell))
	kv := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(kv, "  %s\t%s\n", k, v) }
	line("STATE", dash(cell(s.Status, maxStatusCell)))
	line("last heard", s.LastHeard.Format(time.RFC3339)+" ("+ago(now.Sub(s.LastHeard))+")")
	if s.Problem != "" {
		line("problem", cell(s.Problem, maxTextCell))
	}
	hb := s.Heartbeat
	if hb == nil {
		kv.Flush()
		return writeRest(w, &b, s, now)
	}
	line("host", fmt.Sprintf("%s, running %s, up %s", dash(cell(hb.State, maxIDCell)), dash(cell(hb.Running, maxIDCell)), time.Duration(hb.UptimeS)*time.Second))
	line("platform", platformStory(hb.Profile))
	if ShowsTrust([]Row{s.Row}) {
		line("trust", cell(trustStory(s.Row, s.newest), maxHeaderCell))
	}
	if hb.StandingAsideFor != "" {
		line("standing aside for", cell(hb.StandingAsideFor, maxIDCell))
	}
	line("known-good", dash(cell(hb.KnownGood, maxIDCell)))
	target := dash(cell(hb.Target, maxIDCell))
	if t := hb.TargetExpiredSince; t != nil {
		target += " (expired since " + t.UTC().Format(time.RFC3339) + ")"
	}
	line("target", target)
	if len(hb.Staged) > 0 {
		staged := make([]string, 0, len(hb.Staged))
		for _, v := range hb.Staged {
			staged = append(staged, cell(v, maxIDCell))
		}
		line("staged", cell(strings.Join(staged, ", "), maxHeaderCell))
	}
	if s.Withdrawn != nil {
		line("withdrawn", "it runs a withdrawn version: "+cell(s.Withdrawn.Reason, maxTextCell))
	}
	line("launcher", launcherStory(hb.Launcher))
	line("declaration", fmt.Sprintf("revision %d", hb.DeclarationRevision))
	line("last reconcile", reconcileStory(hb.LastReconcile))
	if f := hb.Fetch; f != nil {
		line("fetch", fetchStory(f))
	}
	if r := hb.Refused; r != nil {
		line("refused", fmt.Sprintf("%s revision %d at %s: %s", cell(r.What, maxIDCell), r.Revision, r.At.UTC().Format(time.RFC3339), cellMiddle(r.Error, maxReconcileCell)))
	}
	if l := hb.Link; l != nil {
		line("link", fmt.Sprintf("could not reach the bus at %s (%d attempts): %s", l.At.UTC().Format(time.RFC3339), l.Attempts, cellMiddle(l.LastError, maxReconcileCell)))
	}
	if hb.Truncated {
		line("truncated", "the host cut this heartbeat to fit (docs/wire.md says what goes)")
	}
	kv.Flush()

	writeSections(&b, hb)
	return writeRest(w, &b, s, now)
}

// writeSections writes the story's sections from hb after its key lines: rollbacks with the
// failed version's last output, drift, profile and inventory.
func writeSections(b *strings.Builder, hb *wire.Heartbeat) {
	if len(hb.Rollbacks) > 0 {
		fmt.Fprintf(b, "\nrollbacks (%d, newest first)\n", len(hb.Rollbacks))
		for i := len(hb.Rollbacks) - 1; i >= 0; i-- {
			rb := hb.Rollbacks[i]
			fmt.Fprintf(b, "  %s  from %s to %s: %s\n", rb.At.UTC().Format(time.RFC3339), dash(cell(rb.From, maxIDCell)), dash(cell(rb.To, maxIDCell)), cell(rb.Reason, maxTextCell))
			for _, l := range lastLines(rb.Output, maxOutputLines) {
				fmt.Fprintf(b, "    | %s\n", l)
			}
		}
	}
	if len(hb.Drift) > 0 {
		fmt.Fprintf(b, "\ndrift (%d, oldest first)\n", len(hb.Drift))
		for _, d := range hb.Drift {
			fmt.Fprintf(b, "  %s  %s\n", d.At.UTC().Format(time.RFC3339), driftText(d))
		}
	}
	if p := hb.Profile; p != nil {
		b.WriteString("\nprofile\n")
		fmt.Fprintf(b, "  %s\n", profileStory(p))
	}
	if in := hb.Inventory; in != nil {
		b.WriteString("\ninventory\n")
		for _, l := range inventoryStory(in) {
			fmt.Fprintf(b, "  %s\n", l)
		}
	}
}

// writeRest writes the timeline and the heartbeats seen, then all of b to w.
func writeRest(w io.Writer, b *strings.Builder, s Story, now time.Time) error {
	if len(s.Timeline) > 0 {
		b.WriteString("\ntimeline (what its last heartbeat dates; the node's clock where it says so)\n")
		for _, m := range s.Timeline {
			fmt.Fprintf(b, "  %s  %s\n", m.At.Format(time.RFC3339), m.What)
		}
	}
	if len(s.Heard) > 0 {
		fmt.Fprintf(b, "\nheartbeats seen while watching (%d, newest last)\n", len(s.Heard))
		tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
		for _, h := range s.Heard {
			fmt.Fprintf(tw, "  %s\t%s\t%s\tup %s\t%s\n", h.At.UTC().Format(time.TimeOnly), dash(cell(h.State, maxIDCell)),
				dash(cell(h.Running, maxIDCell)), time.Duration(h.UptimeS)*time.Second, dash(cell(h.Status, maxStatusCell)))
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func launcherStory(l *wire.Launcher) string {
	if l == nil {
		return "- (the heartbeat does not say)"
	}
	s := launcherText(l)
	if l.Floor != "" {
		s += ", floor " + cell(l.Floor, maxIDCell)
	}
	if l.RolledBackFrom != "" && !l.RolledBackAt.IsZero() {
		s += ", rolled back at " + l.RolledBackAt.UTC().Format(time.RFC3339)
		if l.RollbackReason != "" {
			s += ": " + cell(l.RollbackReason, maxTextCell)
		}
	}
	return s
}

func reconcileStory(lr *wire.LastReconcile) string {
	if lr == nil {
		return "- (none yet)"
	}
	s := fmt.Sprintf("at %s (%s, %d ms): ", lr.At.UTC().Format(time.RFC3339), cell(string(lr.Trigger), maxIDCell), lr.DurationMS)
	if lr.OK {
		return s + "ok"
	}
	return s + "failed: " + cellMiddle(lr.Error, maxReconcileCell)
}

func fetchStory(f *wire.Fetch) string {
	s := cell(f.State, maxIDCell) + " " + dash(cell(f.Version, maxIDCell))
	if f.Total > 0 {
		s += fmt.Sprintf(": %s of %s (%.0f%%)", bytesText(f.Bytes), bytesText(f.Total), min(max(f.Percent, 0), 100))
	} else if f.Bytes > 0 {
		s += ": " + bytesText(f.Bytes)
	}
	if f.RateBPS > 0 {
		s += ", " + bytesText(f.RateBPS) + "/s"
	}
	if f.StalledS > 0 {
		s += fmt.Sprintf(", stalled %s", time.Duration(min(f.StalledS, maxSpanS))*time.Second)
	}
	if f.Error != "" {
		s += ": " + cellMiddle(f.Error, maxReconcileCell)
	}
	if !f.RetryAt.IsZero() {
		s += ", retry at " + f.RetryAt.UTC().Format(time.RFC3339)
	}
	if f.LauncherNote != "" {
		s += "; " + cell(f.LauncherNote, maxTextCell)
	}
	return s
}

func profileStory(p *wire.Profile) string {
	parts := []string{cell(p.OS+" "+p.Arch, maxIDCell)}
	if p.OSID != "" {
		parts = append(parts, cell(p.OSID+" "+p.OSVersion, maxIDCell))
	}
	if p.Kernel != "" {
		parts = append(parts, "kernel "+cell(p.Kernel, maxIDCell))
	}
	sd := "systemd " + dash(cell(p.Systemd, maxIDCell))
	if p.SystemdVersion != "" {
		sd += " " + cell(p.SystemdVersion, maxIDCell)
	}
	if p.SystemdError != "" {
		sd += " (" + cell(p.SystemdError, maxTextCell) + ")"
	}
	parts = append(parts, sd, "package manager "+dash(cell(p.PackageManager, maxIDCell)), "container runtime "+dash(cell(p.ContainerRuntime, maxIDCell)))
	if !p.DetectedAt.IsZero() {
		parts = append(parts, "detected "+p.DetectedAt.UTC().Format(time.RFC3339))
	}
	return strings.Join(parts, ", ")
}

func inventoryStory(in *wire.Inventory) []string {
	out := []string{fmt.Sprintf("hostname %s, machine id %s, %d CPUs, %s memory", dash(cell(in.Hostname, maxIDCell)),
		dash(cell(in.MachineID, maxIDCell)), in.CPUs, bytesText(int64(min(in.MemoryBytes, 1<<62))))}
	for _, d := range in.Disks {
		out = append(out, fmt.Sprintf("disk %s: %s free of %s", cell(d.Path, maxTextCell), bytesText(int64(min(d.FreeBytes, 1<<62))), bytesText(int64(min(d.TotalBytes, 1<<62)))))
	}
	owned := fmt.Sprintf("owns %d %s", in.Owned.Total, text.Plural(in.Owned.Total, "resource", "resources"))
	kinds := make([]string, 0, len(in.Owned.ByType))
	for k, n := range in.Owned.ByType {
		kinds = append(kinds, fmt.Sprintf("%s %d", cell(k, maxIDCell), n))
	}
	sort.Strings(kinds)
	if len(kinds) > 0 {
		owned += " (" + strings.Join(kinds, ", ") + ")"
	}
	if in.Owned.AppliedAt != nil {
		owned += ", last applied completely " + in.Owned.AppliedAt.UTC().Format(time.RFC3339)
	}
	return append(out, cell(owned, maxHeaderCell))
}

// lastLines is out's last n non-blank lines, each printable and bounded.
func lastLines(out string, n int) []string {
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = cell(l, maxTextCell)
	}
	return lines
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// WriteStoryJSON writes s as one indented JSON object (one line when line is true), no
// character a terminal could act on written raw (text.PrintableJSON).
func WriteStoryJSON(w io.Writer, s Story, line bool) error {
	var b []byte
	var err error
	if line {
		b, err = json.Marshal(s)
	} else {
		b, err = json.MarshalIndent(s, "", "  ")
	}
	if err != nil {
		return err
	}
	_, err = w.Write(append(text.PrintableJSON(b), '\n'))
	return err
}

// Story is node's story as of now from the view, judged with o as RowsWith judges it (a restart
// the view saw included); false when the view holds nothing of node.
func (v *View) Story(node string, now time.Time, o RowOptions) (Story, bool) {
	v.mu.Lock()
	e, ok := v.entries[node]
	r, seen := v.restarts[node]
	v.mu.Unlock()
	if !ok {
		return Story{}, false
	}
	restarted := map[string]bool{}
	if seen && e.Err == nil && e.Heartbeat.Running == r.running && now.Sub(r.seen) < RestartShownFor {
		restarted[node] = true
	}
	return Story{Row: rows([]Entry{e}, now, o, restarted)[0], Timeline: timeline(e)}, true
}

// KindsOf counts rs by their status kind.
func KindsOf(rs []Row) map[Kind]int {
	m := make(map[Kind]int)
	for _, r := range rs {
		m[r.StatusKind]++
	}
	return m
}

// LauncherText is the LAUNCHER column's text for l.
func LauncherText(l *wire.Launcher) string { return launcherText(l) }

// Ago is how long ago d was, as the table says it.
func Ago(d time.Duration) string { return ago(d) }
