package launcher

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/rollback"
)

// launcherRoot is stagedRoot with the launcher records setup writes, through the rollback API
// as the launcher writes them, and the launcher versions on disk it names.
func launcherRoot(t *testing.T, onDisk []string, setup func(ctx context.Context, r *rollback.Records) error, schema int) string {
	t.Helper()
	root := stagedRoot(t, os.Getpid())
	for _, v := range onDisk {
		if err := os.MkdirAll(rollback.LauncherDir(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(rollback.LauncherPath(root, v), []byte("mesh-launcher "+v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	r, _, err := rollback.OpenForLauncher(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if err := setup(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if schema != 0 { // as a launcher of that schema left the file
		db, err := sql.Open("sqlite", rollback.RecordsPath(root))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schema)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func delivered(v, carriedBy string) rollback.LauncherVersion {
	return rollback.LauncherVersion{Version: v, Digest: digest.FromString("mesh-launcher " + v), Size: 14,
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: "82912897d4beaa3c"}, CarriedBy: carriedBy}
}

// each runs the calls in order, stopping at the first error.
func each(calls ...func() error) error {
	for _, c := range calls {
		if err := c(); err != nil {
			return err
		}
	}
	return nil
}

// `mesh-launcher status` shows the launcher running, the floor and the launcher versions after
// the host's (issue 19, 6): LAUNCHER VERSION, DIGEST, STATE (confirmed, trial, BAD: why),
// PROVENANCE, and the last launcher rollback with its output; --json has them under "launcher".
func TestStatusShowsTheLauncherTheFloorAndTheLauncherVersions(t *testing.T) {
	const floorPath = "/usr/bin/mesh-launcher"
	for _, tc := range []struct {
		name   string
		schema int // records.db's schema set back to this, when not 0
		onDisk []string
		setup  func(ctx context.Context, r *rollback.Records) error
		lines  []string // each a line of the text, blanks squeezed
		absent []string
		json   rollback.LauncherReport // version, digest, floor_version, state, rolled_back_from; versions and rollbacks by count
		nv, nr int
	}{
		{name: "only the floor: it runs", setup: func(ctx context.Context, r *rollback.Records) error {
			return each(func() error { return r.UnitStarted(ctx, "v1.0.0", floorPath) },
				func() error { return r.SetCurrentLauncher(ctx, "v1.0.0", true, false) })
		}, lines: []string{"LAUNCHER VERSION DIGEST STATE PROVENANCE", "v1.0.0 - running, floor the package's: /usr/bin/mesh-launcher"},
			absent: []string{"last launcher rollback"},
			json:   rollback.LauncherReport{Version: "v1.0.0", FloorVersion: "v1.0.0", State: rollback.LauncherFloor}},
		{name: "a delivered launcher on trial runs; the floor does not", onDisk: []string{"v1.1.0"}, setup: func(ctx context.Context, r *rollback.Records) error {
			return each(func() error { return r.UnitStarted(ctx, "v1.0.0", floorPath) },
				func() error { return r.RecordLauncher(ctx, delivered("v1.1.0", "v1.4.0")) },
				func() error { return r.SetCurrentLauncher(ctx, "v1.1.0", false, true) })
		}, lines: []string{"v1.1.0 " + shortDigest(digest.FromString("mesh-launcher v1.1.0").String()) + " running, trial delivered with v1.4.0, signed by key 82912897d4beaa3c",
			"v1.0.0 - floor the package's: /usr/bin/mesh-launcher"},
			json: rollback.LauncherReport{Version: "v1.1.0", Digest: digest.FromString("mesh-launcher v1.1.0"), FloorVersion: "v1.0.0", State: rollback.LauncherTrial}, nv: 1},
		{name: "rolled back from a bad launcher: BAD with why, the rollback with its output", onDisk: []string{"v1.1.0", "v1.2.0"},
			setup: func(ctx context.Context, r *rollback.Records) error {
				return each(func() error { return r.UnitStarted(ctx, "v1.0.0", floorPath) },
					func() error { return r.RecordLauncher(ctx, delivered("v1.1.0", "v1.4.0")) },
					func() error { return r.RecordLauncher(ctx, delivered("v1.2.0", "v1.5.0")) },
					func() error { return r.SetCurrentLauncher(ctx, "v1.1.0", false, true) },
					func() error { return r.ConfirmLauncher(ctx, "v1.1.0") },
					func() error { return r.SetCurrentLauncher(ctx, "v1.2.0", false, true) },
					func() error {
						return r.MarkLauncherBad(ctx, "v1.2.0", "exited with status 2 before confirming\x1b[2J", "starting\npanic: launcher boom")
					},
					func() error {
						return r.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: "v1.2.0", To: "v1.1.0",
							Reason: "exited with status 2 before confirming", Output: "starting\npanic: launcher boom\x1b]0;pwned\x07"})
					},
					func() error { return r.SetCurrentLauncher(ctx, "v1.1.0", false, false) })
			},
			lines: []string{
				"v1.2.0 " + shortDigest(digest.FromString("mesh-launcher v1.2.0").String()) + ` BAD: exited with status 2 before confirming\x1b[2J delivered with v1.5.0, signed by key 82912897d4beaa3c`,
				"v1.1.0 " + shortDigest(digest.FromString("mesh-launcher v1.1.0").String()) + " running, confirmed delivered with v1.4.0, signed by key 82912897d4beaa3c",
				"v1.0.0 - floor the package's: /usr/bin/mesh-launcher",
				"last launcher rollback: v1.2.0 -> v1.1.0 at ",
				" exited with status 2 before confirming",
				" last output of launcher v1.2.0:",
				" | starting",
				` | panic: launcher boom\x1b]0;pwned\x07`,
			},
			json: rollback.LauncherReport{Version: "v1.1.0", Digest: digest.FromString("mesh-launcher v1.1.0"), FloorVersion: "v1.0.0",
				State: rollback.LauncherConfirmed, RolledBackFrom: "v1.2.0"}, nv: 2, nr: 1},
		{name: "records older than launcher versions say so", schema: 5, setup: func(ctx context.Context, r *rollback.Records) error {
			return r.SetCurrentLauncher(ctx, "v1.0.0", true, false)
		}, lines: []string{"launcher versions: not recorded (records.db is older than launcher versions, schema 6; the launcher that knows them migrates it at its next start)"},
			absent: []string{"LAUNCHER VERSION"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := launcherRoot(t, tc.onDisk, tc.setup, tc.schema)
			rep := statusWhileLocked(t, root)
			out := textOf(t, rep)
			lines := strings.Split(out, "\n")
			at := -1
			for _, want := range tc.lines {
				found := false
				for i := at + 1; i < len(lines); i++ {
					if strings.HasPrefix(lines[i], want) {
						at, found = i, true
						break
					}
				}
				if !found {
					t.Errorf("no line starting %q after line %d:\n%s", want, at, out)
				}
			}
			for _, no := range tc.absent {
				if strings.Contains(out, no) {
					t.Errorf("text has %q:\n%s", no, out)
				}
			}
			for _, c := range []string{"\x1b", "\x07"} {
				if strings.Contains(out, c) {
					t.Errorf("text holds %q", c)
				}
			}
			// The host's table comes first, untouched: its rows are the host versions alone.
			if !strings.Contains(out, "VERSION FAILURES DIGEST STATE PROVENANCE\nv1.0.0 0 ") {
				t.Errorf("the host's version table is not before the launcher's:\n%s", out)
			}

			var b bytes.Buffer
			if err := rep.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Launcher map[string]json.RawMessage `json:"launcher"`
			}
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"version", "digest", "floor_version", "state", "versions", "rollbacks"} {
				if _, ok := doc.Launcher[k]; !ok {
					t.Errorf("--json launcher lacks %q: %s", k, b.String())
				}
			}
			var got rollback.LauncherReport
			if err := json.Unmarshal(b.Bytes(), &struct {
				L *rollback.LauncherReport `json:"launcher"`
			}{&got}); err != nil {
				t.Fatal(err)
			}
			if got.Version != tc.json.Version || got.Digest != tc.json.Digest || got.FloorVersion != tc.json.FloorVersion ||
				got.State != tc.json.State || got.RolledBackFrom != tc.json.RolledBackFrom || len(got.Versions) != tc.nv || len(got.Rollbacks) != tc.nr {
				t.Errorf("--json launcher = %+v\nwant %+v with %d versions, %d rollbacks", got, tc.json, tc.nv, tc.nr)
			}
			if tc.nr > 0 && (got.Rollbacks[0].From != "v1.2.0" || !strings.Contains(got.Rollbacks[0].Output, "panic: launcher boom")) {
				t.Errorf("--json launcher rollbacks = %+v", got.Rollbacks)
			}
		})
	}
}
