package files

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// fakeBlobs serves real bytes from a map, as the host's verified cache would; a blob stored
// under a digest it does not match stands for a source that lies.
type fakeBlobs struct {
	m     map[string][]byte
	opens int
}

func (f *fakeBlobs) Open(ctx context.Context, d string) (io.ReadCloser, error) {
	f.opens++
	b, ok := f.m[d]
	if !ok {
		return nil, fmt.Errorf("blob %s: not found", d)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fakeBlobs) put(b []byte) string {
	d := digest.FromBytes(b).String()
	f.m[d] = b
	return d
}

func newBlobs() *fakeBlobs { return &fakeBlobs{m: map[string][]byte{}} }

// env is a temp machine: a host root (protected) and a place to manage things in.
type env struct {
	root, dir string
	g         apply.Guard
}

func newEnv(t *testing.T) env {
	t.Helper()
	tmp := t.TempDir()
	e := env{root: filepath.Join(tmp, "root"), dir: filepath.Join(tmp, "srv")}
	for _, d := range []string{e.root, e.dir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.g = apply.Guard{Root: e.root}
	return e
}

func res(t *testing.T, typ, id string, spec any) wire.Resource {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return wire.Resource{Type: typ, ID: id, Spec: b, Parsed: spec}
}

func owned(r wire.Resource, created bool) apply.Owned {
	return apply.Owned{Type: r.Type, ID: r.ID, Spec: r.Spec, Parsed: r.Parsed, Created: created}
}

func inspect(t *testing.T, a apply.Applier, r wire.Resource) []string {
	t.Helper()
	d, err := a.Inspect(context.Background(), r)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return d
}

func mustApply(t *testing.T, a apply.Applier, r wire.Resource) bool {
	t.Helper()
	created, err := a.Apply(context.Background(), r)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if d := inspect(t, a, r); len(d) != 0 {
		t.Fatalf("read-back after Apply still differs: %q", d)
	}
	return created
}

func wantDiffs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("differences %q, want ones saying %q", got, want)
	}
	for i := range want {
		if !strings.Contains(got[i], want[i]) {
			t.Fatalf("difference %q does not say %q (all: %q)", got[i], want[i], got)
		}
	}
}

func statT(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func str(s string) *string { return &s }

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		meshtest.SkipUnlessCI(t, "changing a file's owner needs root; this test runs as a normal user (CI runs as root)")
	}
}

// entries lists a directory's names, to prove nothing was left behind.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
