package wire_test

import (
	"bytes"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// goldenNow is the clock testdata/signed was written at, by the code before roots (decision
// 0045): each file is a document signed by meshtest.ReleaseKey as hosts older than roots read it.
var goldenNow = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// signedDocs are the documents of testdata/signed as this code signs them, with the KV key
// each is stored under and its parse-and-verify.
func signedDocs(t *testing.T) []struct {
	file, key string
	now       []byte
	verify    func(b []byte, trust wire.Trust) error
} {
	t.Helper()
	k := meshtest.ReleaseKey.Private
	m := wire.Manifest{Schema: wire.ManifestSchema, Version: "v1.4.0", OS: "linux", Arch: "amd64",
		Object: wire.ObjectName("v1.4.0", "linux", "amd64"), Size: 7340032,
		Digest: digest.FromString("the archive"), BinaryDigest: digest.FromString("the binary"), Created: "2026-10-01T12:00:00Z"}
	must(t, m.Sign(k))
	tg, err := wire.NewTarget("node.web-01", "v1.4.0", 0, goldenNow, 96*time.Hour, k)
	must(t, err)
	urgent := tg
	urgent.Urgent = true
	must(t, urgent.Sign("fleet", k))
	spec, err := wire.ParseWindowSpec("mon-fri 02:00-04:00 Europe/Brussels")
	must(t, err)
	w, err := wire.NewWindow("window.node.web-01", []string{"web-01", "web-02"}, spec, 0, goldenNow, 365*24*time.Hour, k)
	must(t, err)
	l, err := wire.Withdrawals{}.Withdraw("v1.2.0", `crashes on arm64 "under load"`, goldenNow, k)
	must(t, err)
	target := func(key string) func([]byte, wire.Trust) error {
		return func(b []byte, trust wire.Trust) error {
			x, err := wire.ParseTarget(b)
			if err != nil {
				return err
			}
			return x.Verify(key, trust, goldenNow)
		}
	}
	return []struct {
		file, key string
		now       []byte
		verify    func(b []byte, trust wire.Trust) error
	}{
		{"manifest.json", "v1.4.0", m.Marshal(), func(b []byte, trust wire.Trust) error {
			x, err := wire.ParseManifest(b)
			if err != nil {
				return err
			}
			return x.Verify(trust)
		}},
		{"target.json", "node.web-01", tg.Marshal(), target("node.web-01")},
		{"target-urgent.json", "fleet", urgent.Marshal(), target("fleet")},
		{"window.json", "window.node.web-01", w.Marshal(), func(b []byte, trust wire.Trust) error {
			x, err := wire.ParseWindow(b)
			if err != nil {
				return err
			}
			return x.Verify("window.node.web-01", trust, goldenNow)
		}},
		{"withdrawals.json", wire.WithdrawalsKey, l.Marshal(), func(b []byte, trust wire.Trust) error {
			x, err := wire.ParseWithdrawals(b)
			if err != nil {
				return err
			}
			return x.Verify(trust, goldenNow)
		}},
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A document signed by one key is byte for byte what the code before roots wrote (hosts of
// before read it strictly), and what it wrote verifies here.
func TestOneSignatureIsByteIdenticalToADocumentFromBeforeRoots(t *testing.T) {
	pub := []ed25519.PublicKey{meshtest.ReleaseKey.Public}
	trust := wire.LegacyTrust(pub, pub)
	for _, d := range signedDocs(t) {
		t.Run(d.file, func(t *testing.T) {
			old, err := os.ReadFile(filepath.Join("testdata", "signed", d.file))
			must(t, err)
			if !bytes.Equal(d.now, old) {
				t.Fatalf("signed today:\n%s\nsigned before roots:\n%s", d.now, old)
			}
			if err := d.verify(old, trust); err != nil {
				t.Fatalf("a document from before roots: %v", err)
			}
		})
	}
}
