package rollback

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The host's trust expiry round-trips through ROOT/trust-expired.json, is gone once removed,
// and a file the host did not write is refused by name.
func TestTrustExpiredRoundTripsAndRefusesWhatAHostDoesNotWrite(t *testing.T) {
	root := t.TempDir()
	since := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if err := WriteTrustExpired(root, &TrustExpired{Since: since, Root: 4}); err != nil {
		t.Fatal(err)
	}
	te, err := ReadTrustExpired(root)
	if err != nil || te == nil || !te.Since.Equal(since) || te.Root != 4 || te.Line() != "trust expired since 2026-12-02T12:00:00Z" {
		t.Fatalf("read back %+v, %v", te, err)
	}
	if err := WriteTrustExpired(root, nil); err != nil {
		t.Fatal(err)
	}
	if te, err := ReadTrustExpired(root); te != nil || err != nil {
		t.Fatalf("after removal: %+v, %v", te, err)
	}
	for _, bad := range []string{`{"since":`, `{"root": 4}`, `{"since":"` + strings.Repeat("x", 2000) + `"}`} {
		if err := os.WriteFile(filepath.Join(root, TrustExpiredName), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadTrustExpired(root); err == nil || !strings.Contains(err.Error(), TrustExpiredName) {
			t.Errorf("%.20q: %v, want an error naming the file", bad, err)
		}
	}
}
