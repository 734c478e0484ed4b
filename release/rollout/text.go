package rollout

import (
	"encoding/json"
	"fmt"
	txt "github.com/novox/mesh-host/internal/text"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// What a person reads of a rollout: its events as lines (--follow, and the milestones every
// controller prints), its state as `rollout status` shows it, and the one line `mesh-release
// fleet` puts on top. Node ids, details and output lines came from the bus, where anyone allowed
// to publish could have written them: every text is made printable (text.Printable) and
// bounded (text.Cut) here, so no escape sequence reaches a terminal and one node stays one
// line, and a long list is cut to a few with a count of the rest.
const (
	maxIDText      = 64   // a node id, a version, a rollout id, a holder
	maxLineText    = 1024 // a message or a detail (a rollback's reason alone may be wire.MaxReasonBytes)
	maxOutputLines = 10   // the last lines of a failed version's output shown per node
	maxOutputLine  = 200  // each of them
	shownNodes     = 20   // nodes listed per batch, the rest counted
)

// WriteEvent writes e for a person: its time (hh:mm:ss in e.Time's zone) and message on one
// line, and for EventHalted one indented line per node saying why, each followed by the last
// lines of the failed version's output, indented further.
func WriteEvent(w io.Writer, e Event) error {
	var b strings.Builder
	msg := e.Message
	if msg == "" {
		msg = e.Kind + " " + e.Rollout
	}
	fmt.Fprintf(&b, "%s %s\n", e.Time.Format(time.TimeOnly), oneLine(msg, maxLineText))
	if e.Kind == EventHalted {
		for _, r := range e.Reasons {
			writeReason(&b, r, e.Time, "  ")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteEventJSON writes e as one JSON object on one line, terminal-safe (text.PrintableJSON).
func WriteEventJSON(w io.Writer, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = w.Write(append(txt.PrintableJSON(b), '\n'))
	return err
}

// WriteStatusJSON writes st as indented JSON, terminal-safe.
func WriteStatusJSON(w io.Writer, st State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(txt.PrintableJSON(b), '\n'))
	return err
}

// writeReason writes one node's part in a halt, "  node-3: " and its detail (which the
// controller writes as a whole sentence: "rolled back from v1.2.0 to v1.1.0 at 13:15:02: …"),
// or without one why in words; below it the last lines of the failed version's output.
func writeReason(b *strings.Builder, r NodeReason, ref time.Time, indent string) {
	say := oneLine(r.Detail, maxLineText)
	if say == "" {
		say = whyText(r, ref)
	}
	fmt.Fprintf(b, "%s%s: %s\n", indent, oneLine(r.Node, maxIDText), say)
	for _, l := range outputLines(r.Output) {
		fmt.Fprintf(b, "%s    | %s\n", indent, l)
	}
}

// whyText says a halt reason in words, with its time when it has one (times in ref's zone, with
// the date when not ref's day).
func whyText(r NodeReason, ref time.Time) string {
	at := ""
	if !r.Since.IsZero() {
		at = clockAt(r.Since, ref)
	}
	switch r.Why {
	case WhySilent:
		if at != "" {
			return "silent since " + at
		}
		return "silent"
	case WhyRolledBack:
		if at != "" {
			return "rolled back at " + at
		}
		return "rolled back"
	case WhyLauncherRolledBack:
		if at != "" {
			return "launcher rolled back at " + at
		}
		return "launcher rolled back"
	case WhyRestarted:
		return "restarted after confirming"
	case WhyRefused:
		return "refused the version"
	case WhyNotConfirmed:
		return "not confirmed within the window"
	case WhyTrustExpired:
		if !r.Since.IsZero() {
			return "trust expired since " + clockAt(r.Since, ref)
		}
		return "trust expired"
	}
	return oneLine(r.Why, maxIDText)
}

// outputLines is the last maxOutputLines non-blank lines of out, each printable and bounded.
func outputLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > maxOutputLines {
		lines = lines[len(lines)-maxOutputLines:]
	}
	for i, l := range lines {
		lines[i] = txt.Cut(txt.Printable(strings.TrimRight(l, " \t")), maxOutputLine)
	}
	return lines
}

// WriteStatus writes st as `mesh-release rollout status` shows it, as of now (whose zone the
// times are shown in): what it is, what it was asked, each batch and its nodes, the nodes left
// out, and why it halted — one section each.
func WriteStatus(w io.Writer, st State, now time.Time) error {
	var b strings.Builder
	fmt.Fprintf(&b, "rollout %s\n", oneLine(st.ID, maxIDText))
	writeStatusHead(&b, st, now)
	writeStatusBatches(&b, st, now)
	writeStatusLeftOut(&b, st, now)
	writeStatusSkipped(&b, st)
	writeStatusHalt(&b, st, now)
	_, err := io.WriteString(w, b.String())
	return err
}

// writeStatusHead is the rollout's keys and values: what it is and what it was asked.
func writeStatusHead(b *strings.Builder, st State, now time.Time) {
	kv := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(kv, "  version\t%s\n", oneLine(st.Version, maxIDText))
	fmt.Fprintf(kv, "  policy\t%s\n", policyWords(st))
	fmt.Fprintf(kv, "  status\t%s\n", statusWords(st, now))
	fmt.Fprintf(kv, "  created\t%s\n", stampAt(st.Created, now))
	fmt.Fprintf(kv, "  updated\t%s\n", stampAt(st.Updated, now))
	if !st.Ended.IsZero() {
		fmt.Fprintf(kv, "  ended\t%s\n", stampAt(st.Ended, now))
	}
	if st.Status == StatusRunning {
		fmt.Fprintf(kv, "  controller\t%s\n", holderWords(st.Holder, now))
	}
	if st.Policy != PolicyImmediate {
		fmt.Fprintf(kv, "  options\twindow %s, soak %s, alive %s, silent after %s\n",
			secondsText(st.WindowS), secondsText(st.SoakS), secondsText(st.AliveS), secondsText(st.SilentAfterS))
	}
	fmt.Fprintf(kv, "  fleet\t%s\n", fleetWords(st))
	if st.Plan != nil {
		old := len(st.perNodeNodes())
		fmt.Fprintf(kv, "  plan\tone signed plan the nodes evaluate (salt %s, waves %s); %s read it, %s given a target of its own\n",
			st.Plan.Salt, wavesText(st.Plan.Waves), countOf(len(st.Nodes)-old, "node", "nodes"), countOf(old, "node", "nodes"))
	}
	if st.BytesMoved > 0 {
		fmt.Fprintf(kv, "  moved\t%s fetched by the nodes delivering it (as their heartbeats said, to the last batch done)\n", movedText(st.BytesMoved))
	}
	if st.Urgent {
		fmt.Fprintf(kv, "  urgent\ttargets signed urgent: nodes do not wait for their maintenance windows\n")
	}
	if st.Status == StatusHalted || st.Status == StatusAborted {
		fmt.Fprintf(kv, "  targets\t%s\n", restoredWords(st))
	}
	if st.SupersededBy != "" {
		fmt.Fprintf(kv, "  superseded by\t%s\n", oneLine(st.SupersededBy, maxIDText))
	}
	if st.AbortedBy != "" {
		fmt.Fprintf(kv, "  aborted by\t%s\n", oneLine(st.AbortedBy, maxIDText))
	}
	kv.Flush()
}

// fleetWords is "6 nodes in 3 batches, 1 left out, 2 on metered links deferred to the last batch".
func fleetWords(st State) string {
	fleet := countOf(len(st.Nodes), "node", "nodes")
	if len(st.Batches) > 0 {
		fleet += " in " + countOf(len(st.Batches), "batch", "batches")
	}
	if n := len(st.LeftOut) + st.LeftOutMore; n > 0 {
		fleet += fmt.Sprintf(", %d left out", n)
	}
	if st.Metered > 0 {
		fleet += fmt.Sprintf(", %d on metered links deferred to the last batch", st.Metered)
	}
	if n := skippedNodes(st); n > 0 || len(st.Skipped) > 0 {
		fleet += fmt.Sprintf(", %d left out by platform (below)", n)
	}
	return fleet
}

// skippedNodes is how many nodes st left out by platform.
func skippedNodes(st State) int {
	n := 0
	for _, s := range st.Skipped {
		n += s.Nodes
	}
	return n
}

// writeStatusSkipped is the nodes left out by platform, one line a platform (bounded).
func writeStatusSkipped(b *strings.Builder, st State) {
	if len(st.Skipped) == 0 {
		return
	}
	b.WriteString("\nleft out by platform (never targeted by this rollout; their hosts refuse a fleet target they cannot take, by name, and keep what they run)\n")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	for i, s := range st.Skipped {
		if i == shownNodes {
			fmt.Fprintf(tw, "  and %d more\n", len(st.Skipped)-shownNodes)
			break
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", oneLine(s.Platform, maxIDText), countOf(s.Nodes, "node", "nodes"), skippedWhy(st, s))
	}
	tw.Flush()
}

// skippedWhy says why a platform's nodes were left out.
func skippedWhy(st State, s SkippedPlatform) string {
	v := oneLine(st.Version, maxIDText)
	switch s.Why {
	case SkipNoBuild:
		return fmt.Sprintf("--skip-platform: %s has no %s build", v, oneLine(s.Platform, maxIDText))
	case SkipAsked:
		return "--skip-platform (the version has a build for it)"
	case SkipOldHosts:
		return fmt.Sprintf("--skip-old-hosts: their hosts cannot read %s's manifest schema", v)
	}
	return oneLine(s.Why, maxIDText)
}

// platformsCell is a batch's nodes by platform: "linux/amd64 2, linux/arm64 1" (bounded).
func platformsCell(cs []PlatformCount) string {
	parts := make([]string, 0, len(cs))
	for i, c := range cs {
		if i == maxPlatformsNamed {
			parts = append(parts, fmt.Sprintf("and %d more platforms", len(cs)-maxPlatformsNamed))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", oneLine(c.Platform, maxIDText), c.Nodes))
	}
	return strings.Join(parts, ", ")
}

// writeStatusBatches is each batch, where it is and its nodes (bounded).
func writeStatusBatches(b *strings.Builder, st State, now time.Time) {
	if len(st.Batches) == 0 {
		return
	}
	b.WriteString("\nbatches\n")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	start := 0
	mixed := st.mixedBatches()
	for i, bt := range st.Batches {
		end := clampedEnd(bt.End, start, len(st.Nodes))
		nodes := st.Nodes[start:end]
		size := countOf(len(nodes), "node", "nodes")
		if mixed && len(bt.Platforms) > 0 {
			size += " (" + platformsCell(bt.Platforms) + ")"
		}
		fmt.Fprintf(tw, "  %d/%d\t%s\t%s\t%s\t%s\n", i+1, len(st.Batches), oneLine(bt.Name, maxIDText),
			size, batchWhere(st, i, now), shownList(nodes))
		start = end
	}
	tw.Flush()
}

// writeStatusLeftOut is the nodes left out, the first shownNodes of them.
func writeStatusLeftOut(b *strings.Builder, st State, now time.Time) {
	if len(st.LeftOut)+st.LeftOutMore == 0 {
		return
	}
	b.WriteString("\nleft out (silent when their batch began; they take the fleet target when it is set)\n")
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	for i, l := range st.LeftOut {
		if i == shownNodes {
			break
		}
		fmt.Fprintf(tw, "  %s\tbatch %s\tsilent since %s (%s)\n", oneLine(l.Node, maxIDText), batchOf(st, l.Batch),
			clockAt(l.SilentSince, now), agoText(now.Sub(l.SilentSince)))
	}
	if more := len(st.LeftOut) - min(len(st.LeftOut), shownNodes) + st.LeftOutMore; more > 0 {
		fmt.Fprintf(tw, "  and %d more\n", more)
	}
	tw.Flush()
}

// writeStatusHalt is why the rollout halted, node by node.
func writeStatusHalt(b *strings.Builder, st State, now time.Time) {
	h := st.Halt
	if h == nil {
		return
	}
	n := len(h.Nodes) + h.More
	fmt.Fprintf(b, "\nhalted at %s in batch %s: %s showed trouble\n", clockAt(h.At, now), batchOf(st, h.Batch), countOf(n, "node", "nodes"))
	if by := st.HaltByPlatform(); by != "" {
		fmt.Fprintf(b, "  by platform: %s\n", by)
	}
	for _, r := range h.Nodes {
		writeReason(b, r, now, "  ")
	}
	if h.More > 0 {
		fmt.Fprintf(b, "  and %s more\n", countOf(h.More, "node", "nodes"))
	}
}

// MaxSummaryBytes bounds Summary: a line above the fleet table.
const MaxSummaryBytes = 240

// Summary is st in one line of at most MaxSummaryBytes, for the top of `mesh-release fleet`.
func Summary(st State, now time.Time) string {
	return txt.Cut(summary(st, now), MaxSummaryBytes)
}

func summary(st State, now time.Time) string {
	head := "rollout " + oneLine(st.Version, maxIDText)
	switch st.Status {
	case StatusRunning:
		s := fmt.Sprintf("%s (%s): %s", head, oneLine(st.ID, maxIDText), runningWord(st, now))
		if st.Current < len(st.Batches) {
			s += ", batch " + batchOf(st, st.Current)
		} else if len(st.Batches) > 0 {
			s += ", every batch done, setting the fleet target"
		}
		s += ", started " + agoText(now.Sub(st.Created))
		if st.Paused(now) {
			s += "; no controller drives it (`mesh-release rollout resume` continues it)"
		}
		return s
	case StatusHalted:
		s := fmt.Sprintf("%s: HALTED", head)
		if h := st.Halt; h != nil {
			s += fmt.Sprintf(" in batch %s at %s", batchOf(st, h.Batch), minuteAt(h.At, now))
			switch n := len(h.Nodes) + h.More; {
			case troubledPlatforms(st, h) != "":
				s += " — " + troubledPlatforms(st, h)
			case n == 1 && len(h.Nodes) == 1:
				s += fmt.Sprintf(" — %s %s", oneLine(h.Nodes[0].Node, maxIDText), whyText(NodeReason{Why: h.Nodes[0].Why}, now))
			case n > 0:
				s += fmt.Sprintf(" — %d nodes showed trouble", n)
			}
		}
		if !st.Restored {
			s += "; targets not yet set back"
		}
		return s + " (`mesh-release rollout status`)"
	case StatusCompleted:
		if st.Policy == PolicyImmediate {
			return fmt.Sprintf("%s: set as the fleet target at once (policy immediate) %s", head, agoText(now.Sub(endedAt(st))))
		}
		return fmt.Sprintf("%s: completed %s, %s", head, agoText(now.Sub(endedAt(st))), countOf(len(st.Nodes), "node", "nodes"))
	case StatusAborted:
		s := head + ": aborted"
		if st.AbortedBy != "" {
			s += " by " + oneLine(st.AbortedBy, maxIDText)
		}
		if st.Current < len(st.Batches) {
			s += " in batch " + batchOf(st, st.Current)
		}
		return s + " at " + minuteAt(endedAt(st), now)
	case StatusSuperseded:
		s := head + ": superseded"
		if st.SupersededBy != "" {
			s += " by " + oneLine(st.SupersededBy, maxIDText)
		}
		return s + " at " + minuteAt(endedAt(st), now)
	}
	return fmt.Sprintf("%s: %s", head, oneLine(string(st.Status), maxIDText))
}

// troubledPlatforms is the platforms of a halt that showed trouble, said as outcomesText does:
// "2 of 2 linux/arm64 canaries rolled back"; "" when the halt says none by platform.
func troubledPlatforms(st State, h *Halt) string {
	if len(h.Platforms) < 2 {
		return ""
	}
	var bad []PlatformOutcome
	for _, o := range h.Platforms {
		if o.Troubled > 0 {
			bad = append(bad, o)
		}
	}
	return outcomesText(bad, isCanary(st, h.Batch))
}

// isCanary reports whether batch i is the canaries.
func isCanary(st State, i int) bool {
	return i >= 0 && i < len(st.Batches) && st.Batches[i].Name == "canary"
}

func policyWords(st State) string {
	if st.Policy == PolicyImmediate {
		return "immediate: the fleet target at once, no batches"
	}
	canaries := countOf(st.Canary, "canary", "canaries")
	if len(st.CanaryNodes) > 0 {
		canaries = "canaries " + shownList(st.CanaryNodes)
	}
	return fmt.Sprintf("%s: %s, then %s of the fleet", oneLine(string(st.Policy), maxIDText), canaries, FormatSteps(st.Steps))
}

func statusWords(st State, now time.Time) string {
	switch st.Status {
	case StatusRunning:
		if st.Current < len(st.Batches) {
			return runningWord(st, now) + ", batch " + batchOf(st, st.Current)
		}
		return runningWord(st, now)
	case StatusHalted:
		if h := st.Halt; h != nil {
			return fmt.Sprintf("HALTED in batch %s at %s", batchOf(st, h.Batch), clockAt(h.At, now))
		}
		return "HALTED"
	case StatusCompleted:
		return "completed: the fleet target is " + oneLine(st.Version, maxIDText)
	}
	return oneLine(string(st.Status), maxIDText)
}

// runningWord is what a running rollout is doing: "running" while a controller holds its lease,
// else "paused" (see State.Paused).
func runningWord(st State, now time.Time) string {
	if st.Paused(now) {
		return "paused"
	}
	return "running"
}

func holderWords(h *Holder, now time.Time) string {
	if h == nil {
		return "none: no controller drives it (`mesh-release rollout resume` continues it)"
	}
	id := oneLine(h.ID, maxIDText)
	if !h.Until.After(now) {
		return fmt.Sprintf("none since %s (%s's lease lapsed): `mesh-release rollout resume` continues it", clockAt(h.Until, now), id)
	}
	return fmt.Sprintf("%s, lease until %s (in %s)", id, clockAt(h.Until, now), shortDur(h.Until.Sub(now)))
}

// restoredWords says whether the stopped batch's targets are back to what each node ran.
func restoredWords(st State) string {
	i := st.Current
	if st.Halt != nil {
		i = st.Halt.Batch
	}
	if i < 0 || i >= len(st.Batches) || st.Batches[i].Started.IsZero() {
		return "none were set by this rollout"
	}
	if st.Restored {
		return fmt.Sprintf("batch %s set back to the version each node ran", batchOf(st, i))
	}
	return fmt.Sprintf("batch %s NOT yet set back to the version each node ran; `mesh-release rollout resume` sets them back", batchOf(st, i))
}

// batchWhere says where batch i is.
func batchWhere(st State, i int, now time.Time) string {
	bt := st.Batches[i]
	switch {
	case !bt.Done.IsZero():
		return "done " + clockAt(bt.Done, now)
	case bt.Started.IsZero():
		if st.Status == StatusRunning {
			return "pending"
		}
		return "not reached"
	case st.Halt != nil && st.Halt.Batch == i:
		return "HALTED " + clockAt(st.Halt.At, now)
	case st.Status == StatusRunning && i == st.Current:
		return "in progress since " + clockAt(bt.Started, now)
	}
	return fmt.Sprintf("%s, started %s", oneLine(string(st.Status), maxIDText), clockAt(bt.Started, now))
}

// batchOf is "2/4 (10%)" for index i; an index outside the batches is said as it is.
func batchOf(st State, i int) string {
	if i < 0 || i >= len(st.Batches) {
		return fmt.Sprintf("%d/%d", i+1, len(st.Batches))
	}
	return fmt.Sprintf("%d/%d (%s)", i+1, len(st.Batches), oneLine(st.Batches[i].Name, maxIDText))
}

// clampedEnd keeps a batch's end inside the node list even if the stored state is inconsistent.
func clampedEnd(end, start, n int) int {
	return max(start, min(end, n))
}

// shownList is the first shownNodes of nodes, printable, then how many more.
func shownList(nodes []string) string {
	shown := make([]string, 0, min(len(nodes), shownNodes)+1)
	for i, n := range nodes {
		if i == shownNodes {
			shown = append(shown, fmt.Sprintf("and %d more", len(nodes)-shownNodes))
			break
		}
		shown = append(shown, oneLine(n, maxIDText))
	}
	return strings.Join(shown, ", ")
}

// endedAt is when st ended, or its last update if the end was not recorded.
func endedAt(st State) time.Time {
	if !st.Ended.IsZero() {
		return st.Ended
	}
	return st.Updated
}

// oneLine is s as one printable line of at most max bytes: runs of white space joined into one
// space, other control characters escaped.
func oneLine(s string, max int) string {
	return txt.Cut(txt.Printable(strings.Join(strings.Fields(s), " ")), max)
}

// clockAt is t's time of day in ref's zone, with the date when it is not ref's day.
func clockAt(t, ref time.Time) string {
	t = t.In(ref.Location())
	if y, m, d := t.Date(); y == ref.Year() && m == ref.Month() && d == ref.Day() {
		return t.Format(time.TimeOnly)
	}
	return t.Format("2006-01-02 15:04:05")
}

// minuteAt is clockAt to the minute.
func minuteAt(t, ref time.Time) string {
	t = t.In(ref.Location())
	if y, m, d := t.Date(); y == ref.Year() && m == ref.Month() && d == ref.Day() {
		return t.Format("15:04")
	}
	return t.Format("2006-01-02 15:04")
}

// stampAt is t in full, in now's zone, and how long ago.
func stampAt(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(now.Location()).Format("2006-01-02 15:04:05 MST") + " (" + agoText(now.Sub(t)) + ")"
}

func agoText(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return shortDur(d) + " ago"
}

// shortDur is d to the second, as a person writes it: 45s, 1m12s, 10m, 2h05m, 3d.
func shortDur(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		if s := int(d.Seconds()) % 60; s != 0 {
			return fmt.Sprintf("%dm%02ds", int(d.Minutes()), s)
		}
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// secondsText is a stored duration in seconds, said as shortDur does.
func secondsText(s float64) string {
	return shortDur(time.Duration(s * float64(time.Second)))
}

// countOf is "1 node", "2 nodes".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
