package truststore_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/truststore"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

var rel, tgt = meshtest.ReleaseKey, meshtest.TargetKey

func keyText(k meshtest.KeyPair) []string {
	return []string{base64.StdEncoding.EncodeToString(k.Public)}
}

// chain is roots v1..n, v1 signed for the migration (two root keys and the release key).
func chain(t *testing.T, n uint64) []wire.Root {
	rk := meshtest.RootKeys
	out := []wire.Root{meshtest.SignRoot(t, meshtest.NewRoot(t, 1, time.Now().Add(time.Hour), rel, tgt), rk[0], rk[1], rel)}
	for v := uint64(2); v <= n; v++ {
		out = append(out, meshtest.SignRoot(t, meshtest.NewRoot(t, v, time.Now().Add(time.Hour), rel, tgt), rk[1], rk[2]))
	}
	return out
}

func TestSavedRootsLoadOldestFirstAndBuildTheChain(t *testing.T) {
	root := t.TempDir()
	tr, err := truststore.Trust(root, keyText(rel), keyText(tgt))
	if err != nil || tr.Version() != 0 {
		t.Fatalf("no store: version %d, %v; want the host.json keys", tr.Version(), err)
	}
	roots := chain(t, 3)
	for _, i := range []int{2, 0, 1, 1} { // any order; a second save of the same root is a no-op
		if err := truststore.Save(root, roots[i]); err != nil {
			t.Fatal(err)
		}
	}
	got, err := truststore.Load(root)
	if err != nil || len(got) != 3 || got[0].Version != 1 || got[2].Version != 3 {
		t.Fatalf("Load: %d roots, %v", len(got), err)
	}
	tr, err = truststore.Trust(root, nil, nil)
	if err != nil || tr.Version() != 3 {
		t.Fatalf("Trust: version %d, %v", tr.Version(), err)
	}
	for _, p := range []string{truststore.Dir(root), filepath.Join(truststore.Dir(root), "root.2.json")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		want := truststore.FileMode
		if fi.IsDir() {
			want = truststore.DirMode
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode().Perm(), want)
		}
	}
	// A crash between the temporary file and the rename leaves the chain as it was.
	if err := os.WriteFile(filepath.Join(truststore.Dir(root), ".tmp-123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := truststore.Load(root); err != nil || len(got) != 3 {
		t.Fatalf("a leftover temporary file: %d roots, %v", len(got), err)
	}
	other := meshtest.SignRoot(t, meshtest.NewRoot(t, 2, time.Now().Add(2*time.Hour), rel, tgt), meshtest.RootKeys[0], meshtest.RootKeys[1])
	if err := truststore.Save(root, other); err == nil || !strings.Contains(err.Error(), "never replaced") {
		t.Fatalf("saving another root v2 over the stored one: %v", err)
	}
}

func TestAStoreThatDoesNotReadIsRefusedByName(t *testing.T) {
	roots := chain(t, 2)
	tests := []struct {
		name, file, content, want string
	}{
		{"a corrupt file", "root.2.json", `{"schema":1,`, "root.2.json is refused"},
		{"a version its name does not say", "root.2.json", string(roots[0].Marshal()), "holds root v1, not v2"},
		{"a file that is no root", "notes.txt", "hello", `"notes.txt" is not a root file`},
		{"a link that does not verify", "root.2.json", string(meshtest.SignRoot(t, meshtest.NewRoot(t, 2, time.Now().Add(time.Hour), rel, tgt), meshtest.RootKeys[0]).Marshal()), "root v2 refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := truststore.Save(root, roots[0]); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(truststore.Dir(root), tt.file), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := truststore.Trust(root, keyText(rel), keyText(tgt))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
