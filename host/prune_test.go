package host

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/novox/mesh-host/wire/meshtest"
)

// The blob cache keeps what the declaration names, never more: a blob no resource names any
// longer is removed after a complete apply (and fetched again if named later).
func TestBlobsNoLongerDeclaredArePrunedAfterACompleteApply(t *testing.T) {
	b := meshtest.StartBus(t)
	root := newRoot(t, "v1.0.0")
	cache := filepath.Join(BlobsDir(root), "sha256")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	put := func(content string) (string, string) { // a blob already cached: digest, path
		sum := sha256.Sum256([]byte(content))
		path := filepath.Join(cache, hex.EncodeToString(sum[:]))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + hex.EncodeToString(sum[:]), path
	}
	declared, declaredPath := put("declared\n")
	_, strayPath := put("named by nothing\n")
	startHost(t, root, "n1", b.URL())
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	file := filepath.Join(t.TempDir(), "f")
	b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "file", "id": %q, "spec": {"source": %q}}`, file, declared)))
	meshtest.Eventually(t, "the file applied from the cached blob and the stray blob pruned", func() bool {
		got, err := os.ReadFile(file)
		return err == nil && string(got) == "declared\n" && !exists(strayPath)
	})
	if !exists(declaredPath) {
		t.Fatal("the blob the declaration names was pruned")
	}

	b.Declare("n1", decl("n1", ""))
	meshtest.Eventually(t, "the file removed and its blob pruned", func() bool {
		return !exists(file) && !exists(declaredPath)
	})
}
