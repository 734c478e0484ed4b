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

// Row is one node as the fleet view shows it.
type Row struct {
	Node string `json:"node"`
	// Platform is the node's platform as its heartbeat says it (linux/arm64; an older host's
	// os/arch), "" when it has sent no profile.
	Platform string `json:"platform"`
	Silent   bool   `json:"silent"`
	// Status is the STATE column: what the node is doing, bounded and printable (see rules);
	// StatusKind is it in one word.
	Status     string `json:"status"`
	StatusKind Kind   `json:"status_kind"`
	// State is the host's state as the heartbeat says it (running, standing-aside, stopping).
	State     string    `json:"state"`
	Running   string    `json:"running"`
	KnownGood string    `json:"known_good"`
	Target    string    `json:"target"`
	LastHeard time.Time `json:"last_heard"`
	AgeS      float64   `json:"age_s"`
	// ReconcileOK is nil before the node's first reconcile.
	ReconcileOK    *bool  `json:"reconcile_ok"`
	ReconcileError string `json:"reconcile_error,omitempty"`
	// Problem says why the node's last heartbeat could not be read.
	Problem string `json:"problem,omitempty"`
	// Withdrawn is the withdrawal of the version the node runs, when it is withdrawn.
	Withdrawn *wire.Withdrawn `json:"withdrawn,omitempty"`
	// TargetExpiredSince is when the target in force on the node expired, while it has.
	TargetExpiredSince *time.Time `json:"target_expired_since,omitempty"`
	// Launcher is the launcher running the node's host, as its heartbeat says it; absent from
	// hosts and records older than launcher versions.
	Launcher *wire.Launcher `json:"launcher,omitempty"`
	// Window is the maintenance window the node keeps, as its heartbeat says it (decision 0029).
	Window *wire.WindowState `json:"window,omitempty"`
	// TrustRoot is the newest root the node holds, as its heartbeat says it (0: host.json's keys
	// only, or a host older than roots); TrustBehind is true when it is older than the newest
	// root on the bus (RowOptions.TrustRoot); TrustExpiredSince is when the node's trust
	// expired, while it has (decision 0045).
	TrustRoot         uint64          `json:"trust_root,omitempty"`
	TrustBehind       bool            `json:"trust_behind,omitempty"`
	TrustExpiredSince *time.Time      `json:"trust_expired_since,omitempty"`
	Heartbeat         *wire.Heartbeat `json:"heartbeat,omitempty"`
	// newest is the root the row was judged against, for the node's story.
	newest uint64
}

// RowOptions are what, besides each node's heartbeat, its row is judged from.
type RowOptions struct {
	// SilentAfter is how long a node may go unheard before it is silent (default
	// DefaultSilentAfter).
	SilentAfter time.Duration
	// Withdrawals is the withdrawal list on the bus and WithdrawalsRevision its revision (zero
	// when there is none): a node running a withdrawn version is marked, and a refusal of the
	// list in force shown.
	Withdrawals         wire.Withdrawals
	WithdrawalsRevision uint64
	// TrustRoot is the newest root on the bus (RootReader), 0 when it holds none or it could not
	// be read: a node whose root is older is behind. While it is 0, the newest root a node's
	// heartbeat says is taken instead.
	TrustRoot uint64
}

// Rows turns entries into rows as of now: a node unheard for longer than silentAfter is silent.
// Silent nodes come first, then nodes whose heartbeat is unreadable, then nodes in trouble
// (Kind.Trouble), then the rest, each group by node id.
func Rows(entries []Entry, now time.Time, silentAfter time.Duration) []Row {
	return RowsWith(entries, now, RowOptions{SilentAfter: silentAfter})
}

// RowsWith is Rows judged with o: what is withdrawn too.
func RowsWith(entries []Entry, now time.Time, o RowOptions) []Row {
	return rows(entries, now, o, nil)
}

// rows is RowsWith, with the nodes a View saw restart lately.
func rows(entries []Entry, now time.Time, o RowOptions, restarted map[string]bool) []Row {
	o = o.withDefaults()
	silentAfter := o.SilentAfter
	w := withdrawals{list: o.Withdrawals, rev: o.WithdrawalsRevision}
	newest := newestRoot(o.TrustRoot, func(f func(wire.Heartbeat)) {
		for _, e := range entries {
			if e.Err == nil {
				f(e.Heartbeat)
			}
		}
	})
	rows := make([]Row, 0, len(entries))
	for _, e := range entries {
		age := now.Sub(e.Heard)
		r := Row{Node: e.Node, LastHeard: e.Heard.UTC(), AgeS: age.Seconds(), Silent: age > silentAfter, newest: newest}
		r.StatusKind, r.Status = status(e, now, silentAfter, restarted[e.Node], w)
		if e.Err != nil {
			r.Problem = e.Err.Error()
		} else {
			hb := e.Heartbeat
			r.State, r.Running, r.KnownGood, r.Target = hb.State, hb.Running, hb.KnownGood, hb.Target
			if lr := hb.LastReconcile; lr != nil {
				ok := lr.OK
				r.ReconcileOK, r.ReconcileError = &ok, lr.Error
			}
			if wd, ok := o.Withdrawals.Has(hb.Running); ok && hb.Running != "" {
				r.Withdrawn = &wd
			}
			r.TargetExpiredSince, r.Launcher, r.Window = hb.TargetExpiredSince, hb.Launcher, hb.Window
			r.Platform = platformOf(hb.Profile)
			r.trustFacts(hb, newest)
			r.Heartbeat = &hb
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if a, b := rank(rows[i]), rank(rows[j]); a != b {
			return a < b
		}
		return rows[i].Node < rows[j].Node
	})
	return rows
}

func rank(r Row) int {
	switch {
	case r.Silent:
		return 0
	case r.Problem != "":
		return 1
	case r.StatusKind.Trouble():
		return 2
	}
	return 3
}

// TextOptions are the choices WriteTextWith takes.
type TextOptions struct {
	// SilentAfter is the rule the rows were made with, said in the summary line
	// (DefaultSilentAfter when zero).
	SilentAfter time.Duration
	// Header, when not empty, is written as one line above the table (a rollout in progress,
	// say); it is made printable and bounded like every cell.
	Header string
	// Withdrawn, when not empty, is said in one line above the table: the newest few withdrawn
	// versions and why, and how many more. WithdrawnProblem, when not empty, says in that line
	// why the list could not be read.
	Withdrawn        []wire.Withdrawn
	WithdrawnProblem string
	// TrustRoot is the newest root on the bus the rows were judged with (RowOptions.TrustRoot);
	// TrustProblem, when not empty, says in the trust line why the roots could not be read or
	// the next root on the bus is refused.
	TrustRoot    uint64
	TrustProblem string
}

// WriteText writes rows as an aligned table with a summary line (see WriteTextWith).
func WriteText(w io.Writer, rows []Row, silentAfter time.Duration) error {
	return WriteTextWith(w, rows, TextOptions{SilentAfter: silentAfter})
}

// WriteTextWith writes the optional header line, rows as an aligned table, a summary line
// counting the nodes, the silent ones and, when not all are ok, each other kind, when the nodes
// run more than one platform, a line counting them by platform, and, when the fleet has roots
// (decision 0045), a TRUST column and a line counting the nodes behind and expired. A fleet
// with no roots reads as it did before them.
func WriteTextWith(w io.Writer, rows []Row, o TextOptions) error {
	o = o.withDefaults()
	silentAfter := o.SilentAfter
	if o.Header != "" {
		if _, err := fmt.Fprintln(w, cell(o.Header, maxHeaderCell)); err != nil {
			return err
		}
	}
	if len(o.Withdrawn) > 0 || o.WithdrawnProblem != "" {
		if _, err := fmt.Fprintln(w, withdrawnLine(o.Withdrawn, o.WithdrawnProblem)); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	trust := ShowsTrust(rows)
	trustHead := ""
	if trust {
		trustHead = "\tTRUST"
	}
	fmt.Fprintln(tw, "NODE\tSTATE\tRUNNING\tKNOWN-GOOD\tTARGET\tPLATFORM"+trustHead+"\tLAUNCHER\tLAST HEARD\tLAST RECONCILE")
	counts := make(map[Kind]int)
	for _, r := range rows {
		counts[r.StatusKind]++
		trustCell := ""
		if trust {
			trustCell = "\t" + TrustText(r)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%s\t%s\t%s\t%s\n", cell(r.Node, maxIDCell), dash(cell(r.Status, maxStatusCell)),
			dash(cell(r.Running, maxIDCell)), dash(cell(r.KnownGood, maxIDCell)), dash(cell(r.Target, maxIDCell)), dash(cell(r.Platform, maxIDCell)),
			trustCell, launcherText(r.Launcher), ago(time.Duration(r.AgeS*float64(time.Second))), reconcileText(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	nodes := "nodes"
	if len(rows) == 1 {
		nodes = "node"
	}
	if _, err := fmt.Fprintf(w, "%d %s, %d silent (silent after %s unheard)%s\n", len(rows), nodes, counts[KindSilent], silentAfter, kindCounts(counts)); err != nil {
		return err
	}
	for _, line := range []string{platformsLine(rows), TrustLine(rows, o.TrustRoot, o.TrustProblem)} {
		if line == "" {
			continue
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// summaryKinds are the kinds the summary line counts after the silent ones, in precedence order.
var summaryKinds = []struct {
	kind Kind
	word string
}{
	{KindUnreadable, "unreadable"}, {KindStopping, "stopping"}, {KindStandingAside, "standing aside"},
	{KindWithdrawn, "running withdrawn"}, {KindSteppedDown, "stepped down from a withdrawn version"},
	{KindRolledBack, "rolled back"}, {KindTrustExpired, "trust expired"}, {KindRefused, "refused"},
	{KindFetching, "fetching"}, {KindTargetExpired, "target expired"}, {KindRestarted, "restarting"},
	{KindTrying, "trying"}, {KindFailing, "failing"},
}

// shownWithdrawn is how many withdrawn versions the line above the table names.
const shownWithdrawn = 3

// withdrawnLine is `withdrawn: v1.4.0 ("leaks fds"), v1.3.1 ("crashes on arm64"); and 2 more
// (mesh-release withdraw --list)`: the newest first, each reason cut short, the whole bounded.
func withdrawnLine(list []wire.Withdrawn, problem string) string {
	var parts []string
	if problem != "" {
		parts = append(parts, "(the list could not be read: "+problem+")")
	}
	for i := len(list) - 1; i >= max(len(list)-shownWithdrawn, 0); i-- {
		e := list[i]
		part := cell(e.Version, maxIDCell)
		if e.Reason != "" {
			part += " (" + cell(fmt.Sprintf("%q", e.Reason), maxReasonCell) + ")"
		}
		parts = append(parts, part)
	}
	line := "withdrawn: " + strings.Join(parts, ", ")
	if more := len(list) - min(len(list), shownWithdrawn); more > 0 {
		line += fmt.Sprintf("; and %d more (`mesh-release withdraw --list`)", more)
	}
	return cell(line, maxHeaderCell)
}

// kindCounts is "; 2 rolled back, 1 refused", or nothing when no node is any of these.
func kindCounts(counts map[Kind]int) string {
	var parts []string
	for _, k := range summaryKinds {
		if n := counts[k.kind]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k.word))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// launcherText is the LAUNCHER cell: the launcher's version, marked when it is not a confirmed
// delivered one — `v1.1.0 (trial)`, `v1.0.0 (floor)`, `v1.1.0 (rolled back from v1.2.0)` (a
// rollback says more than the state it left) — or `-` when the heartbeat says nothing of it.
func launcherText(l *wire.Launcher) string {
	if l == nil || (l.Version == "" && l.Floor == "") {
		return "-"
	}
	v := cell(l.Version, maxIDCell)
	if v == "" {
		v = "?" // an older launcher's records say only the floor
	}
	switch {
	case l.RolledBackFrom != "":
		return v + " (rolled back from " + cell(l.RolledBackFrom, maxIDCell) + ")"
	case l.State == wire.LauncherTrial || l.State == wire.LauncherFloor:
		return v + " (" + l.State + ")"
	case l.State == wire.LauncherConfirmed:
		return v
	case l.Version == "":
		return "? (floor " + cell(l.Floor, maxIDCell) + ")"
	}
	return v + " (" + cell(l.State, maxIDCell) + ")" // a state a newer host added
}

func reconcileText(r Row) string {
	switch {
	case r.Problem != "":
		return cell(r.Problem, maxTextCell)
	case r.ReconcileOK == nil:
		return "-"
	case *r.ReconcileOK:
		return "ok"
	}
	return "failed: " + cellMiddle(r.ReconcileError, maxReconcileCell)
}

// Every text in a row came from the bus, where any node (or anyone who can publish on its
// subject) could have written it: each is made printable and bounded before it reaches the
// operator's terminal, so no escape sequence, carriage return or tab from a heartbeat is
// printed, and each node stays one line.
const (
	maxIDCell     = 48  // node, versions
	maxStatusCell = 96  // the STATE column
	maxTextCell   = 120 // the problem
	// maxReconcileCell bounds the reconcile error, cut in its middle: its end says what to do.
	maxReconcileCell = 160
	maxHeaderCell    = 240 // the header line above the table
	maxReasonCell    = 60  // a withdrawal's reason in the line above the table
)

// cell is s as one bounded, printable table cell: runs of white space (newlines and tabs too)
// joined into one space, other control characters escaped (text.Printable), cut to max
// bytes (text.Cut).
func cell(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	return text.Cut(text.Printable(s), max)
}

// cellMiddle is cell, keeping the head and the tail of s when it is too long
// (text.CutMiddle): an error says what failed first and what to do last.
func cellMiddle(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	return text.CutMiddle(text.Printable(s), max)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds ago", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// WriteJSON writes rows as one indented JSON array. The values are what the nodes sent, but no
// character a terminal could act on is written raw (text.PrintableJSON).
func WriteJSON(w io.Writer, rows []Row) error {
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(text.PrintableJSON(b), '\n'))
	return err
}

// WriteJSONLine writes rows as a JSON array on one line, terminal-safe like WriteJSON.
func WriteJSONLine(w io.Writer, rows []Row) error {
	b, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	_, err = w.Write(append(text.PrintableJSON(b), '\n'))
	return err
}

// withDefaults returns o with every zero (or negative) field at its default (decision 0041).
func (o RowOptions) withDefaults() RowOptions {
	if o.SilentAfter <= 0 {
		o.SilentAfter = DefaultSilentAfter
	}
	return o
}

// withDefaults returns o with every zero (or negative) field at its default (decision 0041).
func (o TextOptions) withDefaults() TextOptions {
	if o.SilentAfter <= 0 {
		o.SilentAfter = DefaultSilentAfter
	}
	return o
}
