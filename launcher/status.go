package launcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// Report is `mesh-launcher status`: the records' picture plus whether a launcher holds the root.
type Report struct {
	Root        string `json:"root"`
	LauncherPID int    `json:"launcher_pid"` // 0 when no launcher runs on this root
	rollback.Status
}

// ReadStatus builds the report. It works whether or not a launcher runs; it never creates the
// records or migrates them. A start left open by a launcher that is gone is not shown as running.
func ReadStatus(ctx context.Context, root string) (Report, error) {
	rep := Report{Root: root, LauncherPID: rollback.LauncherRunning(root)}
	if _, err := os.Stat(rollback.RecordsPath(root)); errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("no records at %s: mesh-launcher has never run on this root (is --root right?)", rollback.RecordsPath(root))
	}
	r, err := rollback.OpenForStatus(ctx, root)
	if err != nil {
		return rep, statusErr(err)
	}
	defer r.Close()
	st, err := r.Status(ctx, root)
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
	return rep, nil
}

func statusErr(err error) error {
	if errors.Is(err, rollback.ErrCorrupt) {
		return fmt.Errorf("%w\nthe versions directory is intact; `mesh-launcher run` moves the corrupt file aside and starts fresh records (confirmations and bad marks are forgotten)", err)
	}
	return err
}

func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
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
	if rep.Failed {
		fmt.Fprintf(tw, "state\tFAILED: %s\n", rep.FailedReason)
	} else {
		fmt.Fprintf(tw, "state\thealthy\n")
	}
	if rep.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", rep.Note)
	}
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tFAILURES\tDIGEST\tSTATE")
	for _, v := range rep.Versions {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.Version, v.Failures, shortDigest(v.Digest), versionState(v))
	}
	for _, name := range rep.Ignored {
		fmt.Fprintf(tw, "%s\t-\t-\tignored (not a version)\n", name)
	}
	tw.Flush()
	for _, v := range rep.Versions {
		if v.Bad {
			fmt.Fprintf(w, "  %s is bad: %s\n", v.Version, v.BadReason)
		}
	}

	if len(rep.Rollbacks) > 0 {
		rb := rep.Rollbacks[0]
		fmt.Fprintf(w, "\nlast rollback: %s -> %s at %s (%s ago)\n  %s\n", rb.From, rb.To,
			rb.At.UTC().Format(time.RFC3339), now.Sub(rb.At).Round(time.Second), rb.Reason)
		if rb.Output != "" {
			fmt.Fprintf(w, "  last output of %s:\n", rb.From)
			for _, line := range strings.Split(rb.Output, "\n") {
				fmt.Fprintf(w, "    | %s\n", line)
			}
		}
		if n := len(rep.Rollbacks); n > 1 {
			fmt.Fprintf(w, "  (%d earlier rollbacks; --json lists them)\n", n-1)
		}
	}
	return nil
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
		parts = append(parts, "NOT RUN: "+v.Mismatch)
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
