package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/layout"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

var now = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// madeUpReport is a report with a bit of everything in it.
func madeUpReport() Report {
	return Report{
		Root:        "/var/lib/mesh-host",
		LauncherPID: 12,
		Status: rollback.Status{
			Running:      &rollback.Running{Version: "v1.1.0", PID: 77, Since: now.Add(-90 * time.Second), StartID: 5},
			KnownGood:    "v1.0.0",
			Predecessor:  "v1.0.0",
			Failed:       true,
			FailedReason: "v1.0.0, the version rolled back to, failed 3 times too",
			Note:         "records.db was not a readable SQLite database",
			Versions: []rollback.VersionStatus{
				{Version: "v1.3.0", Digest: "sha256:3333333333333333333333333333", OnDisk: true, Mismatch: "binary changed since it was first seen"},
				{Version: "v1.2.0", Digest: "sha256:2222222222222222222222222222", OnDisk: true, Bad: true, BadReason: "failed 3 times without confirming", Failures: 3, LastOutput: "panic: boom"},
				{Version: "v1.1.0", Digest: "sha256:1111111111111111111111111111", OnDisk: true, Running: true, Failures: 1,
					Provenance: rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: "3f2a9c0d1e2b4a5c"}},
				{Version: "v1.0.0", Digest: "sha256:0000000000000000000000000000", OnDisk: true, Confirmed: true,
					Provenance: rollback.Provenance{Source: rollback.SourceInstalled, From: "/usr/share/mesh-host/mesh-host"}},
				{Version: "v0.9.0", Digest: "sha256:0909090909090909090909090909", Confirmed: true},
			},
			Ignored: []string{".staging-abc", "latest"},
			Rollbacks: []rollback.Rollback{
				{From: "v1.2.0", To: "v1.0.0", At: now.Add(-time.Hour), Reason: "v1.2.0 failed 3 times without confirming", Output: "loading\npanic: boom"},
				{From: "v0.8.0", To: "v0.7.0", At: now.Add(-48 * time.Hour), Reason: "older"},
			},
		},
	}
}

var spaces = regexp.MustCompile(`[ \t]+`)

// textOf renders WriteText with runs of blanks squeezed to one, so tests do not depend on column widths.
func textOf(t *testing.T, rep Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteText(&b, now); err != nil {
		t.Fatal(err)
	}
	return spaces.ReplaceAllString(b.String(), " ")
}

func TestWriteTextShowsEverythingAPersonNeeds(t *testing.T) {
	out := textOf(t, madeUpReport())
	for _, want := range []string{
		"root /var/lib/mesh-host",
		"launcher running (pid 12)",
		"running v1.1.0 (pid 77, for 1m30s)",
		"known-good v1.0.0",
		"predecessor v1.0.0",
		"FAILED: v1.0.0, the version rolled back to, failed 3 times too",
		"note records.db was not a readable SQLite database",
		"VERSION", "FAILURES", "DIGEST", "STATE", "PROVENANCE",
		"running, unconfirmed delivered, signed by key 3f2a9c0d1e2b4a5c\n",
		"confirmed installed by hand\n",
		"confirmed, retired (record only) not recorded\n",
		"NOT RUN: binary changed since it was first seen",
		"BAD",
		"v1.2.0 is bad: failed 3 times without confirming",
		"running, unconfirmed",
		"confirmed, retired (record only)",
		".staging-abc - - ignored (not a version) -",
		"latest - - ignored (not a version) -",
		"last rollback: v1.2.0 -> v1.0.0 at " + now.Add(-time.Hour).Format(time.RFC3339) + " (1h0m0s ago)",
		"v1.2.0 failed 3 times without confirming",
		"last output of v1.2.0:",
		"| loading\n",
		"| panic: boom\n",
		"(1 earlier rollback; --json lists them)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	// Versions are listed in the report's order, each on its own line with failures and a short digest.
	var order []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && layout.ValidVersion(f[0]) && strings.HasPrefix(line, f[0]) {
			order = append(order, f[0])
			if len(f) < 3 || !strings.HasPrefix(f[2], "sha256:") || !strings.HasSuffix(f[2], "…") || len(f[2]) > 19+len("…") {
				t.Errorf("version line %q lacks a short digest", line)
			}
		}
	}
	if want := []string{"v1.3.0", "v1.2.0", "v1.1.0", "v1.0.0", "v0.9.0"}; !reflect.DeepEqual(order, want) {
		t.Errorf("versions listed %v, want %v", order, want)
	}
	if strings.Contains(out, "older") {
		t.Error("text shows more than the last rollback")
	}
}

func TestWriteTextOfARootWithNoLauncherSaysItIsDegraded(t *testing.T) {
	out := textOf(t, Report{Root: "/r", Status: rollback.Status{Versions: []rollback.VersionStatus{{Version: "v1.0.0", OnDisk: true}}}})
	for _, want := range []string{"launcher not running", "running -", "known-good -", "predecessor -", "state degraded: mesh-launcher is not running", "v1.0.0 0 - unconfirmed not recorded"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"FAILED", "note", "last rollback", "is bad"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("text has %q:\n%s", unwanted, out)
		}
	}
}

func TestWriteJSONHasTheDocumentedKeys(t *testing.T) {
	var b bytes.Buffer
	if err := madeUpReport().WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, b.String())
	}
	for _, k := range []string{"running", "known_good", "predecessor", "failed", "failed_reason", "versions", "rollbacks"} {
		if _, ok := got[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if got["known_good"] != "v1.0.0" || got["predecessor"] != "v1.0.0" || got["failed"] != true ||
		got["failed_reason"] != "v1.0.0, the version rolled back to, failed 3 times too" {
		t.Errorf("JSON top level = %v", got)
	}
	running, ok := got["running"].(map[string]any)
	if !ok {
		t.Fatalf("running = %v, want an object", got["running"])
	}
	if keys := sortedKeys(running); !reflect.DeepEqual(keys, []string{"pid", "since", "version"}) {
		t.Errorf("running has keys %v, want exactly version, pid, since", keys)
	}
	if running["version"] != "v1.1.0" || running["pid"] != float64(77) {
		t.Errorf("running = %v", running)
	}
	if since, err := time.Parse(time.RFC3339Nano, running["since"].(string)); err != nil || !since.Equal(now.Add(-90*time.Second)) {
		t.Errorf("running.since = %v, %v", running["since"], err)
	}

	versions, ok := got["versions"].([]any)
	if !ok || len(versions) != 5 {
		t.Fatalf("versions = %v", got["versions"])
	}
	for _, v := range versions {
		m := v.(map[string]any)
		for _, k := range []string{"version", "digest", "running", "confirmed", "bad", "bad_reason", "failures"} {
			if _, ok := m[k]; !ok {
				t.Errorf("version %v lacks %q", m["version"], k)
			}
		}
	}
	bad := versions[1].(map[string]any)
	if bad["version"] != "v1.2.0" || bad["bad"] != true || bad["bad_reason"] != "failed 3 times without confirming" || bad["failures"] != float64(3) {
		t.Errorf("versions[1] = %v", bad)
	}
	if r := versions[2].(map[string]any); r["running"] != true || r["confirmed"] != false {
		t.Errorf("versions[2] = %v", r)
	}
	// Provenance is an object: where the binary came from, with the key or the file.
	for i, want := range map[int]map[string]any{
		0: {"source": ""},
		2: {"source": "delivered", "signed_by": "3f2a9c0d1e2b4a5c"},
		3: {"source": "installed", "from": "/usr/share/mesh-host/mesh-host"},
	} {
		if got := versions[i].(map[string]any)["provenance"]; !reflect.DeepEqual(got, want) {
			t.Errorf("versions[%d].provenance = %v, want %v", i, got, want)
		}
	}

	rbs, ok := got["rollbacks"].([]any)
	if !ok || len(rbs) != 2 {
		t.Fatalf("rollbacks = %v", got["rollbacks"])
	}
	rb := rbs[0].(map[string]any)
	for k, want := range map[string]any{"from": "v1.2.0", "to": "v1.0.0", "reason": "v1.2.0 failed 3 times without confirming"} {
		if rb[k] != want {
			t.Errorf("rollbacks[0].%s = %v, want %v", k, rb[k], want)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, rb["at"].(string)); err != nil || !at.Equal(now.Add(-time.Hour)) {
		t.Errorf("rollbacks[0].at = %v, %v", rb["at"], err)
	}
}

func TestWriteJSONRunningIsNullWhenNothingRuns(t *testing.T) {
	var b bytes.Buffer
	rep := Report{Root: "/r", Status: rollback.Status{Versions: []rollback.VersionStatus{}, Rollbacks: []rollback.Rollback{}}}
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if string(got["running"]) != "null" {
		t.Errorf("running = %s, want null", got["running"])
	}
	if string(got["versions"]) != "[]" || string(got["rollbacks"]) != "[]" {
		t.Errorf("versions %s, rollbacks %s; want empty lists", got["versions"], got["rollbacks"])
	}
}

func sortedKeys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// stagedRoot is a root with records made as the launcher makes them, v1.0.0 on disk, and an
// open start of it with the given pid.
func stagedRoot(t *testing.T, pid int) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(rollback.VersionDir(root, "v1.0.0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rollback.BinaryPath(root, "v1.0.0"), []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, _, err := rollback.OpenForLauncher(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Choose(ctx, root); err != nil {
		t.Fatal(err)
	}
	id, err := r.BeginStart(ctx, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetPID(ctx, id, pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	return root
}

// statusWhileLocked reads root's status while this process holds the launcher's lock, as a
// running launcher does.
func statusWhileLocked(t *testing.T, root string) Report {
	t.Helper()
	lock, err := rollback.LockLauncher(root)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	rep, err := ReadStatus(context.Background(), root, rollback.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestReadStatusShowsTheOpenStartWhileALauncherHoldsTheRoot(t *testing.T) {
	root := stagedRoot(t, os.Getpid()) // a live pid
	rep := statusWhileLocked(t, root)
	if rep.LauncherPID != os.Getpid() || rep.Root != root {
		t.Errorf("LauncherPID %d, Root %q", rep.LauncherPID, rep.Root)
	}
	if rep.Running == nil || rep.Running.Version != "v1.0.0" || rep.Running.PID != os.Getpid() {
		t.Errorf("Running = %+v, want v1.0.0", rep.Running)
	}
	if len(rep.Versions) != 1 || !rep.Versions[0].Running {
		t.Errorf("Versions = %+v, want v1.0.0 running", rep.Versions)
	}
}

func TestReadStatusHidesAnOpenStartWhenNoLauncherRuns(t *testing.T) {
	root := stagedRoot(t, os.Getpid())
	rep, err := ReadStatus(context.Background(), root, rollback.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if rep.LauncherPID != 0 || rep.Running != nil {
		t.Errorf("LauncherPID %d, Running %+v; want no launcher, nothing running", rep.LauncherPID, rep.Running)
	}
	if len(rep.Versions) != 1 || rep.Versions[0].Running {
		t.Errorf("Versions = %+v, want v1.0.0 not running", rep.Versions)
	}
}

func TestReadStatusHidesAnOpenStartWhoseProcessIsGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		meshtest.SkipUnlessCI(t, "cannot run true: %v", err)
	}
	rep := statusWhileLocked(t, stagedRoot(t, cmd.Process.Pid)) // exited and reaped
	if rep.Running != nil {
		t.Errorf("Running = %+v, want none: its process is gone", rep.Running)
	}
}

func TestReadStatusWithoutRecordsSaysTheLauncherNeverRan(t *testing.T) {
	root := t.TempDir()
	_, err := ReadStatus(context.Background(), root, rollback.DefaultPolicy)
	if err == nil || !strings.Contains(err.Error(), rollback.RecordsPath(root)) || !strings.Contains(err.Error(), "never run") {
		t.Errorf("ReadStatus without records = %v", err)
	}
	if _, err := os.Stat(rollback.RecordsPath(root)); !errors.Is(err, os.ErrNotExist) {
		t.Error("ReadStatus created records.db")
	}
}

func TestReadStatusOfCorruptRecordsSaysWhatToDo(t *testing.T) {
	root := t.TempDir()
	garbage := bytes.Repeat([]byte("not a database "), 100)
	if err := os.WriteFile(rollback.RecordsPath(root), garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadStatus(context.Background(), root, rollback.DefaultPolicy)
	if !errors.Is(err, rollback.ErrCorrupt) {
		t.Fatalf("ReadStatus of corrupt records = %v, want ErrCorrupt", err)
	}
	for _, want := range []string{rollback.RecordsPath(root), "mesh-launcher run", "aside", "intact"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if b, _ := os.ReadFile(rollback.RecordsPath(root)); !bytes.Equal(b, garbage) {
		t.Error("status changed the corrupt file")
	}
}

func TestStateIsHealthyDegradedOrFailedWithTheReason(t *testing.T) {
	running := &rollback.Running{Version: "v1.0.0", PID: 9}
	for _, tc := range []struct {
		name   string
		rep    Report
		state  string
		reason string // a part of the degraded reason
		exit   int
	}{
		{"running, no failures", Report{LauncherPID: 1, Status: rollback.Status{Running: running,
			Versions: []rollback.VersionStatus{{Version: "v1.0.0", Running: true, Confirmed: true, FailuresTotal: 9}}}}, StateHealthy, "", 0},
		{"failed state wins", Report{LauncherPID: 0, Status: rollback.Status{Failed: true, FailedReason: "x"}}, StateFailed, "", ExitFailed},
		{"no launcher", Report{Status: rollback.Status{}}, StateDegraded, "mesh-launcher is not running", ExitDegraded},
		{"confirmed version crash-looping, between restarts", Report{LauncherPID: 1, Status: rollback.Status{
			Versions: []rollback.VersionStatus{{Version: "v1.0.0", Confirmed: true, Failures: 7, LastFailure: "exited with status 1: boom"}}}},
			StateDegraded, "the host is not running: v1.0.0 failed 7 times recently and waits to be restarted (last: exited with status 1: boom)", ExitDegraded},
		{"confirmed version running after failures", Report{LauncherPID: 1, Status: rollback.Status{Running: running,
			Versions: []rollback.VersionStatus{{Version: "v1.0.0", Running: true, Confirmed: true, Failures: 1, LastFailure: "showed no sign of life for the liveness limit (hung)"}}}},
			StateDegraded, "v1.0.0 is restarting in a loop: 1 failure recently (last: showed no sign of life", ExitDegraded},
		{"unconfirmed version on trial and failing", Report{LauncherPID: 1, Status: rollback.Status{Running: running,
			Versions: []rollback.VersionStatus{{Version: "v1.0.0", Running: true, Failures: 2, LastFailure: "exited with status 2"}}}},
			StateDegraded, "v1.0.0 is on trial and failing: 2 failures", ExitDegraded},
		{"a bad version's failures are history", Report{LauncherPID: 1, Status: rollback.Status{Running: running,
			Versions: []rollback.VersionStatus{{Version: "v1.1.0", Bad: true, Failures: 3}, {Version: "v1.0.0", Running: true, Confirmed: true}}}},
			StateHealthy, "", 0},
		{"host not running, nothing failing", Report{LauncherPID: 1}, StateDegraded, "the host is not running", ExitDegraded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := tc.rep
			rep.State, rep.DegradedReason = judgeState(rep)
			if rep.State != tc.state || !strings.Contains(rep.DegradedReason, tc.reason) || (tc.reason == "") != (rep.DegradedReason == "") {
				t.Errorf("state %q reason %q, want %q with %q", rep.State, rep.DegradedReason, tc.state, tc.reason)
			}
			if got := rep.ExitCode(); got != tc.exit {
				t.Errorf("exit %d, want %d", got, tc.exit)
			}
		})
	}
}

func TestWriteTextPrintsNothingThatDrivesATerminal(t *testing.T) {
	rep := madeUpReport()
	rep.FailedReason = "v1\x1b[2Jboom"
	rep.Rollbacks[0].Output = "loading\n\x1b]0;pwned\x07\u202egnirts"
	rep.Versions[1].BadReason = "bad\x9b31m"
	var b bytes.Buffer
	if err := rep.WriteText(&b, now); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"\x1b", "\x07", "\u202e", "\x9b"} {
		if strings.Contains(b.String(), c) {
			t.Errorf("status text holds %q:\n%s", c, b.String())
		}
	}
}

// status lists versions newest first by semantic version, in the table and in --json, whether
// a version is on disk or only in the records (a bad one removed): v1.10.0 before v1.2.0.
func TestStatusListsVersionsNewestFirst(t *testing.T) {
	root := t.TempDir()
	ctx := t.Context()
	for _, v := range []string{"v1.0.0", "v1.1.0", "v1.2.0", "v1.10.0", "v1.10.0-rc.1"} {
		if err := os.MkdirAll(rollback.VersionDir(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(rollback.BinaryPath(root, v), []byte("binary "+v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, _, err := rollback.OpenForLauncher(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := ReadStatus(ctx, root, rollback.DefaultPolicy); err != nil { // records each version seen
		t.Fatal(err)
	}
	for _, v := range []string{"v1.2.0", "v1.10.0-rc.1"} { // kept in the records only
		if err := os.RemoveAll(rollback.VersionDir(root, v)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := ReadStatus(ctx, root, rollback.DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"v1.10.0", "v1.10.0-rc.1", "v1.2.0", "v1.1.0", "v1.0.0"}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Versions []struct{ Version string } `json:"versions"`
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, v := range doc.Versions {
		listed = append(listed, v.Version)
	}
	if !slices.Equal(listed, want) {
		t.Errorf("--json versions %v, want %v", listed, want)
	}
	var rows []string
	for _, line := range strings.Split(textOf(t, rep), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "v1.") {
			rows = append(rows, f[0])
		}
	}
	if !slices.Equal(rows, want) {
		t.Errorf("the table's rows %v, want %v", rows, want)
	}
}
