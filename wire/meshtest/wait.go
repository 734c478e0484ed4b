package meshtest

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // store.db is SQLite
)

// Wait is how long Eventually waits.
const Wait = 30 * time.Second

// Eventually polls ok every 20 ms until it returns true; after Wait it fails the test, saying
// what it waited for.
func Eventually(tb testing.TB, what string, ok func() bool) {
	tb.Helper()
	EventuallyWithin(tb, what, Wait, ok)
}

// EventuallyWithin is Eventually with its own bound, for a test whose work grows with a loaded
// machine (hundreds of hosts in one process): a bound, never a performance claim.
func EventuallyWithin(tb testing.TB, what string, wait time.Duration, ok func() bool) {
	tb.Helper()
	deadline := time.Now().Add(wait)
	for !ok() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not happen within %s", what, wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A Reconcile is one reconcile a host recorded in its store.db.
type Reconcile struct {
	Trigger        string
	Started, Ended time.Time // Ended is zero while it runs
	OK             bool
	Error          string
}

// Reconciles are a host's reconciles, oldest first.
type Reconciles []Reconcile

// Count is how many were triggered by trigger ("start", "timer", "declaration", "reconnect").
func (rs Reconciles) Count(trigger string) int {
	n := 0
	for _, r := range rs {
		if r.Trigger == trigger {
			n++
		}
	}
	return n
}

// ReadReconciles reads every reconcile the host on root recorded in root/store.db, through a
// read-only connection that leaves the running host alone (host/store's Open would close the
// reconcile in progress as interrupted). Before the host has made its store there are none.
func ReadReconciles(tb testing.TB, root string) Reconciles {
	tb.Helper()
	path := filepath.Join(root, "store.db")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT trigger, started_at, COALESCE(ended_at, 0), COALESCE(ok, 0), error FROM reconciles ORDER BY id`)
	if err != nil {
		if strings.Contains(err.Error(), "no such table") {
			return nil // the host is making its store
		}
		tb.Fatalf("read the reconciles in %s: %v", path, err)
	}
	defer rows.Close()
	var out Reconciles
	for rows.Next() {
		var r Reconcile
		var started, ended int64
		if err := rows.Scan(&r.Trigger, &started, &ended, &r.OK, &r.Error); err != nil {
			tb.Fatal(err)
		}
		r.Started = time.UnixMilli(started)
		if ended != 0 {
			r.Ended = time.UnixMilli(ended)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// Buffer is a bytes.Buffer safe for concurrent writers: where a test's logger writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Context is tb.Context() bounded by d: the whole of a test's waiting, after which what waits
// on it fails saying what it waited for, rather than hanging until go test's timeout. A bound,
// never a performance claim. It ends, as tb.Context() does, before the test's cleanups run.
func Context(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), d)
	tb.Cleanup(cancel)
	return ctx
}
