package wire

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

func mustPlatform(t *testing.T, s string) Platform {
	t.Helper()
	p, err := ParsePlatform(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testPlatformsManifest is a schema 4 manifest of v1.5.0 for amd64 (with a launcher and a
// delta), arm/v6 and arm64 (launcher without deltas).
func testPlatformsManifest() Manifest {
	build := func(p Platform, launcher bool, deltas bool) PlatformBuild {
		b := PlatformBuild{Platform: p.String(), Object: PlatformObjectName("v1.5.0", p), Size: 3 << 20,
			Digest: digest.FromString(p.String() + " archive"), BinaryDigest: digest.FromString(p.String() + " binary")}
		if deltas {
			b.Deltas = []ReleaseDelta{{BaseVersion: "v1.4.0", BaseDigest: digest.FromString("v1.4.0 " + p.String()),
				Object: PlatformDeltaObjectName("v1.5.0", "v1.4.0", p), Size: 4096, Digest: digest.FromString("delta " + p.String())}}
		}
		if launcher {
			b.Launcher = LauncherObject{Version: "v1.2.0", Object: LauncherObjectName("v1.2.0", p), Size: 3 << 20,
				Digest: digest.FromString(p.String() + " launcher object"), BinaryDigest: digest.FromString(p.String() + " launcher"), BinarySize: 8 << 20}
			if deltas {
				b.Launcher.Deltas = []ReleaseDelta{{BaseVersion: "v1.1.0", BaseDigest: digest.FromString("launcher v1.1.0"),
					Object: LauncherDeltaObjectName("v1.2.0", "v1.1.0", p), Size: 2048, Digest: digest.FromString("launcher delta")}}
			}
		}
		return b
	}
	return Manifest{Schema: ManifestSchemaPlatforms, Version: "v1.5.0", Created: "2026-12-01T12:00:00Z", Platforms: []PlatformBuild{
		build(Platform{"linux", "amd64", ""}, true, true),
		build(Platform{"linux", "arm", "v6"}, false, false),
		build(Platform{"linux", "arm64", ""}, true, false),
	}}
}

func TestParsePlatform(t *testing.T) {
	for _, c := range []struct {
		in, want, slug, err string
	}{
		{in: "linux/amd64", want: "linux/amd64", slug: "linux-amd64"},
		{in: "linux/arm/v7", want: "linux/arm/v7", slug: "linux-arm-v7"},
		{in: "linux/arm", err: "names no arm variant"},
		{in: "linux/arm64/v8", err: "only arm builds have"},
		{in: "linux", err: "is not os/arch"},
		{in: "linux/amd64/v1/x", err: "is not os/arch"},
		{in: "Linux/amd64", err: "the os"},
		{in: "linux/x86-64", err: "the architecture"},
		{in: "linux/arm/seven", err: "the variant"},
		{in: strings.Repeat("a", 100), err: "longer than"},
	} {
		t.Run(c.in, func(t *testing.T) {
			p, err := ParsePlatform(c.in)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error saying %q", err, c.err)
				}
				return
			}
			if err != nil || p.String() != c.want || p.Slug() != c.slug {
				t.Fatalf("got %v %q %q, want %q %q", err, p, p.Slug(), c.want, c.slug)
			}
		})
	}
}

func TestParsePlatformsRefusesATwiceNamedPlatformAndAnEmptyList(t *testing.T) {
	if ps, err := ParsePlatforms(DefaultPlatforms); err != nil || len(ps) != 2 {
		t.Fatalf("the default: %v %v", ps, err)
	}
	for in, says := range map[string]string{"linux/amd64,linux/amd64": "named twice", " , ": "no platform named", "linux/amd64,linux/arm": "no arm variant"} {
		if _, err := ParsePlatforms(in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: got %v, want %q", in, err, says)
		}
	}
}

func TestNodePlatformTakesArmsVariantFromTheKernel(t *testing.T) {
	for _, c := range []struct{ goarch, machine, want string }{
		{"amd64", "x86_64", "linux/amd64"},
		{"arm64", "aarch64", "linux/arm64"},
		{"arm", "armv7l", "linux/arm/v7"},
		{"arm", "armv6l", "linux/arm/v6"},
		{"arm", "aarch64", "linux/arm/v7"},
		{"arm", "", "linux/arm/v7"},
	} {
		if got := NodePlatform("linux", c.goarch, c.machine).String(); got != c.want {
			t.Errorf("%s on %s: %s, want %s", c.goarch, c.machine, got, c.want)
		}
	}
}

func TestProfilePlatformReadsAnOldHostsProfile(t *testing.T) {
	for _, c := range []struct {
		pr   Profile
		want string
	}{
		{Profile{OS: "linux", Arch: "arm", Platform: "linux/arm/v6"}, "linux/arm/v6"},
		{Profile{OS: "linux", Arch: "arm64"}, "linux/arm64"},
		{Profile{OS: "linux", Arch: "arm"}, "linux/arm/v7"},
		{Profile{OS: "linux", Arch: "amd64", Platform: "bogus"}, "linux/amd64"},
		{Profile{}, "/"},
	} {
		if got := ProfilePlatform(c.pr).String(); got != c.want {
			t.Errorf("%+v: %s, want %s", c.pr, got, c.want)
		}
	}
}

func TestPlatformsManifestSignsEveryPlatformsEntry(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	m := testPlatformsManifest()
	if err := m.Sign(priv); err != nil {
		t.Fatal(err)
	}
	back, err := ParseManifest(m.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip changed the manifest:\n%+v\n%+v", back, m)
	}
	if err := back.Verify(LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
		t.Fatal(err)
	}
	txt := string(m.SigningText())
	if !strings.HasPrefix(txt, SigningHeaderPlatforms+"version=v1.5.0\ncreated=") || strings.Count(txt, "\nplatform=") != 3 ||
		strings.Count(txt, "\nlauncher_version=") != 2 || strings.Count(txt, "\nlauncher_delta_") != 5 || strings.Count(txt, "\ndelta_") != 5 {
		t.Fatalf("signing text:\n%s", txt)
	}
	for name, alter := range map[string]func(m *Manifest){
		"arm64 binary digest":     func(m *Manifest) { m.Platforms[2].BinaryDigest = digest.FromString("x") },
		"arm/v6 size":             func(m *Manifest) { m.Platforms[1].Size++ },
		"amd64 launcher digest":   func(m *Manifest) { m.Platforms[0].Launcher.BinaryDigest = digest.FromString("x") },
		"amd64 launcher delta":    func(m *Manifest) { m.Platforms[0].Launcher.Deltas[0].Size++ },
		"amd64 host delta base":   func(m *Manifest) { m.Platforms[0].Deltas[0].BaseDigest = digest.FromString("x") },
		"a platform dropped":      func(m *Manifest) { m.Platforms = m.Platforms[:2] },
		"arm64 launcher dropped":  func(m *Manifest) { m.Platforms[2].Launcher = LauncherObject{} },
		"arm64 launcher bin size": func(m *Manifest) { m.Platforms[2].Launcher.BinarySize++ },
		"created":                 func(m *Manifest) { m.Created = "2026-12-01T12:00:01Z" },
	} {
		t.Run(name, func(t *testing.T) {
			a := testPlatformsManifest()
			a.KeyID, a.Signature = m.KeyID, m.Signature
			alter(&a)
			if err := a.Verify(LegacyTrust([]ed25519.PublicKey{pub}, nil)); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("got %v, want %v", err, ErrBadSignature)
			}
		})
	}
}

func TestPlatformsManifestRefusesABadEntryByName(t *testing.T) {
	for _, c := range []struct {
		name  string
		alter func(m *Manifest)
		says  string
	}{
		{"unsorted", func(m *Manifest) { m.Platforms[0], m.Platforms[1] = m.Platforms[1], m.Platforms[0] }, "platforms[1].platform"},
		{"twice", func(m *Manifest) { m.Platforms[1] = m.Platforms[0] }, "platforms[1].platform"},
		{"none", func(m *Manifest) { m.Platforms = nil }, "lists 0"},
		{"bad platform", func(m *Manifest) { m.Platforms[1].Platform = "linux/arm" }, "platforms[1].platform"},
		{"object of another platform", func(m *Manifest) { m.Platforms[2].Object = m.Platforms[0].Object }, "platforms[2].object"},
		{"launcher object of another version", func(m *Manifest) { m.Platforms[0].Launcher.Object = "mesh-launcher-v1.1.0-linux-amd64.zst" }, "platforms[0].launcher.object"},
		{"launcher too large", func(m *Manifest) { m.Platforms[2].Launcher.BinarySize = MaxLauncherSize + 1 }, "platforms[2].launcher.binary_size"},
		{"launcher delta of its own version", func(m *Manifest) { m.Platforms[0].Launcher.Deltas[0].BaseVersion = "v1.2.0" }, "platforms[0].launcher.deltas[0].base_version"},
		{"host delta object", func(m *Manifest) { m.Platforms[0].Deltas[0].Object = "x.zst" }, "platforms[0].deltas[0].object"},
		{"single-platform field", func(m *Manifest) { m.Arch = "amd64" }, "platforms only"},
		{"platforms in schema 3", func(m *Manifest) { m.Schema = ManifestSchemaWithDeltas }, "platforms"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := testPlatformsManifest()
			c.alter(&m)
			_, err := ParseManifest(m.Marshal())
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("got %v, want an error naming %q", err, c.says)
			}
		})
	}
}

func TestManifestForTakesTheNodesPlatformOrSaysWhatTheReleaseHas(t *testing.T) {
	m := testPlatformsManifest()
	for _, c := range []struct{ node, want, err string }{
		{node: "linux/amd64", want: "linux/amd64"},
		{node: "linux/arm64", want: "linux/arm64"},
		{node: "linux/arm/v7", want: "linux/arm/v6"}, // the highest variant not above the node's
		{node: "linux/arm/v5", err: "v1.5.0 has no build for linux/arm/v5 (it has linux/amd64, linux/arm/v6, linux/arm64)"},
		{node: "linux/riscv64", err: "v1.5.0 has no build for linux/riscv64"},
	} {
		b, err := m.For(mustPlatform(t, c.node))
		if c.err != "" {
			if !errors.Is(err, ErrNoPlatformBuild) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: got %v, want %q", c.node, err, c.err)
			}
			continue
		}
		if err != nil || b.Platform.String() != c.want || b.Object != PlatformObjectName("v1.5.0", b.Platform) || b.LauncherInArchive {
			t.Errorf("%s: got %+v %v, want the %s build", c.node, b, err, c.want)
		}
	}
	// A schema 2 manifest is one platform, its launcher in the archive.
	old := testManifestWithLauncher()
	b, err := old.For(Platform{OS: "linux", Arch: "amd64"})
	if err != nil || !b.LauncherInArchive || b.Launcher.BinaryDigest != old.Launcher.Digest || b.Object != old.Object {
		t.Fatalf("schema 2: %+v %v", b, err)
	}
	if _, err := old.For(Platform{OS: "linux", Arch: "arm64"}); err == nil || !strings.Contains(err.Error(), "v1.4.0 has no build for linux/arm64 (it has linux/amd64)") {
		t.Fatalf("schema 2 on arm64: %v", err)
	}
}

func TestLegacyManifestNamesTheSameArchiveForTodaysHosts(t *testing.T) {
	m := testPlatformsManifest()
	l, err := m.Legacy(Platform{OS: "linux", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Schema != ManifestSchemaWithDeltas || l.Object != ObjectName("v1.5.0", "linux", "amd64") || l.Object != m.Platforms[0].Object ||
		l.HasLauncher() || len(l.Deltas) != 1 || l.Deltas[0].Object != DeltaObjectName("v1.5.0", "v1.4.0", "linux", "amd64") {
		t.Fatalf("legacy manifest: %+v", l)
	}
	if l, err := m.Legacy(Platform{OS: "linux", Arch: "arm64"}); err != nil || l.Schema != ManifestSchema {
		t.Fatalf("arm64 without deltas: %+v %v", l, err)
	}
	if _, err := m.Legacy(Platform{OS: "linux", Arch: "arm", Variant: "v6"}); err == nil || !strings.Contains(err.Error(), "variant") {
		t.Fatalf("a variant: %v", err)
	}
	if _, err := m.Legacy(Platform{OS: "linux", Arch: "s390x"}); !errors.Is(err, ErrNoPlatformBuild) {
		t.Fatalf("a platform it lacks: %v", err)
	}
}
