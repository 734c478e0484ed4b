package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
)

// tinyBinaries builds testdata/tiny once per architecture for the whole test binary.
var tinyBinaries = struct {
	sync.Mutex
	m map[string]string
	d string
}{m: map[string]string{}}

func tiny(t testing.TB, goarch string) string {
	t.Helper()
	tinyBinaries.Lock()
	defer tinyBinaries.Unlock()
	if p, ok := tinyBinaries.m[goarch]; ok {
		return p
	}
	if tinyBinaries.d == "" {
		d, err := os.MkdirTemp("", "build-test-*")
		if err != nil {
			t.Fatal(err)
		}
		tinyBinaries.d = d
	}
	out := filepath.Join(tinyBinaries.d, "tiny-"+goarch)
	if err := GoBuild(context.Background(), GoBuildOptions{Dir: ".", Package: "./testdata/tiny", GOARCH: goarch, Version: "v1.2.3", Out: out}); err != nil {
		t.Fatal(err)
	}
	tinyBinaries.m[goarch] = out
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if tinyBinaries.d != "" {
		os.RemoveAll(tinyBinaries.d)
	}
	os.Exit(code)
}

func fixedNow() time.Time { return time.Date(2026, 10, 1, 12, 0, 0, 0, time.UTC) }

func TestKeygenWritesAPrivateKeyOnlyItsOwnerReadsAndAPublicKeyHostsTrust(t *testing.T) {
	dir := t.TempDir()
	pub, err := Keygen(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("release.key: %v, %v", fi, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, PubFile))
	k, err := wire.ParseTrustedKey(strings.TrimSpace(string(b)))
	if err != nil || !k.Equal(pub) {
		t.Fatalf("release.pub does not parse as a trusted key: %v", err)
	}
	priv, err := LoadKey(filepath.Join(dir, KeyFile))
	if err != nil || !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatalf("release.key does not load as the same key: %v", err)
	}
}

func TestKeygenRefusesToReplaceAnExistingKey(t *testing.T) {
	dir := t.TempDir()
	if _, err := Keygen(dir); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	if _, err := Keygen(dir); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("got %v, want a refusal", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, KeyFile))
	if !bytes.Equal(before, after) {
		t.Fatal("the key changed")
	}
}

func TestLoadKeyRefusesMalformedKeys(t *testing.T) {
	for name, body := range map[string]string{
		"not base64":  "-----BEGIN PRIVATE KEY-----",
		"wrong size":  "AAAA",
		"public half": PublicKeyString(meshtest.ReleaseKey.Public)[:40],
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "k")
			os.WriteFile(p, []byte(body), 0o600)
			if _, err := LoadKey(p); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestBuildTwiceGivesOneDigest(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	// Two go builds of the same source are the same bytes ...
	var bins [2]string
	for i := range bins {
		bins[i] = filepath.Join(t.TempDir(), "mesh-host")
		if err := GoBuild(context.Background(), GoBuildOptions{Package: "./testdata/tiny", Version: "v1.2.3", Out: bins[i]}); err != nil {
			t.Fatal(err)
		}
	}
	a, _ := os.ReadFile(bins[0])
	b, _ := os.ReadFile(bins[1])
	if !bytes.Equal(a, b) {
		t.Fatal("two go builds of the same source differ")
	}
	// ... and two packs of them, at different times, are one archive digest.
	var ms [2]wire.Manifest
	for i := range ms {
		now := fixedNow().Add(time.Duration(i) * time.Hour)
		r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: bins[i], Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = r.Manifest
	}
	if ms[0].Digest != ms[1].Digest || ms[0].Size != ms[1].Size {
		t.Fatalf("two builds, two digests: %s, %s", ms[0].Digest, ms[1].Digest)
	}
	if ms[0].Created == ms[1].Created {
		t.Fatal("created did not follow the clock")
	}
}

func TestBuildWritesAVerifiableManifestBesideItsArchive(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	out := t.TempDir()
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: out, Binary: tiny(t, "amd64"), Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := wire.ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Verify([]ed25519.PublicKey{pub}); err != nil {
		t.Fatal(err)
	}
	if m.Object != "mesh-host-v1.2.3-linux-amd64.tar.zst" || r.ArchivePath != filepath.Join(out, m.Object) {
		t.Fatalf("object %q at %q", m.Object, r.ArchivePath)
	}
	ab, _ := os.ReadFile(r.ArchivePath)
	if digest.FromBytes(ab) != m.Digest || int64(len(ab)) != m.Size {
		t.Fatal("manifest digest or size does not describe the archive")
	}
	bb, _ := os.ReadFile(tiny(t, "amd64"))
	if digest.FromBytes(bb) != m.BinaryDigest {
		t.Fatal("binary_digest does not describe the binary")
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 2 {
		t.Fatalf("output holds %d entries, want the archive and manifest.json only", len(ents))
	}
}

func TestBuildNamesTheArchitectureTheBinaryIsFor(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: tiny(t, "arm64"), Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	if r.Manifest.Arch != "arm64" || r.Manifest.Object != "mesh-host-v1.2.3-linux-arm64.tar.zst" {
		t.Fatalf("arch %q object %q", r.Manifest.Arch, r.Manifest.Object)
	}
}

func TestBuildWithArchiveSignsItWithoutRepacking(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	// An archive made elsewhere: a different zstd level and a ./ name, as GNU tar writes.
	bin, _ := os.ReadFile(tiny(t, "amd64"))
	made := meshtest.Archive([]meshtest.Entry{{
		Header: tar.Header{Typeflag: tar.TypeReg, Name: "./mesh-host", Mode: 0o755, Size: int64(len(bin)), ModTime: time.Now()},
		Body:   bin,
	}}, nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	src := filepath.Join(t.TempDir(), "pipeline.tar.zst")
	os.WriteFile(src, made, 0o644)

	out := t.TempDir()
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: out, Archive: src, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(r.ArchivePath)
	if !bytes.Equal(got, made) {
		t.Fatal("the archive was changed")
	}
	if r.Manifest.Digest != digest.FromBytes(made) || r.Manifest.BinaryDigest != digest.FromBytes(bin) || r.Manifest.Arch != "amd64" {
		t.Fatalf("manifest %+v", r.Manifest)
	}
	if err := r.Manifest.Verify([]ed25519.PublicKey{pub}); err != nil {
		t.Fatal(err)
	}
}

func TestBuildRefuses(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	script := filepath.Join(t.TempDir(), "mesh-host")
	os.WriteFile(script, []byte("#!/bin/sh\necho v1.2.3\n"), 0o755)
	sym := meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "mesh-host", Linkname: "/bin/sh"}}}, nil)
	symArchive := filepath.Join(t.TempDir(), "evil.tar.zst")
	os.WriteFile(symArchive, sym, 0o644)

	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"TestBuildRefusesAVersionThatIsNotSemver", Options{Version: "1.2", Key: priv, Binary: script}, "semantic version"},
		{"TestBuildRefusesWithoutAKey", Options{Version: "v1.2.3", Binary: script}, "release key"},
		{"TestBuildRefusesBinaryAndArchiveTogether", Options{Version: "v1.2.3", Key: priv, Binary: script, Archive: symArchive}, "not both"},
		{"TestBuildRefusesABinaryThatIsNotELF", Options{Version: "v1.2.3", Key: priv, Binary: script}, "not a Linux (ELF) executable"},
		{"TestBuildRefusesAnArchiveWithASymlink", Options{Version: "v1.2.3", Key: priv, Archive: symArchive}, "symlink"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			c.o.OutDir = out
			_, err := Build(context.Background(), c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Fatalf("a refused build left %d entries in the output directory", len(ents))
			}
		})
	}
	_, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, Archive: symArchive, OutDir: t.TempDir()})
	if !errors.Is(err, archive.ErrUnsafe) {
		t.Fatalf("an unsafe archive's error does not wrap archive.ErrUnsafe: %v", err)
	}
}
