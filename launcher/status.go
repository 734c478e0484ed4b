package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

// Report is `mesh-launcher status`: the records' picture plus whether a launcher holds the root,
// and the node's state.
type Report struct {
	Root        string `json:"root"`
	LauncherPID int    `json:"launcher_pid"` // 0 when no launcher runs on this root
	// State is "healthy", "degraded" (the host crash-loops, was killed as hung, or is not
	// running: DegradedReason says which) or "failed" (FailedReason).
	State          string `json:"state"`
	Degraded       bool   `json:"degraded"`
	DegradedReason string `json:"degraded_reason"`
	// UnitFileChanged: the unit file was written after the unit's last start (UnitFileChangedNote).
	UnitFileChanged bool `json:"unit_file_changed"`
	rollback.Status
	// Launcher is the launcher image the unit runs (or ran last), the floor's version, the
	// launcher versions under ROOT/launchers and the launcher rollbacks, newest first.
	Launcher rollback.LauncherReport `json:"launcher"`
	// WindowWait is, while the host has staged a newer version and waits for its maintenance
	// window to stand aside (decision 0029), that version and when the window opens: what the
	// host left in ROOT/window-wait.json, shown while that version is on disk and not running.
	// Its running is the version a restart runs until then (decision 0034).
	WindowWait *rollback.WindowWait `json:"window_wait,omitempty"`
	// TrustExpiredSince is, while the newest root of trust the host holds has expired
	// (decision 0045), when it did: what the host left in ROOT/trust-expired.json. The host
	// keeps running then and takes no new target.
	TrustExpiredSince *time.Time `json:"trust_expired_since,omitempty"`
	// launcherUnknown: the records predate launcher versions (schema 6), so Launcher is empty
	// for want of records, not of launchers.
	launcherUnknown bool
}

// The node's states, and `status`'s exit status for each: 0, ExitDegraded, ExitFailed.
const (
	StateHealthy  = "healthy"
	StateDegraded = "degraded"
	StateFailed   = "failed"
)

// ExitCode is `mesh-launcher status`'s exit status for the report.
func (rep Report) ExitCode() int {
	switch rep.State {
	case StateFailed:
		return ExitFailed
	case StateDegraded:
		return ExitDegraded
	}
	return 0
}

// ReadStatus builds the report, counting failures by p as the launcher does. It works whether
// or not a launcher runs; it never creates the root or the records, nor migrates them. A start
// left open by a launcher that is gone is not shown as running.
func ReadStatus(ctx context.Context, root string, p rollback.Policy) (Report, error) {
	rep := Report{Root: root}
	if err := rollback.CheckRoot(root); err != nil {
		return rep, err
	}
	rep.LauncherPID = rollback.LauncherRunning(root)
	if _, err := os.Stat(rollback.RecordsPath(root)); errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("no records at %s: mesh-launcher has never run on this root (is --root right?)", rollback.RecordsPath(root))
	}
	r, err := rollback.OpenForHost(ctx, root)
	if err != nil {
		return rep, statusErr(err)
	}
	defer r.Close()
	st, err := r.Status(ctx, root, p)
	if err != nil {
		return rep, statusErr(err)
	}
	if st.Running != nil && (rep.LauncherPID == 0 || !alive(st.Running.PID)) {
		for i := range st.Versions {
			st.Versions[i].Running = false
		}
		st.Running = nil
	}
	rep.Status = st
	if rep.Launcher, err = r.LauncherStatus(ctx, root); err != nil {
		return rep, statusErr(err)
	}
	rep.launcherUnknown = !r.HasLaunchers()
	rep.WindowWait = windowWait(root, rep.Status)
	if te, err := rollback.ReadTrustExpired(root); err == nil && te != nil {
		since := te.Since.UTC()
		rep.TrustExpiredSince = &since // a file that cannot be read says nothing, as the wait's
	}
	rep.UnitFileChanged = rep.LauncherPID != 0 && unitFileChanged(ctx, r, FindUnitFile)
	rep.State, rep.DegradedReason = judgeState(rep)
	rep.Degraded = rep.State == StateDegraded
	return rep, nil
}

// windowWait is the host's wait for its window, if it still stands: the version it waits to
// stand aside for is on disk, not bad, and not running. A file that cannot be read says nothing.
func windowWait(root string, st rollback.Status) *rollback.WindowWait {
	w, err := rollback.ReadWindowWait(root)
	if err != nil || w == nil {
		return nil
	}
	for _, v := range st.Versions {
		if v.Version == w.Version && v.OnDisk && !v.Bad && !v.Running {
			return w
		}
	}
	return nil
}

// judgeState says whether the node is healthy; the first row that matches decides.
func judgeState(rep Report) (state, reason string) {
	if rep.Failed {
		return StateFailed, ""
	}
	// The newest version that has failures counting now is the one in trouble.
	var failing *rollback.VersionStatus
	for i, v := range rep.Versions {
		if v.Failures > 0 && !v.Bad && (rep.Running == nil || v.Running) {
			failing = &rep.Versions[i]
			break
		}
	}
	switch {
	case rep.LauncherPID == 0:
		return StateDegraded, "mesh-launcher is not running: nothing runs or watches the host (start the unit)"
	case rep.Running == nil && failing != nil:
		return StateDegraded, fmt.Sprintf("the host is not running: %s failed %d %s recently and waits to be restarted (last: %s)",
			failing.Version, failing.Failures, txt.Plural(failing.Failures, "time", "times"), failing.LastFailure)
	case rep.Running == nil:
		return StateDegraded, "the host is not running"
	case failing != nil && failing.Confirmed:
		return StateDegraded, fmt.Sprintf("%s is restarting in a loop: %d %s recently (last: %s)",
			failing.Version, failing.Failures, txt.Plural(failing.Failures, "failure", "failures"), failing.LastFailure)
	case failing != nil:
		return StateDegraded, fmt.Sprintf("%s is on trial and failing: %d %s (last: %s)",
			failing.Version, failing.Failures, txt.Plural(failing.Failures, "failure", "failures"), failing.LastFailure)
	}
	return StateHealthy, ""
}

func statusErr(err error) error {
	if errors.Is(err, rollback.ErrCorrupt) {
		return fmt.Errorf("%w\nthe versions directory is intact; `mesh-launcher run` moves the corrupt file aside and starts fresh records (confirmations and bad marks are forgotten)", err)
	}
	return err
}

// WriteJSON prints the report as one JSON object.
func (rep Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText prints the report for a person.
func (rep Report) WriteText(w io.Writer, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "root\t%s\n", rep.Root)
	if rep.LauncherPID != 0 {
		fmt.Fprintf(tw, "launcher\trunning (pid %d)\n", rep.LauncherPID)
	} else {
		fmt.Fprintf(tw, "launcher\tnot running\n")
	}
	if r := rep.Running; r != nil {
		fmt.Fprintf(tw, "running\t%s (pid %d, for %s)\n", r.Version, r.PID, now.Sub(r.Since).Round(time.Second))
	} else {
		fmt.Fprintf(tw, "running\t-\n")
	}
	fmt.Fprintf(tw, "known-good\t%s\n", dash(rep.KnownGood))
	fmt.Fprintf(tw, "predecessor\t%s\n", dash(rep.Predecessor))
	state, degraded := rep.State, rep.DegradedReason
	if state == "" { // a report not made by ReadStatus
		state, degraded = judgeState(rep)
	}
	switch state {
	case StateFailed:
		fmt.Fprintf(tw, "state\tFAILED: %s\n", text(rep.FailedReason))
	case StateDegraded:
		fmt.Fprintf(tw, "state\tdegraded: %s\n", text(degraded))
	default:
		fmt.Fprintf(tw, "state\t%s\n", state)
	}
	if rep.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", text(rep.Note))
	}
	if ww := rep.WindowWait; ww != nil {
		line := ww.Line()
		if ww.Running != "" {
			// What the launcher holds to (rollback.ChooseToStart): a crash does not upgrade.
			line += "; a restart runs " + ww.Running + " until then"
		}
		fmt.Fprintf(tw, "window\t%s\n", text(line))
	}
	if rep.TrustExpiredSince != nil {
		fmt.Fprintf(tw, "trust\t%s\n", rollback.TrustExpired{Since: *rep.TrustExpiredSince}.Line())
	}
	if rep.UnitFileChanged {
		fmt.Fprintf(tw, "unit\t%s\n", UnitFileChangedNote)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tFAILURES\tDIGEST\tSTATE\tPROVENANCE")
	for _, v := range rep.Versions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", v.Version, v.Failures, shortDigest(v.Digest), versionState(v), text(v.Provenance.String()))
	}
	for _, name := range rep.Ignored {
		fmt.Fprintf(tw, "%s\t-\t-\tignored (not a version)\t-\n", text(name))
	}
	tw.Flush()
	for _, v := range rep.Versions {
		if v.Bad {
			fmt.Fprintf(w, "  %s is bad: %s\n", v.Version, text(v.BadReason))
		}
	}

	rep.writeRollback(w, now)
	rep.writeLaunchers(w, now)
	return nil
}

// writeRollback writes the last host rollback, with the failing version's output.
func (rep Report) writeRollback(w io.Writer, now time.Time) {
	if len(rep.Rollbacks) > 0 {
		rb := rep.Rollbacks[0]
		fmt.Fprintf(w, "\nlast rollback: %s -> %s at %s (%s ago)\n  %s\n", rb.From, rb.To,
			rb.At.UTC().Format(time.RFC3339), now.Sub(rb.At).Round(time.Second), text(rb.Reason))
		if rb.Output != "" {
			fmt.Fprintf(w, "  last output of %s:\n", rb.From)
			for _, line := range strings.Split(rb.Output, "\n") {
				fmt.Fprintf(w, "    | %s\n", text(line))
			}
		}
		if n := len(rep.Rollbacks); n > 1 {
			fmt.Fprintf(w, "  (%d earlier %s; --json lists them)\n", n-1, txt.Plural(n-1, "rollback", "rollbacks"))
		}
	}
}

func versionState(v rollback.VersionStatus) string {
	var parts []string
	if v.Running {
		parts = append(parts, "running")
	}
	switch {
	case v.Bad:
		parts = append(parts, "BAD")
	case v.Mismatch != "":
		parts = append(parts, "NOT RUN: "+text(v.Mismatch))
	case v.Confirmed:
		parts = append(parts, "confirmed")
	default:
		parts = append(parts, "unconfirmed")
	}
	if !v.OnDisk {
		parts = append(parts, "retired (record only)")
	}
	return strings.Join(parts, ", ")
}

// text makes what the records hold (a host's output, reasons built from it) safe to print: one
// line, no escape sequences.
func text(s string) string { return txt.Printable(s) }

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19] + "…"
	}
	return dash(d)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Bounds of the launcher section's cells: what the records hold was cut when recorded, but a
// table row stays short.
const (
	maxBadCell    = 60 // a bad launcher's reason in its STATE cell (--json has it whole)
	maxOutputLine = 200
)

// writeLaunchers writes the launcher section: each launcher version under ROOT/launchers and
// the floor (the package's launcher), which runs, and the last launcher rollback with the
// output of the launcher it left.
func (rep Report) writeLaunchers(w io.Writer, now time.Time) {
	l := rep.Launcher
	fmt.Fprintln(w)
	if rep.launcherUnknown {
		fmt.Fprintln(w, "launcher versions: not recorded (records.db is older than launcher versions, schema 6; the launcher that knows them migrates it at its next start)")
		return
	}
	runs := func(floor bool, version string) bool {
		return rep.LauncherPID != 0 && l.Current.Floor == floor && l.Current.Version == version && version != ""
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAUNCHER VERSION\tDIGEST\tSTATE\tPROVENANCE")
	for _, v := range l.Versions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", text(v.Version), shortDigest(v.Digest.String()), launcherState(v, runs(false, v.Version)), launcherProvenance(v))
	}
	floor := "floor"
	if runs(true, l.FloorVersion) {
		floor = "running, floor"
	}
	where := "the package's"
	if l.Current.FloorPath != "" {
		where += ": " + text(l.Current.FloorPath)
	}
	fmt.Fprintf(tw, "%s\t-\t%s\t%s\n", dash(text(l.FloorVersion)), floor, where)
	tw.Flush()
	if p := l.Current.FloorPinned; p != "" {
		fmt.Fprintf(w, "  the floor runs though newer launchers are on disk: %s\n", text(p))
	}
	if len(l.Rollbacks) == 0 {
		return
	}
	rb := l.Rollbacks[0]
	fmt.Fprintf(w, "\nlast launcher rollback: %s -> %s at %s (%s ago)\n  %s\n", text(rb.From), text(rb.To),
		rb.At.UTC().Format(time.RFC3339), now.Sub(rb.At).Round(time.Second), text(rb.Reason))
	if rb.Output != "" {
		fmt.Fprintf(w, "  last output of launcher %s:\n", text(rb.From))
		for _, line := range strings.Split(strings.TrimRight(rb.Output, "\n"), "\n") {
			fmt.Fprintf(w, "    | %s\n", txt.Cut(text(line), maxOutputLine))
		}
	}
	if n := len(l.Rollbacks); n > 1 {
		fmt.Fprintf(w, "  (%d earlier launcher %s; --json lists them)\n", n-1, txt.Plural(n-1, "rollback", "rollbacks"))
	}
}

// launcherState is a launcher version's STATE cell: running or not, then BAD with why,
// confirmed (it has run a host here), or trial (it has not yet); retired when its binary is gone.
func launcherState(v rollback.LauncherRecord, running bool) string {
	var parts []string
	if running {
		parts = append(parts, "running")
	}
	switch {
	case !v.Bad.IsZero():
		parts = append(parts, "BAD: "+txt.Cut(strings.Join(strings.Fields(text(v.BadReason)), " "), maxBadCell))
	case !v.Confirmed.IsZero():
		parts = append(parts, rollback.LauncherConfirmed)
	default:
		parts = append(parts, rollback.LauncherTrial)
	}
	if !v.OnDisk {
		parts = append(parts, "retired (record only)")
	}
	return strings.Join(parts, ", ")
}

// launcherProvenance is how a launcher version came to the machine: delivered with the host
// release that carried it (signed by its key), or found under ROOT/launchers.
func launcherProvenance(v rollback.LauncherRecord) string {
	p := v.Provenance
	switch p.Source {
	case rollback.SourceFound:
		return "found in launchers/ (not staged by a host)"
	case rollback.SourceDelivered:
		s := "delivered"
		if v.CarriedBy != "" {
			s += " with " + text(v.CarriedBy)
		}
		if p.SignedBy != "" {
			s += ", signed by key " + text(p.SignedBy)
		}
		return s
	}
	return text(p.String())
}
