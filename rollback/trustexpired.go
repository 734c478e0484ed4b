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
)

// TrustExpired is what the host leaves in ROOT/trust-expired.json while the newest root of
// trust it holds has expired (decision 0045): since when, and that root's version. The host
// keeps running and reconciling then, and takes no new target; `mesh-launcher status`, which
// reads no bus, says it as the heartbeat does.
type TrustExpired struct {
	Since time.Time `json:"since"`
	Root  uint64    `json:"root"`
}

// maxTrustExpiredBytes bounds what status reads of the file.
const maxTrustExpiredBytes = 1 << 10

// Line is `trust expired since 2026-12-02T12:00:00Z`, as every reader says it
// (wire.TrustExpiredLine).
func (t TrustExpired) Line() string {
	return "trust expired since " + t.Since.UTC().Format(time.RFC3339)
}

// WriteTrustExpired leaves t in ROOT/trust-expired.json (temp, fsync, rename), or removes the
// file when t is nil (trust is fresh).
func WriteTrustExpired(root string, t *TrustExpired) error {
	path := filepath.Join(root, TrustExpiredName)
	if t == nil {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", path, err)
		}
		return nil
	}
	b, _ := json.Marshal(t)
	if err := atomicfile.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ReadTrustExpired reads ROOT/trust-expired.json; nil when the host's trust has not expired.
func ReadTrustExpired(root string) (*TrustExpired, error) {
	path := filepath.Join(root, TrustExpiredName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTrustExpiredBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxTrustExpiredBytes {
		return nil, fmt.Errorf("%s is over %d bytes: not what a host writes", path, maxTrustExpiredBytes)
	}
	var t TrustExpired
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if t.Since.IsZero() {
		return nil, fmt.Errorf("%s names no time since which trust expired", path)
	}
	return &t, nil
}
