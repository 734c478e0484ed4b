package store

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The store will hold file contents: store.db and SQLite's -wal and -shm are 0600 under the
// service's usual umask 022, on a fresh node and on one upgraded from a version that made them
// 0644 (they are tightened on open).
func TestStoreFilesArePrivateToTheService(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, path string)
	}{
		{"a fresh store", func(*testing.T, string) {}},
		{"a store an older host made world-readable", func(t *testing.T, path string) {
			// The older host stays open, so its -wal and -shm are there too.
			old, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { old.Close() })
			if err := old.Hold(context.Background(), []byte(`{}`), 1); err != nil {
				t.Fatal(err)
			}
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Chmod(path+suffix, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := syscall.Umask(0o022)
			defer syscall.Umask(old)
			path := filepath.Join(t.TempDir(), FileName)
			tc.setup(t, path)
			s, err := Open(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Hold(context.Background(), []byte(`{"secret":"file contents"}`), 2); err != nil {
				t.Fatal(err)
			}
			for _, suffix := range []string{"", "-wal", "-shm"} {
				fi, err := os.Stat(path + suffix)
				if err != nil {
					t.Errorf("%s: %v", FileName+suffix, err)
					continue
				}
				if got := fi.Mode().Perm(); got != 0o600 {
					t.Errorf("%s is %#o, want 0600", FileName+suffix, got)
				}
			}
		})
	}
}
