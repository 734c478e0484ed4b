//go:build linux

package rollback

import (
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// openHost opens root's records as the host does (no migration, a cache of its own), on the
// clock c, so that it and the launcher's records are two processes on one boot.
func openHost(t *testing.T, root string, c *clock) *Records {
	t.Helper()
	h, err := OpenForHost(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.now, h.boot = c.now, c.boot
	return h
}

// chooseOnce is one Choose of r, which must name want.
func chooseOnce(t *testing.T, r *Records, root, want string) Choice {
	t.Helper()
	ch, err := r.Choose(t.Context(), root)
	if err != nil {
		t.Fatalf("Choose: %v", err)
	}
	if ch.Version != want {
		t.Fatalf("Choose = %q (passed over %+v), want %q", ch.Version, ch.Skipped, want)
	}
	return ch
}

// The host verifies a staged version when it asks Choose before standing aside; the launcher,
// choosing it after the host's exit, then finds the proof and does not read the binary again.
func TestAVersionTheHostVerifiedIsChosenByTheLauncherWithoutHashing(t *testing.T) {
	tests := []struct {
		name  string
		place func(t *testing.T, r *Records, root string)
	}{
		{"copied in by hand (found): the host hashes it when it first sees it", func(t *testing.T, _ *Records, root string) {
			stage(t, root, "v1.1.0", "")
		}},
		{"staged and recorded, as delivery and install do", func(t *testing.T, r *Records, root string) {
			s, err := NewStaging(root)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Discard()
			if err := os.WriteFile(s.BinaryPath(), []byte("binary v1.1.0"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(t.Context(), r, "v1.1.0", digestOf("binary v1.1.0"), Provenance{Source: SourceDelivered}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRoot(t)
			stage(t, root, "v1.0.0", "")
			launcher, c := openRecords(t, root)
			chooseOnce(t, launcher, root, "v1.0.0")
			host := openHost(t, root, c)
			tt.place(t, host, root)

			chooseOnce(t, host, root, "v1.1.0") // the host's check before it stands aside
			if n := host.Hashed(); n != 1 {
				t.Errorf("the host hashed %d binaries, want 1 (the new version, once)", n)
			}
			before := launcher.Hashed()
			chooseOnce(t, launcher, root, "v1.1.0") // the launcher's, after the host's exit
			if n := launcher.Hashed() - before; n != 0 {
				t.Errorf("the launcher hashed %d binaries choosing the version the host verified, want 0", n)
			}
			// A third process (status, a restarted launcher) on the same boot trusts it too.
			other := openHost(t, root, c)
			chooseOnce(t, other, root, "v1.1.0")
			if n := other.Hashed(); n != 0 {
				t.Errorf("another reader hashed %d binaries, want 0", n)
			}
		})
	}
}

// The proof stands for the bytes only while the file is unchanged on this boot: any change
// to the file, or a reboot, makes the next Choose read the bytes again and judge them.
func TestABinaryChangedAfterItWasVerifiedIsHashedAgainAndRefusedIfItsBytesDiffer(t *testing.T) {
	const original = "the original binary"
	tests := []struct {
		name         string
		change       func(t *testing.T, path string, c *clock)
		wantMismatch bool
	}{
		{"rewritten in place, same length", func(t *testing.T, path string, _ *clock) {
			writeAt(t, path, "THE")
		}, true},
		{"rewritten in place, same length, its times put back", func(t *testing.T, path string, _ *clock) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			writeAt(t, path, "THE")
			if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"replaced by a rename over it, same length", func(t *testing.T, path string, _ *clock) {
			other := filepath.Join(filepath.Dir(path), "other")
			if err := os.WriteFile(other, []byte(strings.ToUpper(original)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"chmod, the bytes the same", func(t *testing.T, path string, _ *clock) {
			if err := os.Chmod(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"the same bytes written again", func(t *testing.T, path string, _ *clock) {
			writeAt(t, path, "the")
		}, false},
		{"unchanged, but the machine rebooted", func(t *testing.T, _ string, c *clock) {
			c.reboot()
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := newRoot(t)
			stage(t, root, "v1.0.0", "")
			recorded := stage(t, root, "v1.1.0", original)
			// The launcher's records: made first (they own the schema), used only after the change.
			launcher, c := openRecords(t, root)
			host := openHost(t, root, c)
			chooseOnce(t, host, root, "v1.1.0")
			if proof := verifiedAs(t, host, "v1.1.0"); proof == "" {
				t.Fatal("no proof was recorded beside the digest")
			}

			tt.change(t, BinaryPath(root, "v1.1.0"), c)

			want := "v1.1.0"
			if tt.wantMismatch {
				want = "v1.0.0"
			}
			ch := chooseOnce(t, launcher, root, want)
			if n := launcher.Hashed(); n < 1 {
				t.Errorf("the launcher hashed %d binaries, want the changed one read again", n)
			}
			if tt.wantMismatch {
				if len(ch.Skipped) != 1 || !strings.Contains(ch.Skipped[0].Mismatch, "changed") || !strings.Contains(ch.Skipped[0].Mismatch, recorded) {
					t.Errorf("Skipped = %+v, want v1.1.0 refused as changed since %s", ch.Skipped, recorded)
				}
				return
			}
			// Its bytes matched: the proof is renewed, and the next process trusts it again.
			other := openHost(t, root, c)
			chooseOnce(t, other, root, "v1.1.0")
			if n := other.Hashed(); n != 0 {
				t.Errorf("after the renewed proof another reader hashed %d binaries, want 0", n)
			}
		})
	}
}

// Records an older launcher made (schema 3) have no place for the proof: the host chooses as
// before, writes nothing new, and every reader hashes, as every reader did.
func TestOnRecordsOfAnOlderLauncherEveryReaderHashes(t *testing.T) {
	root := newRoot(t)
	db, err := sql.Open("sqlite", "file:"+RecordsPath(root))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{migrations[0], migrations[1], migrations[2], `PRAGMA user_version = 3`} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	stage(t, root, "v1.0.0", "")
	c := newClock()
	for i, who := range []string{"the host", "the launcher of schema 3"} {
		r := openHost(t, root, c)
		chooseOnce(t, r, root, "v1.0.0")
		if n := r.Hashed(); n != 1 {
			t.Errorf("%s (reader %d) hashed %d binaries, want 1", who, i, n)
		}
	}
	if v, _ := openHost(t, root, c).schemaVersion(t.Context()); v != 3 {
		t.Errorf("the records were migrated to %d by a reader", v)
	}
}

func TestAFileIdentityIsTrustedOnlyOnceATickHasPassedSinceTheFileChanged(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 500_000_000, time.UTC)
	fine := func(ago time.Duration) fileKey {
		ct := now.Add(-ago).UnixNano()
		return fileKey{ctime: ct, mtime: ct}
	}
	coarse := func(ago time.Duration) fileKey {
		ct := now.Add(-ago).Truncate(time.Second).UnixNano()
		return fileKey{ctime: ct, mtime: ct}
	}
	tests := []struct {
		name    string
		key     fileKey
		trusted bool
		waitMax time.Duration // untrusted: at most this long to wait
	}{
		{"changed a moment ago: wait the rest of the window", fine(5 * time.Millisecond), false, settleWindow},
		{"changed a window ago", fine(settleWindow), true, 0},
		{"changed an hour ago", fine(time.Hour), true, 0},
		{"a ctime in the future (the clock stepped back)", fine(-time.Minute), false, time.Minute + settleWindow},
		{"whole seconds, changed half a second ago", coarse(500 * time.Millisecond), false, coarseSettleWindow},
		{"whole seconds, changed three seconds ago", coarse(3 * time.Second), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait := tt.key.unsettledFor(now)
			if (wait <= 0) != tt.trusted || wait > tt.waitMax {
				t.Errorf("unsettledFor = %v; want trusted=%v, waiting at most %v", wait, tt.trusted, tt.waitMax)
			}
		})
	}
}

// writeAt overwrites the start of the file at path with s, in place (same inode, same size).
func writeAt(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(s), 0); err != nil {
		t.Fatal(err)
	}
}

// verifiedAs is the proof records.db keeps beside version's digest.
func verifiedAs(t *testing.T, r *Records, version string) string {
	t.Helper()
	var p sql.NullString
	if err := r.db.QueryRowContext(t.Context(), `SELECT verified_as FROM versions WHERE version = ?`, version).Scan(&p); err != nil {
		t.Fatal(err)
	}
	return p.String
}
