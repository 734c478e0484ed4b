package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
)

// `blob put` stores each file under its digest and prints it with the size; putting it again
// sends nothing and says so; `blob ls` lists what is there, as text and JSON. The object store
// is created by the first put when init never ran.
func TestBlobPutStoresFilesUnderTheirDigestIdempotently(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	names := wire.NamesFor("")
	// As on a bus made before blobs: the first put creates the store.
	if err := c.JS.DeleteObjectStore(ctx, names.Blobs()); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{envNATSURL: url}
	dir := t.TempDir()
	one, two := filepath.Join(dir, "one.conf"), filepath.Join(dir, "two.bin")
	if err := os.WriteFile(one, []byte("listen 80;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(two, make([]byte, 300_000), 0o644); err != nil {
		t.Fatal(err)
	}
	d1, d2 := digest.FromString("listen 80;\n"), digest.FromBytes(make([]byte, 300_000))

	code, out, errOut := runMain(t, env, "blob", "put", one, two)
	want := d1.String() + "  11  " + one + "\n" + d2.String() + "  300000  " + two + "\n"
	if code != 0 || out != want || errOut != "" {
		t.Fatalf("put: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	obs, err := c.JS.ObjectStore(ctx, names.Blobs())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []digest.Digest{d1, d2} {
		info, err := obs.GetInfo(ctx, d.String())
		if want, _ := wire.ObjectStoreDigest(d); err != nil || info.Digest != want {
			t.Errorf("object %s: %+v, %v", d, info, err)
		}
	}
	before, _ := obs.GetInfo(ctx, d1.String())

	code, out, errOut = runMain(t, env, "blob", "put", one)
	if code != 0 || out != d1.String()+"  11  "+one+"  (already there)\n" {
		t.Errorf("put again: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if after, _ := obs.GetInfo(ctx, d1.String()); after.NUID != before.NUID {
		t.Errorf("putting it again replaced the object (%s, then %s)", before.NUID, after.NUID)
	}

	code, out, _ = runMain(t, env, "blob", "ls")
	if code != 0 || !strings.HasPrefix(out, "BLOB") || !strings.Contains(out, d1.String()) || !strings.Contains(out, d2.String()) || !strings.Contains(out, "300000") {
		t.Errorf("ls: exit %d, %q", code, out)
	}
	code, out, _ = runMain(t, env, "blob", "ls", "--json")
	var list []struct {
		Name string `json:"name"`
		Size int64  `json:"size"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 2 {
		t.Errorf("ls --json: exit %d, %v, %q", code, err, out)
	}
}

// An object of a blob's name holding other bytes (put by hand) is replaced by the right ones.
func TestBlobPutReplacesAnObjectThatIsNotWhatItsNameSays(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	names := wire.NamesFor("")
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, []byte("right"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := digest.FromString("right")
	obs, err := c.JS.ObjectStore(ctx, names.Blobs())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, d.String(), []byte("wrong")); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runMain(t, map[string]string{envNATSURL: url}, "blob", "put", f); code != 0 || strings.Contains(out, "already") {
		t.Fatalf("put: exit %d, %q, %q", code, out, errOut)
	}
	got, err := obs.GetBytes(ctx, d.String())
	if err != nil || string(got) != "right" {
		t.Errorf("the object holds %q, %v", got, err)
	}
}

// Bad arguments are usage errors (exit 2) said before the bus is dialled; a missing file or a
// directory is an error naming it (exit 1), and nothing is stored.
func TestBlobRefusesBadArgumentsAndFiles(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"blob"}, 2, "mesh-release blob: want a subcommand: put or ls"},
		{[]string{"blob", "get"}, 2, `mesh-release blob: unknown subcommand "get"; want put or ls`},
		{[]string{"blob", "put"}, 2, "mesh-release blob put: want FILE, one or more"},
		{[]string{"blob", "ls", "x"}, 2, "mesh-release blob ls: unexpected argument"},
	} {
		code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, tc.args...)
		if code != tc.code || out != "" || !strings.HasPrefix(errOut, tc.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	url, c := startServeConnected(t)
	missing := filepath.Join(t.TempDir(), "missing")
	for _, f := range []string{missing, t.TempDir()} {
		code, out, errOut := runMain(t, map[string]string{envNATSURL: url}, "blob", "put", f)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, "mesh-release blob put: ") || !strings.Contains(errOut, f) {
			t.Errorf("put %s: exit %d, stdout %q, stderr %q", f, code, out, errOut)
		}
	}
	obs, err := c.JS.ObjectStore(context.Background(), wire.NamesFor("").Blobs())
	if err != nil {
		t.Fatal(err)
	}
	if l, err := obs.List(context.Background()); !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Errorf("stored %d objects (%v)", len(l), err)
	}
}
