package rollback

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// garbage is what a records.db that is not a database holds.
var garbage = bytes.Repeat([]byte("this is not a SQLite database\x00\xff"), 200)

func writeGarbage(t *testing.T, root string) {
	t.Helper()
	if err := os.WriteFile(RecordsPath(root), garbage, 0o644); err != nil {
		t.Fatal(err)
	}
}

func userVersion(t *testing.T, r *Records) int {
	t.Helper()
	v, err := r.schemaVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestOpenForLauncherMovesCorruptRecordsAsideAndStartsFresh(t *testing.T) {
	for name, size := range map[string]int{"large": len(garbage), "smaller than a header": 10} {
		t.Run(name, func(t *testing.T) {
			root := newRoot(t)
			stage(t, root, "v1.0.0", "")
			stage(t, root, "v2.0.0", "")
			stage(t, root, ".staging-keep", "")
			before := snapshot(t, root)
			if err := os.WriteFile(RecordsPath(root), garbage[:size], 0o644); err != nil {
				t.Fatal(err)
			}

			r, note, err := OpenForLauncher(context.Background(), root)
			if err != nil {
				t.Fatalf("OpenForLauncher on a corrupt file: %v", err)
			}
			defer r.Close()
			aside, _ := filepath.Glob(RecordsPath(root) + ".corrupt-*")
			if len(aside) != 1 {
				t.Fatalf("moved-aside files: %v, want one records.db.corrupt-*", aside)
			}
			if b, err := os.ReadFile(aside[0]); err != nil || !bytes.Equal(b, garbage[:size]) {
				t.Errorf("the moved-aside file does not hold the corrupt bytes (err %v)", err)
			}
			for _, want := range []string{RecordsPath(root), aside[0]} {
				if !strings.Contains(note, want) {
					t.Errorf("note %q does not name %s", note, want)
				}
			}
			if got := userVersion(t, r); got != SchemaVersion {
				t.Errorf("user_version = %d, want %d", got, SchemaVersion)
			}
			if !reflect.DeepEqual(snapshot(t, root), before) {
				t.Error("the versions directory changed while recovering from corrupt records")
			}
			st, err := r.Status(context.Background(), root, DefaultPolicy)
			if err != nil {
				t.Fatal(err)
			}
			if st.Note != note {
				t.Errorf("Status.Note = %q, want the recovery note %q", st.Note, note)
			}
			if len(st.Rollbacks) != 0 || st.Failed {
				t.Errorf("fresh records carry history: %+v", st)
			}
			// The fresh file is a good one: opening it again finds nothing to recover.
			r.Close()
			r2, note2, err := OpenForLauncher(context.Background(), root)
			if err != nil || note2 != "" {
				t.Fatalf("reopening after recovery = %q, %v; want no note", note2, err)
			}
			r2.Close()
		})
	}
}

func TestOpenForHostAndStatusRefuseCorruptRecordsNamingTheFile(t *testing.T) {
	for name, open := range map[string]func(context.Context, string) (*Records, error){
		"OpenForHost": OpenForHost,
	} {
		t.Run(name, func(t *testing.T) {
			root := newRoot(t)
			stage(t, root, "v1.0.0", "")
			writeGarbage(t, root)
			before := snapshot(t, root)
			r, err := open(context.Background(), root)
			if err == nil {
				r.Close()
				t.Fatal("opened a corrupt records file")
			}
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("error %v does not wrap ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), RecordsPath(root)) {
				t.Errorf("error %q does not name %s", err, RecordsPath(root))
			}
			// It neither moves the file nor touches the versions.
			if b, _ := os.ReadFile(RecordsPath(root)); !bytes.Equal(b, garbage) {
				t.Error("the corrupt file was changed")
			}
			if m, _ := filepath.Glob(RecordsPath(root) + ".corrupt-*"); len(m) != 0 {
				t.Errorf("%s moved the file aside: %v", name, m)
			}
			if !reflect.DeepEqual(snapshot(t, root), before) {
				t.Error("the versions directory changed")
			}
		})
	}
}

func TestOpenForHostOnMissingRecordsSaysToRunThroughTheLauncher(t *testing.T) {
	root := newRoot(t)
	_, err := OpenForHost(context.Background(), root)
	if err == nil {
		t.Fatal("OpenForHost created records")
	}
	for _, want := range []string{RecordsPath(root), "mesh-launcher"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if exists(t, RecordsPath(root)) {
		t.Error("OpenForHost created records.db")
	}
}

func TestOpenForHostOnRecordsWithoutSchemaSaysToRunThroughTheLauncher(t *testing.T) {
	root := newRoot(t)
	if err := os.WriteFile(RecordsPath(root), nil, 0o644); err != nil { // an empty file is an empty database
		t.Fatal(err)
	}
	_, err := OpenForHost(context.Background(), root)
	if err == nil || !strings.Contains(err.Error(), "mesh-launcher") || !strings.Contains(err.Error(), "no schema") {
		t.Errorf("OpenForHost on records without schema = %v", err)
	}
}

func TestOpenForLauncherMigratesOnceAndReopeningIsIdempotent(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	ctx := context.Background()
	r, _ := openRecords(t, root)
	if got := userVersion(t, r); got != SchemaVersion {
		t.Fatalf("user_version = %d, want %d", got, SchemaVersion)
	}
	see(t, r, root)
	if err := r.MarkBad(ctx, "v1.0.0", "kept"); err != nil {
		t.Fatal(err)
	}
	r.Close()
	for i := 0; i < 3; i++ {
		r, note, err := OpenForLauncher(ctx, root)
		if err != nil || note != "" {
			t.Fatalf("reopen %d: note %q, err %v", i, note, err)
		}
		if got := userVersion(t, r); got != SchemaVersion {
			t.Errorf("reopen %d: user_version = %d", i, got)
		}
		if bad, reason, err := r.IsBad(ctx, "v1.0.0"); err != nil || !bad || reason != "kept" {
			t.Errorf("reopen %d: IsBad = %v, %q, %v; records lost", i, bad, reason, err)
		}
		var launcherRows int
		if err := r.db.QueryRow(`SELECT COUNT(*) FROM launcher`).Scan(&launcherRows); err != nil || launcherRows != 1 {
			t.Errorf("reopen %d: launcher rows = %d, %v; want exactly 1", i, launcherRows, err)
		}
		r.Close()
	}
	// The host opens what the launcher made, and sees the same.
	h, err := OpenForHost(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if bad, _, _ := h.IsBad(ctx, "v1.0.0"); !bad {
		t.Error("the host does not see what the launcher recorded")
	}
	if h.Path() != RecordsPath(root) {
		t.Errorf("Path = %s", h.Path())
	}
}

func TestOpenForLauncherLeavesANewerSchemaAlone(t *testing.T) {
	root := newRoot(t)
	ctx := context.Background()
	r, _ := openRecords(t, root)
	if _, err := r.db.Exec(`ALTER TABLE versions ADD COLUMN from_the_future TEXT`); err != nil {
		t.Fatal(err)
	}
	if _, err := r.db.Exec(`PRAGMA user_version = 99`); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r2, note, err := OpenForLauncher(ctx, root)
	if err != nil || note != "" {
		t.Fatalf("OpenForLauncher on a newer schema = %q, %v", note, err)
	}
	defer r2.Close()
	if got := userVersion(t, r2); got != 99 {
		t.Errorf("user_version = %d, want 99 (an older launcher never downgrades)", got)
	}
	stage(t, root, "v1.0.0", "")
	if ch := see(t, r2, root); ch.Version != "v1.0.0" {
		t.Errorf("Choose on a newer schema = %q", ch.Version)
	}
}

func TestRecordsUseWAL(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	var mode string
	if err := r.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
}
