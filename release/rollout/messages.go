package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/novox/mesh-host/release/fleet"
)

// The Message of each event: one complete line for a person. Node ids are checked ids
// (wire.ValidNode); every other text from the bus went through text or detail.

// maxListed is how many node ids a message names before counting the rest.
const maxListed = 8

func startedMessage(st State) string {
	head := fmt.Sprintf("rollout %s: %s to %s", st.ID, st.Version, count(len(st.Nodes), "node"))
	switch {
	case len(st.Nodes) == 0:
		return fmt.Sprintf("rollout %s: %s: no node needs it (every node heard within %s already runs it or newer, or none was heard); it becomes the fleet target at once",
			st.ID, st.Version, human(secsDur(st.AliveS))) + skippedWords(st)
	case st.Policy == PolicyImmediate:
		return head + " at once (policy immediate): it becomes the fleet target now, with no canary and no gate" + skippedWords(st)
	}
	var then []string
	for _, b := range st.Batches[1:] {
		then = append(then, b.Name)
	}
	order := fmt.Sprintf("canary %s", list(st.BatchNodes(0)))
	if ps := st.Batches[0].Platforms; mixedCounts(ps) {
		order += " (" + platformsCell(ps) + ")" // a canary on every platform
	}
	if st.Batches[0].Name != "canary" {
		order, then = "", append([]string{st.Batches[0].Name}, then...)
	}
	if len(then) > 0 {
		if order != "" {
			order += "; then "
		}
		order += strings.Join(then, ", ")
	}
	m := fmt.Sprintf("%s in %s (%s); window %s, soak %s", head, count(len(st.Batches), "batch"), order, human(secsDur(st.WindowS)), human(secsDur(st.SoakS)))
	return m + meteredWords(st) + skippedWords(st)
}

// skippedWords says the nodes left out by platform, or nothing: "; left out by platform:
// linux/arm/v7 (12 nodes, no build)".
func skippedWords(st State) string {
	if len(st.Skipped) == 0 {
		return ""
	}
	var parts []string
	for i, s := range st.Skipped {
		if i == maxPlatformsNamed {
			parts = append(parts, fmt.Sprintf("and %d more", len(st.Skipped)-maxPlatformsNamed))
			break
		}
		why := map[string]string{SkipNoBuild: "no build", SkipAsked: "asked", SkipOldHosts: "hosts that cannot read its manifest"}[s.Why]
		parts = append(parts, fmt.Sprintf("%s (%s, %s)", text(s.Platform), count(s.Nodes, "node"), why))
	}
	return "; left out by platform: " + strings.Join(parts, ", ")
}

// meteredWords says how many metered nodes wait for the last batch, or nothing.
func meteredWords(st State) string {
	if st.Metered == 0 {
		return ""
	}
	return fmt.Sprintf("; %s on metered links deferred to the last batch (--include-metered treats them as any)", count(st.Metered, "node"))
}

// batchLabel is "batch 2/3 (50%)".
func batchLabel(st State, i int) string {
	return fmt.Sprintf("batch %d/%d (%s)", i+1, len(st.Batches), st.Batches[i].Name)
}

func batchMessage(st State, i int, targeted, already []string, leftOut int) string {
	m := fmt.Sprintf("%s: targets set for %s", batchLabel(st, i), count(len(targeted), "node"))
	if ps := st.Batches[i].Platforms; mixedCounts(ps) {
		m += " (the batch: " + platformsCell(ps) + ")"
	}
	if len(targeted) > 0 {
		m += ": " + list(targeted)
	}
	if len(already) > 0 {
		m += fmt.Sprintf("; %s already %s %s or newer: %s", count(len(already), "node"), has(len(already)), st.Version, list(already))
	}
	if leftOut > 0 {
		m += fmt.Sprintf("; %s left out (silent)", count(leftOut, "node"))
	}
	if st.Metered > 0 && i == len(st.Batches)-1 {
		m += fmt.Sprintf("; %s on metered links among them, deferred to this batch", count(st.Metered, "node"))
	}
	return m
}

func has(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}

func leftOutMessage(st State, i int, node string, since time.Time, now time.Time) string {
	when := "never heard"
	if !since.IsZero() {
		when = fmt.Sprintf("silent since %s (%s ago)", clock(since), human(now.Sub(since)))
	}
	return fmt.Sprintf("%s left out of %s: %s, longer than --silent-after %s; it takes the fleet target when it returns",
		node, batchLabel(st, i), when, human(secsDur(st.SilentAfterS)))
}

// haltedMessage says a halt in batch i: by platform when its nodes said theirs ("2 of 2
// linux/arm64 canaries rolled back; linux/amd64 canaries confirmed"), else in all.
func haltedMessage(st State, i, troubled, nodes int) string {
	what := fmt.Sprintf("%d of %s showed trouble", troubled, count(nodes, "node"))
	if by := st.HaltByPlatform(); by != "" {
		what = by
	}
	return fmt.Sprintf("HALTED in %s: %s; %s was not set as the fleet target and the batch's targets are set back",
		batchLabel(st, i), what, st.Version)
}

// completedMessage says a completed rollout; left are the nodes outside its plan whose own
// target an earlier rollout had left, cleared too.
func completedMessage(st State, left []string) string {
	cleared := "per-node targets cleared"
	if len(left) > 0 {
		cleared += fmt.Sprintf(", with those earlier rollouts left on %s (%s)", count(len(left), "node"), list(left))
	}
	m := fmt.Sprintf("completed: %s is the fleet target; %s; %s in %s", st.Version, cleared, count(len(st.Nodes), "node"), human(st.Ended.Sub(st.Created)))
	if n := len(st.LeftOut) + st.LeftOutMore; n > 0 {
		m += fmt.Sprintf(" (%d left out)", n)
	}
	if st.BytesMoved > 0 {
		m += "; the nodes moved " + movedText(st.BytesMoved) + " fetching it"
	}
	return m
}

// movedSoFar is "; 2.1 MB moved so far", or "" before any byte was seen moved.
func movedSoFar(n int64) string {
	if n <= 0 {
		return ""
	}
	return "; " + movedText(n) + " moved so far"
}

func abortedMessage(st State) string {
	by := st.AbortedBy
	if by == "" {
		by = "an operator"
	}
	m := fmt.Sprintf("ABORTED by %s: no further batch; %s was not set as the fleet target", by, st.Version)
	if st.Current < len(st.Batches) && !st.Batches[st.Current].Started.IsZero() {
		m += fmt.Sprintf(" and the targets of %s are set back", batchLabel(st, st.Current))
	}
	return m
}

func supersededMessage(st State) string {
	return fmt.Sprintf("superseded by rollout %s: no further batch of %s; the targets it set stay (the new rollout targets every node that needs it)",
		text(st.SupersededBy), st.Version)
}

// list names up to maxListed nodes, then counts the rest.
func list(nodes []string) string {
	if len(nodes) <= maxListed {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:maxListed], ", "), len(nodes)-maxListed)
}

func count(n int, what string) string {
	switch {
	case n == 1:
		return "1 " + what
	case strings.HasSuffix(what, "ch"):
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func secsDur(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// human is d for a person: "20s", "2m30s", "10m", "1h5m"; tenths under 10s.
func human(d time.Duration) string {
	d = roundDur(d)
	if d < 0 {
		d = 0
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// trustWords warns of the rollout's nodes whose last heartbeat says their trust expired
// (decision 0045), or says nothing: "; 2 nodes' trust expired (web-03, web-07): they take no
// new target until a fresher root reaches them (`mesh-release trust publish`), and halt their
// batch".
func trustWords(st State, entries []fleet.Entry) string {
	in := make(map[string]bool, len(st.Nodes))
	for _, n := range st.Nodes {
		in[n] = true
	}
	var expired []string
	for _, e := range entries {
		if e.Err == nil && e.Heartbeat.TrustExpiredSince != nil && in[e.Node] {
			expired = append(expired, e.Node)
		}
	}
	if len(expired) == 0 {
		return ""
	}
	sort.Strings(expired)
	whose := "1 node's trust expired"
	if len(expired) > 1 {
		whose = fmt.Sprintf("%d nodes' trust expired", len(expired))
	}
	return fmt.Sprintf("; %s (%s): they take no new target until a fresher root reaches them (`mesh-release trust publish`), and halt their batch",
		whose, list(expired))
}
