package wire

import (
	"bytes"
	"fmt"
	"reflect"
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

// testManifestWithLauncher is testManifest as schema 2, carrying a launcher.
func testManifestWithLauncher() Manifest {
	m := testManifest()
	m.Schema = ManifestSchemaWithLauncher
	m.Launcher = ReleaseLauncher{Version: "v0.3.0", Digest: digest.FromString("launcher"), Size: 9437184}
	return m
}

func TestManifestSchema2SigningTextAddsTheLauncherLines(t *testing.T) {
	m := testManifestWithLauncher()
	want := "mesh-host release 2\n" +
		"version=v1.4.0\n" +
		"os=linux\n" +
		"arch=amd64\n" +
		"object=mesh-host-v1.4.0-linux-amd64.tar.zst\n" +
		"size=7340032\n" +
		"digest=" + string(digest.FromString("archive")) + "\n" +
		"binary_digest=" + string(digest.FromString("binary")) + "\n" +
		"created=2026-10-01T12:00:00Z\n" +
		"launcher_version=v0.3.0\n" +
		"launcher_digest=" + string(digest.FromString("launcher")) + "\n" +
		"launcher_size=9437184\n"
	if got := string(m.SigningText()); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
}

func TestManifestRoundTripsInBothSchemas(t *testing.T) {
	for _, m := range []Manifest{testManifest(), testManifestWithLauncher()} {
		t.Run(fmt.Sprintf("schema %d", m.Schema), func(t *testing.T) {
			raw := m.Marshal()
			// Schema 1 is written as hosts before schema 2 read it: no launcher key at all.
			if has := bytes.Contains(raw, []byte(`"launcher"`)); has != (m.Schema == 2) {
				t.Fatalf("launcher key present %v in schema %d:\n%s", has, m.Schema, raw)
			}
			back, err := ParseManifest(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, m) {
				t.Fatalf("round trip changed the manifest: %+v != %+v", back, m)
			}
		})
	}
}

func TestParseManifestRefusesAnInvalidLauncher(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Manifest)
		field string
	}{
		{"launcher version not semver", func(m *Manifest) { m.Launcher.Version = "0.3" }, "launcher.version"},
		{"launcher version with build metadata", func(m *Manifest) { m.Launcher.Version = "v0.3.0+abc" }, "launcher.version"},
		{"launcher digest not a digest", func(m *Manifest) { m.Launcher.Digest = "sha256:xyz" }, "launcher.digest"},
		{"launcher digest md5", func(m *Manifest) { m.Launcher.Digest = "md5:d41d8cd98f00b204e9800998ecf8427e" }, "launcher.digest"},
		{"launcher size zero", func(m *Manifest) { m.Launcher.Size = 0 }, "launcher.size"},
		{"launcher size negative", func(m *Manifest) { m.Launcher.Size = -1 }, "launcher.size"},
		{"launcher size over the cap", func(m *Manifest) { m.Launcher.Size = MaxLauncherSize + 1 }, "launcher.size"},
		{"schema 2 without a launcher", func(m *Manifest) { m.Launcher = ReleaseLauncher{} }, "launcher.version"},
		{"schema 1 with a launcher", func(m *Manifest) { m.Schema = 1 }, "launcher"},
		{"schema 3 listing no delta", func(m *Manifest) { m.Schema = 3 }, "deltas"},
		{"schema 5", func(m *Manifest) { m.Schema = 5 }, "schema"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := testManifestWithLauncher()
			c.edit(&m)
			_, err := ParseManifest(m.Marshal())
			if err == nil || !strings.Contains(err.Error(), "manifest "+c.field+":") {
				t.Fatalf("got %v, want an error naming field %s", err, c.field)
			}
		})
	}
}

func TestParseManifestRefusesAnUnknownKeyInTheLauncherObject(t *testing.T) {
	good := testManifestWithLauncher().Marshal()
	b := bytes.Replace(good, []byte(`"launcher": {`), []byte(`"launcher": {"path": "/usr/bin/mesh-launcher", `), 1)
	if bytes.Equal(b, good) {
		t.Fatal("the test did not add a key")
	}
	if _, err := ParseManifest(b); err == nil || !strings.Contains(err.Error(), "path") {
		t.Fatalf("got %v, want a refusal naming the unknown key", err)
	}
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

func TestParseManifestRefusesInvalidFields(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(*Manifest)
		field string
	}{
		{"schema 2 without its launcher", func(m *Manifest) { m.Schema = 2 }, "launcher.version"},
		{"schema 0", func(m *Manifest) { m.Schema = 0 }, "schema"},
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

func TestObjectStoreDigestIsTheFormNATSReports(t *testing.T) {
	got, err := ObjectStoreDigest(digest.FromString("hello"))
	// sha256("hello") = 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824
	if err != nil || got != "SHA-256=LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=" {
		t.Fatalf("got %q, %v", got, err)
	}
}
