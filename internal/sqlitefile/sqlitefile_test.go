package sqlitefile

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var schema = []string{`CREATE TABLE a (x INTEGER)`, `ALTER TABLE a ADD COLUMN y TEXT`}

func TestCreateMakesAPrivateFileAndMigratesItOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, found, err := Create(ctx, path, schema)
	if err != nil || found != 0 {
		t.Fatalf("Create = %d, %v", found, err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO a (x, y) VALUES (1, 'one')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if fi, err := os.Stat(path + suffix); err == nil && fi.Mode().Perm() != FileMode {
			t.Errorf("%s is %#o, want %#o", filepath.Base(path+suffix), fi.Mode().Perm(), FileMode)
		}
	}
	db, found, err = Create(ctx, path, schema)
	if err != nil || found != len(schema) {
		t.Fatalf("Create again = %d, %v; want %d", found, err, len(schema))
	}
	db.Close()
	// A newer program's file is left as it is: the caller judges it.
	db, found, err = Create(ctx, path, schema[:1])
	if err != nil || found != len(schema) {
		t.Fatalf("Create with an older schema = %d, %v", found, err)
	}
	db.Close()
}

func TestOpenNeitherCreatesNorMigrates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	for name, open := range map[string]func(context.Context, string) (*sql.DB, int, error){"Open": Open, "OpenReadOnly": OpenReadOnly} {
		if _, _, err := open(context.Background(), path); !os.IsNotExist(err) {
			t.Errorf("%s of a missing file = %v, want not-exist", name, err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a missing file was created: %v", err)
	}
}

func TestAFileThatIsNotADatabaseIsCorruptAndMovedAsideWhole(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not sqlite\n", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Create(ctx, path, schema)
	if !IsCorrupt(err) {
		t.Fatalf("Create on garbage = %v, want IsCorrupt", err)
	}
	// What a writer killed over the damaged file may leave beside it goes with it.
	if err := os.WriteFile(path+"-wal", []byte("wal"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside, err := MoveAside(path, time.Date(2026, 11, 29, 7, 12, 0, 0, time.UTC))
	if err != nil || aside != path+".corrupt-20261129T071200" {
		t.Fatalf("MoveAside = %s, %v", aside, err)
	}
	for _, p := range []string{aside, aside + "-wal"} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not kept: %v", err)
		}
	}
	db, _, err := Create(ctx, path, schema)
	if err != nil {
		t.Fatalf("Create after moving aside: %v", err)
	}
	db.Close()
}
