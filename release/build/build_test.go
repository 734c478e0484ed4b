package build

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"debug/buildinfo"
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
	if ms[0].Platforms[0].Digest != ms[1].Platforms[0].Digest || ms[0].Platforms[0].Size != ms[1].Platforms[0].Size {
		t.Fatalf("two builds, two digests: %s, %s", ms[0].Platforms[0].Digest, ms[1].Platforms[0].Digest)
	}
	if ms[0].Created == ms[1].Created {
		t.Fatal("created did not follow the clock")
	}
}

// only is the one platform build of m, failing the test if it has another number of them.
func only(t *testing.T, m wire.Manifest) wire.PlatformBuild {
	t.Helper()
	if m.Schema != wire.ManifestSchemaPlatforms || len(m.Platforms) != 1 {
		t.Fatalf("manifest schema %d with %d platforms, want schema 4 with one", m.Schema, len(m.Platforms))
	}
	return m.Platforms[0]
}

func TestBuildWritesAVerifiableManifestBesideItsObjects(t *testing.T) {
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
	if err := m.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
		t.Fatal(err)
	}
	pb := only(t, m)
	if pb.Platform != "linux/amd64" || pb.Object != "mesh-host-v1.2.3-linux-amd64.tar.zst" || r.Paths[0] != filepath.Join(out, pb.Object) {
		t.Fatalf("platform %q object %q at %q", pb.Platform, pb.Object, r.Paths[0])
	}
	ab, _ := os.ReadFile(r.Paths[0])
	if digest.FromBytes(ab) != pb.Digest || int64(len(ab)) != pb.Size {
		t.Fatal("manifest digest or size does not describe the archive")
	}
	bb, _ := os.ReadFile(tiny(t, "amd64"))
	if digest.FromBytes(bb) != pb.BinaryDigest {
		t.Fatal("binary_digest does not describe the binary")
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != 3 || len(r.Paths) != 2 {
		t.Fatalf("output holds %d entries (paths %v), want the archive, the launcher object and manifest.json only", len(ents), r.Paths)
	}
}

func TestBuildNamesThePlatformTheBinaryIsFor(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	for _, tc := range []struct {
		arch      string
		platforms []wire.Platform
		want      string
	}{
		{"arm64", nil, "linux/arm64"},
		{"arm", nil, "linux/arm/v7"},
		{"arm", []wire.Platform{{OS: "linux", Arch: "arm", Variant: "v6"}}, "linux/arm/v6"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: t.TempDir(), Binary: tiny(t, tc.arch), Platforms: tc.platforms, NoLauncher: true, Now: fixedNow})
			if err != nil {
				t.Fatal(err)
			}
			p, _ := wire.ParsePlatform(tc.want)
			if pb := only(t, r.Manifest); pb.Platform != tc.want || pb.Object != wire.PlatformObjectName("v1.2.3", p) {
				t.Fatalf("platform %q object %q", pb.Platform, pb.Object)
			}
		})
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
	got, _ := os.ReadFile(r.Paths[0])
	if !bytes.Equal(got, made) {
		t.Fatal("the archive was changed")
	}
	pb := only(t, r.Manifest)
	if pb.Digest != digest.FromBytes(made) || pb.BinaryDigest != digest.FromBytes(bin) || pb.Platform != "linux/amd64" || !pb.Launcher.IsZero() {
		t.Fatalf("manifest %+v", r.Manifest)
	}
	if err := r.Manifest.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
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
	bin, _ := os.ReadFile(tiny(t, "amd64"))
	lb, _ := os.ReadFile(tinyLauncher(t, "amd64"))
	withLauncher := filepath.Join(t.TempDir(), "with-launcher.tar.zst")
	os.WriteFile(withLauncher, meshtest.Archive([]meshtest.Entry{meshtest.File("./mesh-host", bin), meshtest.File("./mesh-launcher", lb)}, nil), 0o644)
	amd64, arm64 := wire.Platform{OS: "linux", Arch: "amd64"}, wire.Platform{OS: "linux", Arch: "arm64"}

	cases := []struct {
		name string
		o    Options
		want string
	}{
		{"TestBuildRefusesAVersionThatIsNotSemver", Options{Version: "1.2", Key: priv, Binary: script}, "semantic version"},
		{"TestBuildRefusesLauncherAndNoLauncherTogether", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: launcherScript, NoLauncher: true}, "not both"},
		{"TestBuildRefusesAnArchiveCarryingALauncher", Options{Version: "v1.2.3", Key: priv, Archive: withLauncher}, "holds mesh-host alone and the launcher is its own object"},
		{"TestBuildRefusesALauncherThatIsNotELF", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: launcherScript}, "not a Linux (ELF) executable"},
		{"TestBuildRefusesALauncherForAnotherArchitecture", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Launcher: tinyLauncher(t, "arm64")}, "built for arm64 but the release is for linux/amd64"},
		{"TestBuildRefusesABinaryForAnotherPlatformThanAsked", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Platforms: []wire.Platform{arm64}, NoLauncher: true}, "built for amd64, and the platform asked is linux/arm64"},
		{"TestBuildRefusesOneBinaryForTwoPlatforms", Options{Version: "v1.2.3", Key: priv, Binary: tiny(t, "amd64"), Platforms: []wire.Platform{amd64, arm64}}, "one platform's files, and 2 platforms are asked (linux/amd64,linux/arm64)"},
		{"TestBuildRefusesAPlatformNamedTwice", Options{Version: "v1.2.3", Key: priv, Platforms: []wire.Platform{amd64, amd64}}, "platform linux/amd64 is named twice"},
		{"TestBuildRefusesAnotherOperatingSystem", Options{Version: "v1.2.3", Key: priv, Platforms: []wire.Platform{{OS: "darwin", Arch: "arm64"}}}, "platform darwin/arm64: hosts are released for linux only"},
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

// extractHost reads a built archive back with the host's strict extractor and returns what it
// held: mesh-host alone.
func extractHost(t *testing.T, path string) archive.Binary {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel, err := archive.ExtractRelease(context.Background(), f, t.TempDir(), archive.LauncherWant{}, archive.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Launcher != nil {
		t.Fatalf("%s carries a launcher; a schema 4 archive holds mesh-host alone", path)
	}
	return rel.Host
}

// launcherOf reads a launcher object in dir back into the binary, checked against l.
func launcherOf(t *testing.T, dir string, l wire.LauncherObject) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, l.Object))
	if err != nil {
		t.Fatal(err)
	}
	if digest.FromBytes(raw) != l.Digest || int64(len(raw)) != l.Size {
		t.Fatalf("%s does not have the digest and size its manifest signed", l.Object)
	}
	bin, err := DecompressLauncher(context.Background(), bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if digest.FromBytes(bin) != l.BinaryDigest || int64(len(bin)) != l.BinarySize {
		t.Fatalf("%s decompresses to another binary than its manifest signed", l.Object)
	}
	return bin
}

func TestBuildWritesTheLauncherAsAnObjectOfItsOwn(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	launcher := tinyLauncher(t, "amd64")
	out := t.TempDir()
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: out, Binary: tiny(t, "amd64"), Launcher: launcher, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := os.ReadFile(launcher)
	pb := only(t, r.Manifest)
	l := pb.Launcher
	if l.Version != "v0.3.0" || l.Object != "mesh-launcher-v0.3.0-linux-amd64.zst" || l.BinaryDigest != digest.FromBytes(lb) || l.BinarySize != int64(len(lb)) {
		t.Fatalf("launcher %+v", l)
	}
	if got := launcherOf(t, out, l); !bytes.Equal(got, lb) {
		t.Fatal("the launcher object is not the launcher given")
	}
	raw, _ := os.ReadFile(r.ManifestPath)
	back, err := wire.ParseManifest(raw)
	if err != nil || back.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)) != nil || back.Platforms[0].Launcher.Digest != l.Digest {
		t.Fatalf("manifest.json does not carry the signed launcher: %v", err)
	}
	if extractHost(t, r.Paths[0]).Digest != pb.BinaryDigest {
		t.Fatal("the archive's mesh-host is not the binary the manifest names")
	}
}

func TestBuildWithNoLauncherNamesNone(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	out := t.TempDir()
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: out, Binary: tiny(t, "amd64"), NoLauncher: true, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(r.ManifestPath)
	if !only(t, r.Manifest).Launcher.IsZero() || bytes.Contains(raw, []byte("launcher")) {
		t.Fatalf("a --no-launcher release names a launcher:\n%s", raw)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 2 {
		t.Fatalf("the output holds %d entries, want the archive and manifest.json", len(ents))
	}
	extractHost(t, r.Paths[0])
}

// One build from the tree makes every platform asked: each host built for its architecture
// (arm for its variant) and stamped with the version (the next release's host differs), each archive holding it alone, each launcher an object
// named by the launcher's own version — the same bytes in the next release, the launcher being
// unchanged.
func TestBuildBuildsEveryPlatformFromTheTree(t *testing.T) {
	priv := meshtest.ReleaseKey.Private
	platforms, err := wire.ParsePlatforms("linux/arm/v7,linux/amd64,linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	build := func(version string) (string, wire.Manifest) {
		out := t.TempDir()
		r, err := Build(context.Background(), Options{Version: version, Key: priv, OutDir: out, Platforms: platforms, Now: fixedNow,
			HostPackage: "./testdata/tiny", LauncherPackage: "./testdata/tinylauncher"})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Manifest.Verify(wire.LegacyTrust([]ed25519.PublicKey{meshtest.ReleaseKey.Public}, nil)); err != nil {
			t.Fatal(err)
		}
		return out, r.Manifest
	}
	dir, m := build("v1.2.3")
	var got []string
	for _, pb := range m.Platforms {
		got = append(got, pb.Platform)
	}
	if strings.Join(got, " ") != "linux/amd64 linux/arm/v7 linux/arm64" {
		t.Fatalf("the manifest lists %q, want every platform once, sorted", got)
	}
	for _, p := range platforms {
		b, err := m.For(p)
		if err != nil || b.Platform != p {
			t.Fatalf("%s: %+v, %v", p, b, err)
		}
		host := extractHost(t, filepath.Join(dir, b.Object))
		info, err := buildinfo.ReadFile(host.Path)
		if err != nil {
			t.Fatal(err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if settings["GOARCH"] != p.Arch || settings["GOARM"] != strings.TrimPrefix(p.Variant, "v") || settings["CGO_ENABLED"] != "0" {
			t.Errorf("%s: the host was built with %v", p, settings)
		}
		if b.Launcher.Version != "v0.3.0" || b.Launcher.Object != wire.LauncherObjectName("v0.3.0", p) {
			t.Errorf("%s: launcher %+v", p, b.Launcher)
		}
		lbin := launcherOf(t, dir, b.Launcher)
		if arch, _ := archOfBytes(t, lbin); arch != p.Arch {
			t.Errorf("%s: the launcher is built for %s", p, arch)
		}
	}
	// The next release: another host, the same launcher object, byte for byte.
	next, m2 := build("v1.2.4")
	for i, pb := range m2.Platforms {
		was := m.Platforms[i]
		if pb.BinaryDigest == was.BinaryDigest {
			t.Errorf("%s: the host did not change with the version", pb.Platform)
		}
		a, _ := os.ReadFile(filepath.Join(dir, was.Launcher.Object))
		b, _ := os.ReadFile(filepath.Join(next, pb.Launcher.Object))
		if pb.Launcher.Object != was.Launcher.Object || pb.Launcher.Digest != was.Launcher.Digest || !bytes.Equal(a, b) {
			t.Errorf("%s: the unchanged launcher is another object: %+v, was %+v", pb.Platform, pb.Launcher, was.Launcher)
		}
	}
}

// archOfBytes is archive.ArchOf of a binary held in memory.
func archOfBytes(t *testing.T, b []byte) (string, error) {
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return archive.ArchOf(p)
}

func TestBuildBuildsTheLauncherFromTheTreeWithItsOwnVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the real mesh-launcher")
	}
	priv := meshtest.ReleaseKey.Private
	out := t.TempDir()
	r, err := Build(context.Background(), Options{Version: "v1.2.3", Key: priv, OutDir: out, Binary: tiny(t, runtime.GOARCH), SourceDir: "../..", Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	l := only(t, r.Manifest).Launcher
	if !wire.ValidVersion(l.Version) || l.Version == "v1.2.3" {
		t.Fatalf("launcher %+v: want the tree's launcher under its own version, not the host's", l)
	}
	p := filepath.Join(t.TempDir(), "mesh-launcher")
	if err := os.WriteFile(p, launcherOf(t, out, l), 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := LauncherVersion(context.Background(), p)
	if err != nil || v != l.Version {
		t.Fatalf("the launcher object's binary says %q (%v), the manifest %q", v, err, l.Version)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 3 {
		t.Fatalf("the build left %d entries in the output directory, want the archive, the launcher object and manifest.json", len(ents))
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
