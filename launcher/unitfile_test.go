package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/rollback"
)

// startedRecords opens records on a new root and, when started, records a fresh start of the
// unit as the launcher does, returning when the records say it started.
func startedRecords(t *testing.T, started bool) (*rollback.Records, time.Time) {
	t.Helper()
	ctx := context.Background()
	r, _, err := rollback.OpenForLauncher(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if !started {
		return r, time.Time{}
	}
	if err := r.UnitStarted(ctx, "v1.0.0", "/usr/bin/mesh-launcher"); err != nil {
		t.Fatal(err)
	}
	cur, err := r.CurrentLauncher(ctx)
	if err != nil || cur.UnitStarted.IsZero() {
		t.Fatalf("the unit's start was not recorded: %+v, %v", cur, err)
	}
	return r, cur.UnitStarted
}

// putInPlace writes a unit file beside path and renames it over path, as dpkg does, with the
// given mtime (dpkg keeps the archive's); it renames again until the kernel, whose clock
// advances once a tick, stamps a ctime after the start (a put-in-place after the start).
func putInPlace(t *testing.T, path string, mtime, start time.Time) {
	t.Helper()
	for range 100 {
		tmp := path + ".dpkg-new"
		if err := os.WriteFile(tmp, []byte("[Service]\nExecStart=/usr/bin/mesh-launcher run\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if changeTime(fi).After(start) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("the kernel never stamped %s after %v", path, start)
}

func TestUnitFileChangedOnlyWhenWrittenAfterTheUnitsLastStart(t *testing.T) {
	longAgo := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) // a package built with SOURCE_DATE_EPOCH
	for _, tc := range []struct {
		name    string
		started bool
		// write makes the unit file at path, given the recorded start (zero if none).
		write func(t *testing.T, path string, start time.Time)
		want  bool
	}{
		{"a unit file written before the start is not changed", true, nil, false},
		{"a unit file whose mtime is after the start is changed", true, func(t *testing.T, path string, start time.Time) {
			later := start.Add(time.Hour)
			if err := os.Chtimes(path, later, later); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"a unit file put in place after the start with the archive's old mtime is changed", true, func(t *testing.T, path string, start time.Time) {
			putInPlace(t, path, longAgo, start)
		}, true},
		{"no start recorded: nothing to compare with", false, func(t *testing.T, path string, _ time.Time) {
			putInPlace(t, path, time.Now().Add(time.Hour), time.Time{})
		}, false},
		{"no unit file: nothing changed", true, func(t *testing.T, path string, _ time.Time) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unit := filepath.Join(t.TempDir(), UnitName)
			// Written first, so its times are before any start recorded below.
			if err := os.WriteFile(unit, []byte("[Service]\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			r, start := startedRecords(t, tc.started)
			if tc.write != nil {
				tc.write(t, unit, start)
			}
			find := func(context.Context) string {
				if _, err := os.Stat(unit); err != nil {
					return ""
				}
				return unit
			}
			if got := unitFileChanged(context.Background(), r, find); got != tc.want {
				t.Errorf("unitFileChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFindUnitFileAsksSystemctlThenTheUsualPaths(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc", UnitName)
	lib := filepath.Join(dir, "lib", UnitName)
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lib, []byte("[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	systemctl := func(body string) string {
		p := filepath.Join(t.TempDir(), "systemctl")
		script := "#!/bin/sh\necho \"$*\" > '" + p + ".args'\n" + body + "\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, systemctl string
		paths           []string
		want            string
	}{
		{"systemctl names the path it loaded the unit from", systemctl("echo /run/systemd/transient/" + UnitName), []string{etc, lib}, "/run/systemd/transient/" + UnitName},
		{"systemctl does not know the unit: the first usual path there", systemctl("echo"), []string{etc, lib}, lib},
		{"systemctl fails: the first usual path there", systemctl("echo oops >&2; exit 1"), []string{etc, lib}, lib},
		{"systemctl answers with what is not a path", systemctl("echo 'Failed to connect to bus'"), []string{lib}, lib},
		{"no systemctl: the first usual path there", filepath.Join(dir, "no-systemctl"), []string{etc, lib}, lib},
		{"nowhere", filepath.Join(dir, "no-systemctl"), []string{etc}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := findUnitFile(context.Background(), tc.systemctl, tc.paths); got != tc.want {
				t.Errorf("findUnitFile = %q, want %q", got, tc.want)
			}
			if args, err := os.ReadFile(tc.systemctl + ".args"); err == nil && string(args) != "show -p FragmentPath --value "+UnitName+"\n" {
				t.Errorf("systemctl was asked %q", args)
			}
		})
	}
}

func TestStatusSaysTheUnitFileChangedSinceTheLauncherStarted(t *testing.T) {
	for _, changed := range []bool{true, false} {
		rep := madeUpReport()
		rep.UnitFileChanged = changed
		var text, js bytes.Buffer
		if err := rep.WriteText(&text, now); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(text.String(), "unit file changed on disk since this launcher started"); got != changed {
			t.Errorf("changed %v: the text says it: %v\n%s", changed, got, text.String())
		}
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(js.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if v, ok := got["unit_file_changed"]; !ok || v != changed {
			t.Errorf("changed %v: JSON unit_file_changed = %v (present %v)", changed, v, ok)
		}
	}
}

func TestUnitFileChangedComparesContentWhenTheStartRecordedItsDigest(t *testing.T) {
	longAgo := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	const first = "[Service]\nExecStart=/usr/bin/mesh-launcher run\n"
	for _, tc := range []struct {
		name    string
		content string // what the package puts in place after the start
		want    bool
	}{
		{"the same bytes put in place again by an upgrade are not a change", first, false},
		{"other bytes put in place are a change", first + "ExecStopPost=-/usr/bin/mesh-launcher stopped\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			unit := filepath.Join(t.TempDir(), UnitName)
			if err := os.WriteFile(unit, []byte(first), 0o644); err != nil {
				t.Fatal(err)
			}
			r, start := startedRecords(t, true)
			d, err := unitFileDigest(unit)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.RecordUnitFile(ctx, d); err != nil {
				t.Fatal(err)
			}
			putInPlace(t, unit, longAgo, start)
			if err := os.WriteFile(unit+".new", []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(unit+".new", unit); err != nil {
				t.Fatal(err)
			}
			if got := unitFileChanged(ctx, r, func(context.Context) string { return unit }); got != tc.want {
				t.Errorf("unitFileChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
