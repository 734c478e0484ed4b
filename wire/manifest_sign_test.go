package wire_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func TestManifestSignedVerifiesAndRoundTrips(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	m := wire.SampleManifest()
	if err := m.Sign(priv); err != nil {
		t.Fatal(err)
	}
	if m.KeyID != wire.KeyID(pub) || len(m.KeyID) != 16 {
		t.Fatalf("key_id %q, want %q", m.KeyID, wire.KeyID(pub))
	}
	// An independent verifier needs only the documented text and the public key.
	sig, _ := base64.StdEncoding.DecodeString(m.Signature)
	if !ed25519.Verify(pub, m.SigningText(), sig) {
		t.Fatal("signature does not verify over the signing text")
	}
	back, err := wire.ParseManifest(m.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, m) {
		t.Fatalf("round trip changed the manifest: %+v != %+v", back, m)
	}
	other := meshtest.SecondKey.Public
	if err := back.Verify(wire.LegacyTrust([]ed25519.PublicKey{other, pub}, nil)); err != nil {
		t.Fatalf("verify with the signing key among the trusted: %v", err)
	}
}

func TestManifestVerifyRefuses(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	signed := func() wire.Manifest {
		m := wire.SampleManifest()
		if err := m.Sign(priv); err != nil {
			t.Fatal(err)
		}
		return m
	}
	alter := map[string]func(*wire.Manifest){
		"version": func(m *wire.Manifest) {
			m.Version, m.Object = "v1.4.1", "mesh-host-v1.4.1-linux-amd64.tar.zst"
		},
		"os":            func(m *wire.Manifest) { m.OS, m.Object = "freebsd", "mesh-host-v1.4.0-freebsd-amd64.tar.zst" },
		"arch":          func(m *wire.Manifest) { m.Arch, m.Object = "arm64", "mesh-host-v1.4.0-linux-arm64.tar.zst" },
		"size":          func(m *wire.Manifest) { m.Size++ },
		"digest":        func(m *wire.Manifest) { m.Digest = digest.FromString("other archive") },
		"binary_digest": func(m *wire.Manifest) { m.BinaryDigest = digest.FromString("other binary") },
		"created":       func(m *wire.Manifest) { m.Created = "2026-10-01T12:00:01Z" },
		"schema":        func(m *wire.Manifest) { m.Schema = wire.ManifestSchemaWithLauncher; m.Launcher = sampleLauncher },
	}
	type tc struct {
		name string
		m    wire.Manifest
		want error
	}
	cases := []tc{
		{"TestManifestVerifyRefusesUnsigned", wire.SampleManifest(), wire.ErrUnsigned},
		{"TestManifestVerifyRefusesUnknownKey", func() wire.Manifest {
			m := wire.SampleManifest()
			_ = m.Sign(meshtest.StrangerKey.Private)
			return m
		}(), wire.ErrUnknownKey},
		{"TestManifestVerifyRefusesCorruptSignature", func() wire.Manifest {
			m := signed()
			m.Signature = "not base64!"
			return m
		}(), wire.ErrBadSignature},
	}
	for field, f := range alter {
		m := signed()
		f(&m)
		cases = append(cases, tc{"TestManifestVerifyRefusesAltered_" + field, m, wire.ErrBadSignature})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.m.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.m.Version) {
				t.Fatalf("error %q does not name the version", err)
			}
		})
	}
	// Every field the signing text holds is covered (and the schema, through the header);
	// object cannot change alone (Validate derives it from version, os and arch), so it is
	// altered with them.
	if n := strings.Count(string(wire.SampleManifest().SigningText()), "=") - 1; len(alter)-1 != n {
		t.Fatalf("altered %d fields, signing text has %d besides object", len(alter)-1, n)
	}
}

var sampleLauncher = wire.ReleaseLauncher{Version: "v0.3.0", Digest: digest.FromString("launcher"), Size: 9437184}

func TestManifestWithLauncherVerifiesAndEachLauncherFieldIsSigned(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	signed := func() wire.Manifest {
		m := wire.SampleManifest()
		m.Schema, m.Launcher = wire.ManifestSchemaWithLauncher, sampleLauncher
		if err := m.Sign(priv); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := signed()
	if !strings.HasPrefix(string(m.SigningText()), wire.SigningHeaderWithLauncher) {
		t.Fatalf("signing text starts %q", m.SigningText()[:20])
	}
	back, err := wire.ParseManifest(m.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
		t.Fatalf("a signed schema 2 manifest does not verify: %v", err)
	}
	for field, f := range map[string]func(*wire.Manifest){
		"launcher.version": func(m *wire.Manifest) { m.Launcher.Version = "v0.3.1" },
		"launcher.digest":  func(m *wire.Manifest) { m.Launcher.Digest = digest.FromString("other launcher") },
		"launcher.size":    func(m *wire.Manifest) { m.Launcher.Size++ },
		// Dropping the launcher (and claiming schema 1) does not keep the signature either.
		"launcher dropped": func(m *wire.Manifest) { m.Schema, m.Launcher = wire.ManifestSchema, wire.ReleaseLauncher{} },
	} {
		t.Run("TestManifestVerifyRefusesAltered_"+field, func(t *testing.T) {
			m := signed()
			f(&m)
			if err := m.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); !errors.Is(err, wire.ErrBadSignature) {
				t.Fatalf("got %v, want %v", err, wire.ErrBadSignature)
			}
		})
	}
}

func TestParseTrustedKey(t *testing.T) {
	pub := meshtest.ReleaseKey.Public
	k, err := wire.ParseTrustedKey(base64.StdEncoding.EncodeToString(pub))
	if err != nil || !k.Equal(pub) {
		t.Fatalf("got %v, %v", k, err)
	}
	for name, s := range map[string]string{
		"not base64":   "!!!",
		"wrong length": base64.StdEncoding.EncodeToString(pub[:31]),
		"url alphabet": strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(append(pub[:0:0], 0xfb, 0xff))),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := wire.ParseTrustedKey(s); err == nil {
				t.Fatalf("accepted %q", s)
			}
		})
	}
}

var sampleDeltas = []wire.ReleaseDelta{
	{BaseVersion: "v1.3.2", BaseDigest: digest.FromString("v1.3.2 binary"), Object: "mesh-host-v1.4.0-linux-amd64.delta-from-v1.3.2.zst", Size: 374784, Digest: digest.FromString("delta from v1.3.2")},
	{BaseVersion: "v1.3.1", BaseDigest: digest.FromString("v1.3.1 binary"), Object: "mesh-host-v1.4.0-linux-amd64.delta-from-v1.3.1.zst", Size: 401408, Digest: digest.FromString("delta from v1.3.1")},
}

func withDeltas(launcher bool) wire.Manifest {
	m := wire.SampleManifest()
	m.Schema = wire.ManifestSchemaWithDeltas
	m.Deltas = append([]wire.ReleaseDelta(nil), sampleDeltas...)
	if launcher {
		m.Launcher = sampleLauncher
	}
	return m
}

func TestManifestWithDeltasVerifiesAndEachDeltaFieldIsSigned(t *testing.T) {
	pub, priv := meshtest.ReleaseKey.Public, meshtest.ReleaseKey.Private
	for _, launcher := range []bool{false, true} {
		signed := func() wire.Manifest {
			m := withDeltas(launcher)
			if err := m.Sign(priv); err != nil {
				t.Fatal(err)
			}
			return m
		}
		m := signed()
		txt := string(m.SigningText())
		if !strings.HasPrefix(txt, wire.SigningHeaderWithDeltas) || strings.Contains(txt, "launcher_version=") != launcher ||
			strings.Count(txt, "delta_") != 5*len(sampleDeltas) {
			t.Fatalf("signing text (launcher %v):\n%s", launcher, txt)
		}
		back, err := wire.ParseManifest(m.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, m) {
			t.Fatalf("round trip changed the manifest: %+v != %+v", back, m)
		}
		if err := back.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); err != nil {
			t.Fatalf("a signed schema 3 manifest does not verify: %v", err)
		}
		for field, f := range map[string]func(*wire.Manifest){
			"deltas[1].base_version": func(m *wire.Manifest) {
				m.Deltas[1].BaseVersion, m.Deltas[1].Object = "v1.3.0", "mesh-host-v1.4.0-linux-amd64.delta-from-v1.3.0.zst"
			},
			"deltas[0].base_digest": func(m *wire.Manifest) { m.Deltas[0].BaseDigest = digest.FromString("modified base") },
			"deltas[0].size":        func(m *wire.Manifest) { m.Deltas[0].Size++ },
			"deltas[1].digest":      func(m *wire.Manifest) { m.Deltas[1].Digest = digest.FromString("other delta") },
			"a delta dropped":       func(m *wire.Manifest) { m.Deltas = m.Deltas[:1] },
			"deltas reordered":      func(m *wire.Manifest) { m.Deltas[0], m.Deltas[1] = m.Deltas[1], m.Deltas[0] },
		} {
			t.Run(fmt.Sprintf("TestManifestVerifyRefusesAltered_%s_launcher_%v", field, launcher), func(t *testing.T) {
				m := signed()
				m.Deltas = append([]wire.ReleaseDelta(nil), m.Deltas...)
				f(&m)
				if err := m.Verify(wire.LegacyTrust([]ed25519.PublicKey{pub}, nil)); !errors.Is(err, wire.ErrBadSignature) {
					t.Fatalf("got %v, want %v", err, wire.ErrBadSignature)
				}
			})
		}
	}
}

func TestManifestDeltasRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alter func(*wire.Manifest)
		want  string
	}{
		{"deltas in a schema 2 manifest", func(m *wire.Manifest) { m.Schema = wire.ManifestSchemaWithLauncher }, "manifest deltas: are listed in a schema 2 manifest"},
		{"deltas in a schema 1 manifest", func(m *wire.Manifest) { m.Schema, m.Launcher = wire.ManifestSchema, wire.ReleaseLauncher{} }, "manifest deltas: are listed in a schema 1 manifest"},
		{"schema 3 without deltas", func(m *wire.Manifest) { m.Deltas = nil }, "manifest deltas: lists 0"},
		{"more than MaxDeltas", func(m *wire.Manifest) {
			for len(m.Deltas) <= wire.MaxDeltas {
				m.Deltas = append(m.Deltas, m.Deltas[0])
			}
		}, "manifest deltas: lists 9"},
		{"a base listed twice", func(m *wire.Manifest) { m.Deltas[1] = m.Deltas[0] }, "deltas[1].base_version: v1.3.2 is listed twice"},
		{"the release's own version as base", func(m *wire.Manifest) {
			m.Deltas[0].BaseVersion, m.Deltas[0].Object = "v1.4.0", "mesh-host-v1.4.0-linux-amd64.delta-from-v1.4.0.zst"
		}, "deltas[0].base_version: is the release's own version"},
		{"an object name for another base", func(m *wire.Manifest) { m.Deltas[0].Object = sampleDeltas[1].Object }, "deltas[0].object"},
		{"an object name with a path", func(m *wire.Manifest) { m.Deltas[0].Object = "../x" }, "deltas[0].object"},
		{"a size of 0", func(m *wire.Manifest) { m.Deltas[1].Size = 0 }, "deltas[1].size: is 0"},
		{"a size over MaxDeltaSize", func(m *wire.Manifest) { m.Deltas[1].Size = wire.MaxDeltaSize + 1 }, "deltas[1].size"},
		{"a base digest that is not sha256", func(m *wire.Manifest) { m.Deltas[0].BaseDigest = "md5:abc" }, "deltas[0].base_digest"},
		{"a delta digest missing", func(m *wire.Manifest) { m.Deltas[0].Digest = "" }, "deltas[0].digest"},
		{"an invalid base version", func(m *wire.Manifest) { m.Deltas[0].BaseVersion = "1.3" }, "deltas[0].base_version"},
		{"a corrupt launcher in schema 3", func(m *wire.Manifest) { m.Launcher = wire.ReleaseLauncher{Version: "v0.3.0"} }, "manifest launcher.digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := withDeltas(true)
			tc.alter(&m)
			_, err := wire.ParseManifest(m.Marshal())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
