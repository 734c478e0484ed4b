package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

func testManifest() Manifest {
	return Manifest{
		Schema:       1,
		Version:      "v1.4.0",
		OS:           "linux",
		Arch:         "amd64",
		Object:       "mesh-host-v1.4.0-linux-amd64.tar.zst",
		Size:         7340032,
		Digest:       digest.FromString("archive"),
		BinaryDigest: digest.FromString("binary"),
		Created:      "2026-10-01T12:00:00Z",
	}
}

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestManifestSigningTextIsTheDocumentedFormat(t *testing.T) {
	m := testManifest()
	want := "mesh-host release 1\n" +
		"version=v1.4.0\n" +
		"os=linux\n" +
		"arch=amd64\n" +
		"object=mesh-host-v1.4.0-linux-amd64.tar.zst\n" +
		"size=7340032\n" +
		"digest=" + string(digest.FromString("archive")) + "\n" +
		"binary_digest=" + string(digest.FromString("binary")) + "\n" +
		"created=2026-10-01T12:00:00Z\n"
	if got := string(m.SigningText()); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
}

func TestManifestSignedVerifiesAndRoundTrips(t *testing.T) {
	pub, priv := newKey(t)
	m := testManifest()
	if err := m.Sign(priv); err != nil {
		t.Fatal(err)
	}
	if m.KeyID != KeyID(pub) || len(m.KeyID) != 16 {
		t.Fatalf("key_id %q, want %q", m.KeyID, KeyID(pub))
	}
	// An independent verifier needs only the documented text and the public key.
	sig, _ := base64.StdEncoding.DecodeString(m.Signature)
	if !ed25519.Verify(pub, m.SigningText(), sig) {
		t.Fatal("signature does not verify over the signing text")
	}
	back, err := ParseManifest(m.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if back != m {
		t.Fatalf("round trip changed the manifest: %+v != %+v", back, m)
	}
	other, _ := newKey(t)
	if err := back.Verify([]ed25519.PublicKey{other, pub}); err != nil {
		t.Fatalf("verify with the signing key among the trusted: %v", err)
	}
}

func TestManifestVerifyRefuses(t *testing.T) {
	pub, priv := newKey(t)
	stranger, strangerPriv := newKey(t)
	_ = stranger
	signed := func() Manifest {
		m := testManifest()
		if err := m.Sign(priv); err != nil {
			t.Fatal(err)
		}
		return m
	}
	alter := map[string]func(*Manifest){
		"version": func(m *Manifest) {
			m.Version, m.Object = "v1.4.1", "mesh-host-v1.4.1-linux-amd64.tar.zst"
		},
		"os":            func(m *Manifest) { m.OS, m.Object = "freebsd", "mesh-host-v1.4.0-freebsd-amd64.tar.zst" },
		"arch":          func(m *Manifest) { m.Arch, m.Object = "arm64", "mesh-host-v1.4.0-linux-arm64.tar.zst" },
		"size":          func(m *Manifest) { m.Size++ },
		"digest":        func(m *Manifest) { m.Digest = digest.FromString("other archive") },
		"binary_digest": func(m *Manifest) { m.BinaryDigest = digest.FromString("other binary") },
		"created":       func(m *Manifest) { m.Created = "2026-10-01T12:00:01Z" },
	}
	type tc struct {
		name string
		m    Manifest
		want error
	}
	cases := []tc{
		{"TestManifestVerifyRefusesUnsigned", testManifest(), ErrUnsigned},
		{"TestManifestVerifyRefusesUnknownKey", func() Manifest {
			m := testManifest()
			_ = m.Sign(strangerPriv)
			return m
		}(), ErrUnknownKey},
		{"TestManifestVerifyRefusesCorruptSignature", func() Manifest {
			m := signed()
			m.Signature = "not base64!"
			return m
		}(), ErrBadSignature},
	}
	for field, f := range alter {
		m := signed()
		f(&m)
		cases = append(cases, tc{"TestManifestVerifyRefusesAltered_" + field, m, ErrBadSignature})
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
	// Every field the signing text holds is covered; object cannot change alone (Validate
	// derives it from version, os and arch), so it is altered with them.
	if n := strings.Count(string(testManifest().SigningText()), "=") - 1; len(alter) != n {
		t.Fatalf("altered %d fields, signing text has %d besides object", len(alter), n)
	}
}

func TestParseManifestRefusesInvalidFields(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Manifest)
		field string
	}{
		{"schema 2", func(m *Manifest) { m.Schema = 2 }, "schema"},
		{"version not semver", func(m *Manifest) { m.Version = "1.4" }, "version"},
		{"version with build metadata", func(m *Manifest) { m.Version = "v1.4.0+abc" }, "version"},
		{"os with a newline", func(m *Manifest) { m.OS = "linux\nsize=1" }, "os"},
		{"object named otherwise", func(m *Manifest) { m.Object = "../../etc/passwd" }, "object"},
		{"size zero", func(m *Manifest) { m.Size = 0 }, "size"},
		{"digest not a digest", func(m *Manifest) { m.Digest = "sha256:xyz" }, "digest"},
		{"binary digest md5", func(m *Manifest) { m.BinaryDigest = "md5:d41d8cd98f00b204e9800998ecf8427e" }, "binary_digest"},
		{"created not RFC 3339", func(m *Manifest) { m.Created = "yesterday" }, "created"},
		{"key_id not hex", func(m *Manifest) { m.KeyID = "zz" }, "key_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testManifest()
			c.edit(&m)
			_, err := ParseManifest(m.Marshal())
			if err == nil || !strings.Contains(err.Error(), "manifest "+c.field+":") {
				t.Fatalf("got %v, want an error naming field %s", err, c.field)
			}
		})
	}
}

func TestParseManifestRefusesUnknownFieldsAndTrailingData(t *testing.T) {
	good := testManifest().Marshal()
	for name, b := range map[string][]byte{
		"unknown field": bytes.Replace(good, []byte(`"schema"`), []byte(`"extra": 1, "schema"`), 1),
		"trailing data": append(append([]byte{}, good...), []byte(`{}`)...),
		"not JSON":      []byte("schema=1"),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseManifest(b); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestParseTrustedKey(t *testing.T) {
	pub, _ := newKey(t)
	k, err := ParseTrustedKey(base64.StdEncoding.EncodeToString(pub))
	if err != nil || !k.Equal(pub) {
		t.Fatalf("got %v, %v", k, err)
	}
	for name, s := range map[string]string{
		"not base64":   "!!!",
		"wrong length": base64.StdEncoding.EncodeToString(pub[:31]),
		"url alphabet": strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(append(pub[:0:0], 0xfb, 0xff))),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseTrustedKey(s); err == nil {
				t.Fatalf("accepted %q", s)
			}
		})
	}
}

func TestObjectStoreDigestIsTheFormNATSReports(t *testing.T) {
	got, err := ObjectStoreDigest(digest.FromString("hello"))
	// sha256("hello") = 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
	if err != nil || got != "SHA-256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=" {
		t.Fatalf("got %q, %v", got, err)
	}
}
