package rollback

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
)

// WindowWaitName is the file a host that has staged a newer version and waits for its
// maintenance window to stand aside leaves in the root (decision 0029), so that
// `mesh-launcher status`, which reads no bus, says what its heartbeat says.
const WindowWaitName = "window-wait.json"

// WindowWait is what the node waits for: the version it stands aside for when the window opens.
type WindowWait struct {
	Version string    `json:"version"`
	Opens   time.Time `json:"opens"`  // in the window's zone
	Window  string    `json:"window"` // `mon-fri 02:00-04:00 Europe/Brussels`
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
	return &w, nil
}
