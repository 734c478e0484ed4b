package rollback

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/layout"
	"github.com/novox/mesh-host/internal/text"
)

// WindowWait is what the node waits for: the version it stands aside for when the window opens,
// and the version that waits (WindowWaitName, contract.go, says who reads it).
type WindowWait struct {
	Version string    `json:"version"`
	Opens   time.Time `json:"opens"`  // in the window's zone
	Window  string    `json:"window"` // `mon-fri 02:00-04:00 Europe/Brussels`
	// Running is the version whose host waits: until Opens the launcher restarts it, not
	// Version (decision 0034). A host from before that leaves it empty, and nothing is held.
	Running string `json:"running,omitempty"`
}

// maxWindowWaitBytes bounds what status reads of the file.
const maxWindowWaitBytes = 4 << 10

// Line is `staged v1.4.0, waiting for the window (opens 2026-12-02T02:00+01:00)`, as the
// heartbeat says it (wire.WaitingLine).
func (w WindowWait) Line() string {
	return fmt.Sprintf("staged %s, waiting for the window (opens %s)", text.Printable(text.Cut(w.Version, 128)), w.Opens.Format("2006-01-02T15:04Z07:00"))
}

// WriteWindowWait leaves w in ROOT/window-wait.json (temp, fsync, rename), or removes the file
// when w is nil.
func WriteWindowWait(root string, w *WindowWait) error {
	path := filepath.Join(root, WindowWaitName)
	if w == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	}
	b, _ := json.Marshal(w)
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadWindowWait reads ROOT/window-wait.json; nil when the host waits for no window.
func ReadWindowWait(root string) (*WindowWait, error) {
	path := filepath.Join(root, WindowWaitName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxWindowWaitBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxWindowWaitBytes {
		return nil, fmt.Errorf("%s is over %d bytes: not what a host writes", path, maxWindowWaitBytes)
	}
	var w WindowWait
	if err := json.Unmarshal(b, &w); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, v := range []string{w.Version, w.Running} {
		if v != "" && !layout.ValidVersion(v) {
			return nil, fmt.Errorf("%s names %q, not a version", path, text.Printable(text.Cut(v, 64)))
		}
	}
	return &w, nil
}

// Held is a newer version the launcher does not start yet: the host that runs the version
// before it waits for its maintenance window to stand aside (decision 0034).
type Held struct {
	Version string     // what Choose names
	Wait    WindowWait // the host's wait, as ROOT/window-wait.json says it
}

// ChooseToStart is the version the launcher starts: Choose's, unless the host waits for its
// maintenance window to stand aside for a newer one (w, from ReadWindowWait; nil: it does not).
// Then, until the window opens, it is the version that waits (a crash restart or a reboot does
// not upgrade outside the window), as long as Choose would run it were nothing newer on disk;
// ch.Held says what is held back. The host started judges its window again at once, and stands
// aside if it need not wait (an urgent target, a window changed or deleted meanwhile).
func (r *Records) ChooseToStart(ctx context.Context, root string, w *WindowWait, now time.Time) (Choice, error) {
	ch, err := r.Choose(ctx, root)
	if err != nil || ch.Version == "" {
		return ch, err
	}
	if w == nil || w.Running == "" || !now.Before(w.Opens) || semver.Compare(w.Running, ch.Version) >= 0 || !layout.ValidVersion(w.Running) {
		return ch, nil
	}
	c, err := r.candidate(ctx, root, w.Running)
	if err != nil {
		return Choice{}, err
	}
	if choose([]Candidate{c}) == "" {
		return ch, nil // the version that waited is bad or its binary is gone: nothing to hold
	}
	ch.Held = &Held{Version: ch.Version, Wait: *w}
	ch.Version = w.Running
	return ch, nil
}
