package rollback

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// t0 is the fixed moment the fake clock starts at.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// clock is a settable time source for Records.now (the wall clock) and Records.boot (the
// boot clock). advance moves both, as time passing does; stepWall moves the wall clock alone,
// as an operator or NTP stepping it does; reboot starts a new boot.
type clock struct {
	mu     sync.Mutex
	t      time.Time
	bootID string
	since  time.Duration
}

func newClock() *clock { return &clock{t: t0, bootID: "boot-1", since: time.Hour} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) boot() Boot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Boot{ID: c.bootID, Since: c.since}
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	c.since += d
}

func (c *clock) stepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *clock) reboot() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bootID += "+"
	c.since = 10 * time.Second
}

// newRoot is an empty root with an empty versions directory.
func newRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(VersionsDir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// stage writes versions/<v>/mesh-host with the given content ("binary <v>" when empty) and
// returns its sha256 digest string.
func stage(t *testing.T, root, version, content string) string {
	t.Helper()
	if content == "" {
		content = "binary " + version
	}
	if err := os.MkdirAll(VersionDir(root, version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(BinaryPath(root, version), []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return sha256Of(content)
}

func sha256Of(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// openRecords opens the records of root as the launcher does, with a fake clock at t0.
func openRecords(t *testing.T, root string) (*Records, *clock) {
	t.Helper()
	r, note, err := OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatalf("OpenForLauncher: %v", err)
	}
	if note != "" {
		t.Fatalf("OpenForLauncher on a fresh root gave a note: %s", note)
	}
	t.Cleanup(func() { r.Close() })
	c := newClock()
	r.now, r.boot = c.now, c.boot
	return r, c
}

// see records the digests of the versions on disk, as Choose does, and returns its answer.
func see(t *testing.T, r *Records, root string) Choice {
	t.Helper()
	ch, err := r.Choose(context.Background(), root)
	if err != nil {
		t.Fatalf("Choose: %v", err)
	}
	return ch
}

// seenV1 is a root with v1.0.0 staged and seen by its records (Choose has recorded its digest),
// the records on a fake clock.
func seenV1(t *testing.T) (string, *Records, *clock) {
	t.Helper()
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	r, c := openRecords(t, root)
	see(t, r, root)
	return root, r, c
}

// startEnded records a start of version that ended with outcome, one second after it began.
func startEnded(t *testing.T, r *Records, c *clock, version string, outcome Outcome) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := r.BeginStart(ctx, version)
	if err != nil {
		t.Fatalf("BeginStart %s: %v", version, err)
	}
	c.advance(time.Second)
	code := 0
	if outcome.CountsAsFailure() {
		code = 1
	}
	if err := r.EndStart(ctx, id, End{Outcome: outcome, ExitCode: code, Output: "last words of " + version}); err != nil {
		t.Fatalf("EndStart %s: %v", version, err)
	}
	return id
}

// confirm records a start of version that confirms (and leaves it open), as a running host does.
func confirm(t *testing.T, r *Records, root, version string) int64 {
	t.Helper()
	ctx := context.Background()
	id, err := r.BeginStart(ctx, version)
	if err != nil {
		t.Fatalf("BeginStart %s: %v", version, err)
	}
	if _, err := r.Confirm(ctx, root, version, id); err != nil {
		t.Fatalf("Confirm %s: %v", version, err)
	}
	return id
}

// exists reports whether path exists.
func exists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err == nil {
		return true
	}
	if os.IsNotExist(err) {
		return false
	}
	t.Fatal(err)
	return false
}

// dirNames lists ROOT/versions.
func dirNames(t *testing.T, root string) []string {
	t.Helper()
	entries, err := os.ReadDir(VersionsDir(root))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// snapshot maps every file under ROOT/versions to its content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(VersionsDir(root), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[p+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func digestOf(s string) digest.Digest { return digest.Digest(sha256Of(s)) }
