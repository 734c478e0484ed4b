package wire_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/wire"
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
	if back != m {
		t.Fatalf("round trip changed the manifest: %+v != %+v", back, m)
	}
	other := meshtest.SecondKey.Public
	if err := back.Verify([]ed25519.PublicKey{other, pub}); err != nil {
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
			err := c.m.Verify([]ed25519.PublicKey{pub})
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
	if err := back.Verify([]ed25519.PublicKey{pub}); err != nil {
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
			if err := m.Verify([]ed25519.PublicKey{pub}); !errors.Is(err, wire.ErrBadSignature) {
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
