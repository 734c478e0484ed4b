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

// The launcher makes records.db on its first start, and again after moving a corrupt one aside,
// while `mesh-launcher status` or `install` may open the same path. Each used to convert the
// fresh file to WAL, and SQLite answered one of them "database is locked" at once, busy timeout
// or not: a launcher that lost could not run (CI, lab TestCorruptRecordsAreReportedAndVersionsKept).
// Two programs migrating one file at once also applied a step twice ("table already exists").
func TestCreatingAFileWhileAnotherProgramOpensItNeverFails(t *testing.T) {
	ctx := context.Background()
	others := map[string]func(string) error{
		"Open":         func(p string) error { return closed(Open(ctx, p)) },
		"OpenReadOnly": func(p string) error { return closed(OpenReadOnly(ctx, p)) },
		"Create":       func(p string) error { return closed(Create(ctx, p, schema)) },
	}
	starts := map[string]func(string){
		"missing": func(string) {},
		// An empty file, as `touch` or an older version that made it before opening it leaves.
		"empty": func(p string) {
			if err := os.WriteFile(p, nil, FileMode); err != nil {
				t.Fatal(err)
			}
		},
	}
	const rounds = 100
	for startName, prepare := range starts {
		for otherName, other := range others {
			t.Run(startName+"/"+otherName, func(t *testing.T) {
				failed := 0
				for range rounds {
					path := filepath.Join(t.TempDir(), "state.db")
					prepare(path)
					done := make(chan struct{})
					go func() {
						defer close(done)
						other(path) // refusals of a reader (not there yet, no schema yet) are its to report
					}()
					db, _, err := Create(ctx, path, schema)
					<-done
					if err != nil {
						if failed++; failed == 1 {
							t.Errorf("Create beside %s: %v", otherName, err)
						}
						continue
					}
					var n int
					if err := db.QueryRowContext(ctx, `SELECT count(*) FROM a`).Scan(&n); err != nil {
						t.Errorf("the file Create returned has no schema: %v", err)
					}
					db.Close()
					if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".state.db.new-*")); len(left) > 0 {
						t.Errorf("a temporary file was left: %v", left)
					}
				}
				if failed > 0 {
					t.Errorf("Create failed %d of %d times", failed, rounds)
				}
			})
		}
	}
}

// closed closes what an open returned and passes its error on.
func closed(db *sql.DB, _ int, err error) error {
	if db != nil {
		db.Close()
	}
	return err
}
