package rollback

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// withUmask runs the test under umask, as a service started with systemd's default 022 would.
// The umask is the process's, so tests using it never run in parallel.
func withUmask(t *testing.T, umask int) {
	t.Helper()
	old := syscall.Umask(umask)
	t.Cleanup(func() { syscall.Umask(old) })
}

// wantMode fails the test unless path has exactly mode (permission bits).
func wantMode(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", filepath.Base(path), err)
		return
	}
	if got := fi.Mode().Perm(); got != mode {
		t.Errorf("%s is %#o, want %#o", filepath.Base(path), got, mode)
	}
}

// The records hold the host's output and the root holds host.json: the root is the launcher's
// alone (0700) and every state file, with SQLite's -wal and -shm, is 0600 — on a fresh node, and
// on a node upgraded from a version that made them 0755 and 0644 (they are tightened on open).
func TestRootAndStateFilesArePrivateToTheService(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, root string)
	}{
		{"a fresh node", func(*testing.T, string) {}},
		{"a node upgraded from world-readable files", func(t *testing.T, root string) {
			if err := os.MkdirAll(root, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, 0o755); err != nil {
				t.Fatal(err)
			}
			// An older launcher made these; it stays open, so its -wal and -shm are there too,
			// as a killed launcher leaves them.
			r, _, err := OpenForLauncher(context.Background(), root)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			if _, err := r.BeginStart(context.Background(), "v1.0.0"); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{launcherLock, hostLock} {
				if err := os.WriteFile(filepath.Join(root, name), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range []string{RecordsName, RecordsName + "-wal", RecordsName + "-shm", launcherLock, hostLock} {
				if err := os.Chmod(filepath.Join(root, name), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withUmask(t, 0o022)
			root := filepath.Join(t.TempDir(), "mesh-host")
			tc.setup(t, root)
			ctx := context.Background()
			ll, err := LockLauncher(root)
			if err != nil {
				t.Fatal(err)
			}
			defer ll.Unlock()
			r, _, err := OpenForLauncher(ctx, root)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			hl, err := LockHost(ctx, root, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer hl.Unlock()
			// A write, so that SQLite has made its -wal and -shm.
			if _, err := r.BeginStart(ctx, "v1.1.0"); err != nil {
				t.Fatal(err)
			}
			wantMode(t, root, 0o700)
			for _, name := range []string{RecordsName, RecordsName + "-wal", RecordsName + "-shm", launcherLock, hostLock} {
				wantMode(t, filepath.Join(root, name), 0o600)
			}
		})
	}
}
