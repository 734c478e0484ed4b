package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

// tinyBinaries builds testdata/tiny once per architecture for the whole test binary.
var tinyBinaries = struct {
	sync.Mutex
	m map[string]string
	d string
}{m: map[string]string{}}

func tiny(t testing.TB, goarch string) string {
	return tinyBuild(t, "./testdata/tiny", goarch, "v1.2.3")
}

// tinyLauncher is testdata/tinylauncher, which prints its own version, v0.3.0.
func tinyLauncher(t testing.TB, goarch string) string {
	return tinyBuild(t, "./testdata/tinylauncher", goarch, "")
}

func tinyBuild(t testing.TB, pkg, goarch, version string) string {
	t.Helper()
	tinyBinaries.Lock()
	defer tinyBinaries.Unlock()
	key := filepath.Base(pkg) + "-" + goarch + "-" + version
	if p, ok := tinyBinaries.m[key]; ok {
		return p
	}
	if tinyBinaries.d == "" {
		d, err := os.MkdirTemp("", "build-test-*")
		if err != nil {
			t.Fatal(err)
		}
		tinyBinaries.d = d
	}
	out := filepath.Join(tinyBinaries.d, key)
	if err := GoBuild(context.Background(), GoBuildOptions{Dir: ".", Package: pkg, GOARCH: goarch, Version: version, Out: out}); err != nil {
		t.Fatal(err)
	}
	tinyBinaries.m[key] = out
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
		r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: bins[i], NoLauncher: true, Now: func() time.Time { return now }})
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
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: out, Binary: tiny(t, "amd64"), Launcher: tinyLauncher(t, "amd64"), Now: fixedNow})
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
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: tiny(t, "arm64"), NoLauncher: true, Now: fixedNow})
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
	launcherScript := filepath.Join(t.TempDir(), "mesh-launcher")
	os.WriteFile(launcherScript, []byte("#!/bin/sh\necho v0.3.0\n"), 0o755)
	sym := meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "mesh-host", Linkname: "/bin/sh"}}}, nil)
	symArchive := filepath.Join(t.TempDir(), "evil.tar.zst")
	os.WriteFile(symArchive, sym, 0o644)

	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"TestBuildRefusesAVersionThatIsNotSemver", Options{Version: "1.2", Key: priv, Binary: script}, "semantic version"},
		{"TestBuildRefusesLauncherAndNoLauncherTogether", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: launcherScript, NoLauncher: true}, "not both"},
		{"TestBuildRefusesALauncherAddedToAnArchive", Options{Version: "v1.2.3", Key: priv, Archive: symArchive, Launcher: tinyLauncher(t, "amd64")}, "signed as it is"},
		{"TestBuildRefusesALauncherThatIsNotELF", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: launcherScript}, "not a Linux (ELF) executable"},
		{"TestBuildRefusesALauncherForAnotherArchitecture", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: tinyLauncher(t, "arm64")}, "built for arm64 but the host binary for amd64"},
		{"TestBuildRefusesALauncherThatDoesNotTellAVersion", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: tinyBuild(t, "./testdata/tinylauncher", "amd64", "latest")}, "does not tell its version"},
		{"TestBuildRefusesAMissingLauncher", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: "/nonexistent/mesh-launcher"}, "no such file"},
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

// extractRelease reads a built archive back with the host's strict extractor, writing both
// binaries, and returns them.
func extractRelease(t *testing.T, path string, want archive.LauncherWant) archive.Release {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel, err := archive.ExtractRelease(context.Background(), f, t.TempDir(), want, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func TestBuildPacksTheLauncherAndTheManifestNamesIt(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	launcher := tinyLauncher(t, "amd64")
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: tiny(t, "amd64"), Launcher: launcher, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := os.ReadFile(launcher)
	m := r.Manifest
	want := wire.ReleaseLauncher{Version: "v0.3.0", Digest: digest.FromBytes(lb), Size: int64(len(lb))}
	if m.Schema != wire.ManifestSchemaWithLauncher || m.Launcher != want {
		t.Fatalf("manifest schema %d launcher %+v, want schema 2 and %+v", m.Schema, m.Launcher, want)
	}
	raw, _ := os.ReadFile(r.ManifestPath)
	back, err := wire.ParseManifest(raw)
	if err != nil || back.Verify([]ed25519.PublicKey{pub}) != nil || back.Launcher != want {
		t.Fatalf("manifest.json does not carry the signed launcher: %v", err)
	}
	rel := extractRelease(t, r.ArchivePath, archive.LauncherWant{Dir: t.TempDir(), Size: want.Size, Digest: want.Digest})
	if rel.LauncherErr != nil || rel.Launcher == nil || rel.Launcher.Path == "" {
		t.Fatalf("the archive's launcher: %+v, %v", rel.Launcher, rel.LauncherErr)
	}
	if got, _ := os.ReadFile(rel.Launcher.Path); !bytes.Equal(got, lb) {
		t.Fatal("the archive's mesh-launcher is not the launcher given")
	}
	if rel.Host.Digest != m.BinaryDigest {
		t.Fatal("the archive's mesh-host is not the binary the manifest names")
	}
}

func TestBuildWithNoLauncherWritesSchema1AsBefore(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(r.ManifestPath)
	if r.Manifest.Schema != wire.ManifestSchema || r.Manifest.HasLauncher() || bytes.Contains(raw, []byte("launcher")) {
		t.Fatalf("a --no-launcher release is not schema 1 without a launcher:\n%s", raw)
	}
	if !strings.HasPrefix(string(r.Manifest.SigningText()), "mesh-host release 1\n") {
		t.Fatal("a --no-launcher release is not signed as schema 1")
	}
	if rel := extractRelease(t, r.ArchivePath, archive.LauncherWant{}); rel.Launcher != nil {
		t.Fatal("a --no-launcher archive carries a launcher")
	}
}

func TestBuildBuildsTheLauncherFromTheTreeWithItsOwnVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the real mesh-launcher")
	}
	priv := meshtest.ReleaseKey.Private
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: tiny(t, runtime.GOARCH), SourceDir: "../..", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	l := r.Manifest.Launcher
	if r.Manifest.Schema != 2 || !wire.ValidVersion(l.Version) || l.Version == "v1.2.3" {
		t.Fatalf("launcher %+v: want the tree's launcher under its own version, not the host's", l)
	}
	rel := extractRelease(t, r.ArchivePath, archive.LauncherWant{Dir: t.TempDir(), Size: l.Size, Digest: l.Digest})
	if rel.LauncherErr != nil {
		t.Fatal(rel.LauncherErr)
	}
	v, err := LauncherVersion(context.Background(), rel.Launcher.Path)
	if err != nil || v != l.Version {
		t.Fatalf("the packed launcher says %q (%v), the manifest %q", v, err, l.Version)
	}
	if ents, _ := os.ReadDir(filepath.Dir(r.ArchivePath)); len(ents) != 2 {
		t.Fatalf("the build left %d entries in the output directory, want the archive and manifest.json", len(ents))
	}
}

func TestBuildWithArchiveCarryingALauncherNamesIt(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	bin, _ := os.ReadFile(tiny(t, "amd64"))
	lb, _ := os.ReadFile(tinyLauncher(t, "amd64"))
	made := meshtest.Archive([]meshtest.Entry{meshtest.File("./mesh-host", bin), meshtest.File("./mesh-launcher", lb)}, nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	src := filepath.Join(t.TempDir(), "pipeline.tar.zst")
	os.WriteFile(src, made, 0o644)
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Archive: src, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	want := wire.ReleaseLauncher{Version: "v0.3.0", Digest: digest.FromBytes(lb), Size: int64(len(lb))}
	if r.Manifest.Launcher != want || r.Manifest.Digest != digest.FromBytes(made) {
		t.Fatalf("manifest %+v", r.Manifest)
	}
	_, err = Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Archive: src, NoLauncher: true, Now: fixedNow})
	if err == nil || !strings.Contains(err.Error(), "--no-launcher") {
		t.Fatalf("--no-launcher with an archive carrying a launcher: %v, want a refusal", err)
	}
}

func TestLauncherVersionAsksVersionThenDashDashVersion(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, body, want, says string
	}{
		{"a launcher that knows the version word", `[ "$1" = version ] && echo v0.4.0 && exit 0; exit 2`, "v0.4.0", ""},
		{"a launcher that knows only --version", `[ "$1" = --version ] && echo v0.2.0 && exit 0; echo "unknown command $1" >&2; exit 2`, "v0.2.0", ""},
		{"a launcher printing no version", `echo hello`, "", "not a canonical semantic version"},
		{"a launcher failing both ways", `exit 1`, "", "exit status 1"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := LauncherVersion(context.Background(), script(fmt.Sprintf("l%d", i), c.body+"\n"))
			if c.says == "" {
				if err != nil || v != c.want {
					t.Fatalf("got %q, %v; want %q", v, err, c.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %q, %v; want an error saying %q", v, err, c.says)
			}
		})
	}
}
