package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// previousLauncher is the launcher before its own versions (issue 19): launcher v1.0.0, which
// knows records schema 5.
const (
	previousLauncherCommit  = "26da246"
	previousLauncherVersion = "v1.0.0"
)

// buildPreviousLauncher builds mesh-launcher as it was at previousLauncherCommit, from this
// repository's history (git archive, so no worktree is added), with the shared module cache and
// no network. It skips the test when the source is not a git checkout holding that commit (fails
// it under CI). It has no deadline of its own: a cold build takes what the machine gives it.
func buildPreviousLauncher(t *testing.T, ctx context.Context) string {
	t.Helper()
	if err := exec.CommandContext(ctx, "git", "-C", bins.Src, "cat-file", "-e", previousLauncherCommit+"^{commit}").Run(); err != nil {
		meshtest.SkipUnlessCI(t, "launcher %s is built from commit %s, and %s is not a git checkout holding it (%v); .ci/run deepens a shallow clone to hold it",
			previousLauncherVersion, previousLauncherCommit, bins.Src, err)
	}
	src := t.TempDir()
	archive := exec.CommandContext(ctx, "git", "-C", bins.Src, "archive", previousLauncherCommit)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr, tarErr strings.Builder
	archive.Stderr, untar.Stderr = &archErr, &tarErr
	if err := archive.Start(); err != nil {
		t.Fatal(err)
	}
	if err := untar.Run(); err != nil {
		t.Fatalf("tar -x of git archive %s: %v\n%s", previousLauncherCommit, err, tarErr.String())
	}
	if err := archive.Wait(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", previousLauncherCommit, err, archErr.String())
	}
	out := filepath.Join(t.TempDir(), "mesh-launcher-"+previousLauncherVersion)
	// It stamped main.version with the host release's version then; v1.0.0 says which it is.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+previousLauncherVersion, "-o", out, "./launcher/cmd/mesh-launcher")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOPROXY=off", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build launcher %s from %s: %v\n%s", previousLauncherVersion, previousLauncherCommit, err, b)
	}
	return out
}

// launcherRows is what records.db holds of launcher versions, as the current code reads it.
type launcherRows struct {
	Versions  []rollback.LauncherRecord
	Rollbacks []rollback.LauncherRollback
}

func readLauncherRows(t *testing.T, ctx context.Context, root string) launcherRows {
	t.Helper()
	r, err := rollback.OpenForHost(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.HasLaunchers() {
		t.Fatalf("records.db in %s is older than schema 6 (launcher versions)", root)
	}
	var rows launcherRows
	if rows.Versions, err = r.Launchers(ctx, root); err != nil {
		t.Fatal(err)
	}
	if rows.Rollbacks, err = r.LauncherRollbacks(ctx, 10); err != nil {
		t.Fatal(err)
	}
	return rows
}

// Records schema changes are additive, and a launcher runs on a records.db a newer launcher
// wrote: a launcher rolled back meets one. The launcher before its own versions (v1.0.0, schema
// 5, built from git) runs on a root the current launcher made (schema 6, with launcher rows): it
// runs the host, the host confirms, its status reads the file, and the current launcher then
// finds every launcher row as it left it.
func TestAnOlderLauncherRunsOnRecordsANewerLauncherWrote(t *testing.T) {
	// Built before the test's budget starts: a cold build's time is the machine's.
	old := buildPreviousLauncher(t, t.Context())
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if code, out, _ := runBin(t, old, "--version"); code != 0 || out != previousLauncherVersion+"\n" {
		t.Fatalf("the launcher built from %s says %q (exit %d)", previousLauncherCommit, out, code)
	}

	// The current launcher makes the root: schema 6, the host v1.0.0 confirmed.
	n := newNode(t)
	current := n.Launcher
	place(t, n, "v1.0.0", PkgHost)
	start(t, n)
	if _, err := n.WaitStatus(ctx, "v1.0.0 confirmed under the current launcher", runningConfirmed("v1.0.0")); err != nil {
		t.Fatal(err)
	}
	if code, err := n.Stop(ctx); err != nil || code != 0 {
		t.Fatalf("current launcher stopped with %d, %v", code, err)
	}

	// The launcher rows a newer launcher keeps: its own version confirmed and running, a bad
	// one it rolled back from.
	writeLauncherRows(t, ctx, n.Root, current)
	before := readLauncherRows(t, ctx, n.Root)
	if len(before.Versions) < 2 || len(before.Rollbacks) < 1 {
		t.Fatalf("launcher rows not written: %+v", before)
	}

	// The older launcher on that file, with a new host version to run, which must confirm.
	place(t, n, "v1.1.0", PkgHost)
	n.Launcher = old
	start(t, n)
	rep, err := n.WaitStatus(ctx, "v1.1.0 confirmed under launcher "+previousLauncherVersion, runningConfirmed("v1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	if _, code, err := n.Status(ctx); err != nil || code != 0 {
		t.Errorf("mesh-launcher %s status on a schema-6 file: exit %d, %v", previousLauncherVersion, code, err)
	}
	if text := n.StatusText(ctx); !strings.Contains(text, "v1.1.0") {
		t.Errorf("mesh-launcher %s status (text) does not name the running v1.1.0:\n%s", previousLauncherVersion, text)
	}
	if v, ok := Version(rep, "v1.0.0"); !ok || !v.Confirmed {
		t.Errorf("under launcher %s, v1.0.0 is not listed confirmed any more: %+v", previousLauncherVersion, rep.Versions)
	}
	if code, err := n.Stop(ctx); err != nil || code != 0 {
		t.Fatalf("launcher %s stopped with %d, %v", previousLauncherVersion, code, err)
	}

	// The current launcher again: it runs on what the older one left, and its rows are intact.
	n.Launcher = current
	start(t, n)
	if _, err := n.WaitStatus(ctx, "v1.1.0 running under the current launcher again", func(rep launcher.Report) bool {
		v, ok := Version(rep, "v1.1.0")
		return Running(rep) == "v1.1.0" && ok && v.Confirmed
	}); err != nil {
		t.Fatal(err)
	}
	after := readLauncherRows(t, ctx, n.Root)
	for _, want := range before.Versions {
		found := false
		for _, got := range after.Versions {
			if got.Version == want.Version {
				found = true
				if got.Digest != want.Digest || !got.Bad.Equal(want.Bad) || got.BadReason != want.BadReason || !got.Confirmed.Equal(want.Confirmed) {
					t.Errorf("launcher %s's row changed across launcher %s: before %+v, after %+v", want.Version, previousLauncherVersion, want, got)
				}
			}
		}
		if !found {
			t.Errorf("launcher %s's row is gone after launcher %s ran", want.Version, previousLauncherVersion)
		}
	}
	if !containsAll(after.Rollbacks, before.Rollbacks) {
		t.Errorf("launcher rollbacks changed across launcher %s: before %+v, after %+v", previousLauncherVersion, before.Rollbacks, after.Rollbacks)
	}
	if _, code, err := n.Status(ctx); err != nil || code != 0 {
		t.Errorf("current mesh-launcher status afterwards: exit %d, %v", code, err)
	}
}

// writeLauncherRows records, as a newer launcher does, the launcher at bin as v1.1.0 running
// and confirmed, and a v1.2.0 marked bad and rolled back from; rows the launcher already
// wrote itself are kept.
func writeLauncherRows(t *testing.T, ctx context.Context, root, bin string) {
	t.Helper()
	r, _, err := rollback.OpenForLauncher(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	d, err := digest.FromReader(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := r.LookupLauncher(ctx, "v1.1.0"); err != nil {
		t.Fatal(err)
	} else if !ok {
		if err := r.RecordLauncher(ctx, rollback.LauncherVersion{Version: "v1.1.0", Digest: d, Size: 1}); err != nil {
			t.Fatal(err)
		}
	}
	bad := digest.FromString("a launcher that crashes at start")
	for _, step := range []func() error{
		func() error { return r.SetCurrentLauncher(ctx, "v1.1.0", false, false) },
		func() error { return r.ConfirmLauncher(ctx, "v1.1.0") },
		func() error {
			return r.RecordLauncher(ctx, rollback.LauncherVersion{Version: "v1.2.0", Digest: bad, Size: int64(len("x"))})
		},
		func() error {
			return r.MarkLauncherBad(ctx, "v1.2.0", "exited with status 2 on trial", "panic: at start")
		},
		func() error {
			return r.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: "v1.2.0", To: "v1.1.0", Reason: "exited with status 2 on trial", Output: "panic: at start"})
		},
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

func containsAll(have, want []rollback.LauncherRollback) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.From == w.From && h.To == w.To && h.Reason == w.Reason && h.At.Equal(w.At) {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
