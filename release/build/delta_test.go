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
	bases, err := BaseFromDir(ctx, first, 0)
	if err != nil || len(bases) != 1 {
		t.Fatalf("bases %d, %v; want the one host", len(bases), err)
	}
	base := bases[0]
	next := tinyBuild(t, "./testdata/tiny", "amd64", "v1.2.4")
	r, err := Build(ctx, Options{Version: "v1.2.4", Key: priv, OutDir: second, Binary: next, NoLauncher: true, Now: fixedNow, Deltas: bases})
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
	if err := m.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
		t.Fatal(err)
	}
	pb := only(t, m)
	if len(pb.Deltas) != 1 || len(r.Paths) != 2 {
		t.Fatalf("deltas %+v, paths %v", pb.Deltas, r.Paths)
	}
	d := pb.Deltas[0]
	if d.BaseVersion != "v1.2.3" || d.BaseDigest != base.BinaryDigest || d.Object != "mesh-host-v1.2.4-linux-amd64.delta-from-v1.2.3.zst" ||
		r.Paths[1] != filepath.Join(second, d.Object) {
		t.Fatalf("delta %+v at %s", d, r.Paths[1])
	}
	db, err := os.ReadFile(r.Paths[1])
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
	if res.Digest != pb.BinaryDigest {
		t.Fatalf("the delta rebuilds %s, the manifest signed %s", res.Digest, pb.BinaryDigest)
	}
	if ab, _ := os.ReadFile(r.Paths[0]); len(db)*10 > len(ab) {
		t.Errorf("the delta is %d bytes, over 10%% of the %d-byte archive", len(db), len(ab))
	}
}

// A base build carrying another launcher version gives a launcher delta too, named by the
// launcher's versions; the same launcher gives none.
func TestBuildWithDeltaFromWritesALauncherDeltaWhenTheLauncherChanged(t *testing.T) {
	ctx := context.Background()
	priv := meshtest.ReleaseKey.Private
	first := t.TempDir()
	if _, err := Build(ctx, Options{Version: "v1.2.3", Key: priv, OutDir: first, Binary: tiny(t, "amd64"), Launcher: tinyLauncher(t, "amd64"), Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	bases, err := BaseFromDir(ctx, first, 0)
	if err != nil || len(bases) != 2 || !bases[1].Launcher || bases[1].Version != "v0.3.0" {
		t.Fatalf("bases %+v, %v; want the host and the launcher v0.3.0", bases, err)
	}
	next := tinyBuild(t, "./testdata/tiny", "amd64", "v1.2.4")
	for _, tc := range []struct {
		name     string
		launcher string
		want     string // the launcher delta's object, "" for none
	}{
		{"a new launcher", tinyBuild(t, "./testdata/tinylauncher", "amd64", "v0.4.0"), "mesh-launcher-v0.4.0-linux-amd64.delta-from-v0.3.0.zst"},
		{"the same launcher", tinyLauncher(t, "amd64"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			r, err := Build(ctx, Options{Version: "v1.2.4", Key: priv, OutDir: out, Binary: next, Launcher: tc.launcher, Now: fixedNow, Deltas: bases})
			if err != nil {
				t.Fatal(err)
			}
			l := only(t, r.Manifest).Launcher
			if tc.want == "" {
				if len(l.Deltas) != 0 {
					t.Fatalf("launcher deltas %+v for an unchanged launcher", l.Deltas)
				}
				return
			}
			if len(l.Deltas) != 1 || l.Deltas[0].Object != tc.want || l.Deltas[0].BaseDigest != bases[1].BinaryDigest {
				t.Fatalf("launcher deltas %+v, want one, %s", l.Deltas, tc.want)
			}
			db, _ := os.ReadFile(filepath.Join(out, tc.want))
			var rebuilt bytes.Buffer
			res, err := delta.Apply(ctx, &rebuilt, bases[1].Binary, bytes.NewReader(db), 64<<20)
			if err != nil || res.Digest != l.BinaryDigest {
				t.Fatalf("the launcher delta rebuilds %s, %v; the manifest signed %s", res.Digest, err, l.BinaryDigest)
			}
		})
	}
}

func TestBuildWithDeltaFromRefuses(t *testing.T) {
	ctx := context.Background()
	priv := meshtest.ReleaseKey.Private
	first := t.TempDir()
	if _, err := Build(ctx, Options{Version: "v1.2.3", Key: priv, OutDir: first, Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow}); err != nil {
		t.Fatal(err)
	}
	bases, err := BaseFromDir(ctx, first, 0)
	if err != nil {
		t.Fatal(err)
	}
	base := bases[0]
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
		if err := os.WriteFile(r.Paths[0], []byte("not the archive"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := BaseFromDir(ctx, dir, 0); err == nil || !strings.Contains(err.Error(), "delta base v1.2.3") {
			t.Fatalf("err = %v", err)
		}
	})
}
