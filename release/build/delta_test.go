package build

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/delta"
	"github.com/novox/mesh-host/wire/meshtest"
)

func TestBuildWithDeltaFromWritesADeltaTheManifestSigns(t *testing.T) {
	ctx := context.Background()
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	first, second := t.TempDir(), t.TempDir()
	if _, err := Build(ctx, Options{Version: "v1.2.3", Key: priv, OutDir: first, Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	base, err := BaseFromDir(ctx, first, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := tinyBuild(t, "./testdata/tiny", "amd64", "v1.2.4")
	r, err := Build(ctx, Options{Version: "v1.2.4", Key: priv, OutDir: second, Binary: next, NoLauncher: true, Now: fixedNow, Deltas: []Base{base}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(second, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.ParseManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Verify([]ed25519.PublicKey{pub}); err != nil {
		t.Fatal(err)
	}
	if m.Schema != wire.ManifestSchemaWithDeltas || len(m.Deltas) != 1 || len(r.DeltaPaths) != 1 {
		t.Fatalf("schema %d, deltas %+v, paths %v", m.Schema, m.Deltas, r.DeltaPaths)
	}
	d := m.Deltas[0]
	if d.BaseVersion != "v1.2.3" || d.BaseDigest != base.BinaryDigest || !strings.Contains(filepath.Base(r.DeltaPaths[0]), "delta") ||
		filepath.Dir(r.DeltaPaths[0]) != second {
		t.Fatalf("delta %+v at %s", d, r.DeltaPaths[0])
	}
	db, err := os.ReadFile(r.DeltaPaths[0])
	if err != nil {
		t.Fatal(err)
	}
	if digest.FromBytes(db) != d.Digest || int64(len(db)) != d.Size {
		t.Fatal("the manifest's delta digest or size does not describe the file")
	}
	var out bytes.Buffer
	res, err := delta.Apply(ctx, &out, base.Binary, bytes.NewReader(db), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if res.Digest != m.BinaryDigest {
		t.Fatalf("the delta rebuilds %s, the manifest signed %s", res.Digest, m.BinaryDigest)
	}
	if ab, _ := os.ReadFile(r.ArchivePath); len(db)*10 > len(ab) {
		t.Errorf("the delta is %d bytes, over 10%% of the %d-byte archive", len(db), len(ab))
	}
}

func TestBuildWithDeltaFromRefuses(t *testing.T) {
	ctx := context.Background()
	priv := meshtest.ReleaseKey.Private
	first := t.TempDir()
	if _, err := Build(ctx, Options{Version: "v1.2.3", Key: priv, OutDir: first, Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	base, err := BaseFromDir(ctx, first, 0)
	if err != nil {
		t.Fatal(err)
	}
	modified := base
	modified.Binary = append([]byte("x"), base.Binary...)
	for _, tc := range []struct {
		name    string
		version string
		key     ed25519.PrivateKey
		base    Base
		want    string
	}{
		{"a base that is not older", "v1.2.3", priv, base, "is not older than the release"},
		{"a base newer than the release", "v1.2.2", priv, base, "is not older than the release"},
		{"a base whose bytes are not its digest's", "v1.2.4", priv, modified, "does not have the digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(ctx, Options{Version: tc.version, Key: tc.key, OutDir: t.TempDir(), Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow, Deltas: []Base{tc.base}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to say %q", err, tc.want)
			}
		})
	}
	t.Run("a directory that is not a build", func(t *testing.T) {
		if _, err := BaseFromDir(ctx, t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "earlier `mesh-release build`") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a build whose archive was altered", func(t *testing.T) {
		dir := t.TempDir()
		r, err := Build(ctx, Options{Version: "v1.2.3", Key: priv, OutDir: dir, Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.ArchivePath, []byte("not the archive"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := BaseFromDir(ctx, dir, 0); err == nil || !strings.Contains(err.Error(), "delta base v1.2.3") {
			t.Fatalf("err = %v", err)
		}
	})
}
