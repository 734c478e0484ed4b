package wire_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func signedBus(t *testing.T, cas []*x509.Certificate, urls []string, keys ...ed25519.PrivateKey) wire.Bus {
	t.Helper()
	d, err := wire.NewBus(cas, urls, 0, signedAt, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if err := d.Sign(k); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestBusRoundTripsAndVerifiesUnderTheTargetsRole(t *testing.T) {
	old, next := meshtest.NewCA(t, "old"), meshtest.NewCA(t, "new")
	urls := []string{"tls://bus-1.example.net:4222", "tls://bus-2.example.net:4222"}
	d := signedBus(t, []*x509.Certificate{old.Cert, next.Cert}, urls, meshtest.ReleaseKey.Private)
	b := d.Marshal()
	if !bytes.Contains(b, []byte(`"key_id":"`)) || bytes.Contains(b, []byte(`"signatures"`)) {
		t.Fatalf("one signature is written as key_id and signature: %s", b)
	}
	got, err := wire.ParseBus(b)
	if err != nil {
		t.Fatal(err)
	}
	want := "mesh-host bus 1\nseq=" + strconv.FormatUint(got.Seq, 10) + "\nexpires=2026-12-29T12:00:00Z\n" +
		"ca=" + wire.CAFingerprint(old.Cert) + "\nca=" + wire.CAFingerprint(next.Cert) + "\n" +
		"url=tls://bus-1.example.net:4222\nurl=tls://bus-2.example.net:4222\n"
	if string(got.SigningText()) != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got.SigningText(), want)
	}
	env := got.Envelope()
	if env.Kind != wire.KindBus || env.Role != wire.RoleTargets || !env.Expires.Equal(got.ExpiresAt()) {
		t.Fatalf("envelope %+v", env)
	}
	trust := wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public})
	if err := trust.Verify(env, signedAt); err != nil {
		t.Fatal(err)
	}
	if fps := wire.CAFingerprints(got.Certificates()); len(fps) != 2 || fps[1] != wire.CAFingerprint(next.Cert) {
		t.Fatalf("certificates %v", fps)
	}
}

func TestBusAlteredAfterSigningIsRefused(t *testing.T) {
	old, next, evil := meshtest.NewCA(t, "old"), meshtest.NewCA(t, "new"), meshtest.NewCA(t, "evil")
	trust := wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public})
	for _, tc := range []struct {
		name  string
		alter func(*wire.Bus)
		want  error
	}{
		{"a URL changed", func(d *wire.Bus) { d.URLs[0] = "tls://evil.example.net:4222" }, wire.ErrSignatureInvalid},
		{"a CA swapped", func(d *wire.Bus) { d.CAs = string(append(old.PEM, evil.PEM...)) }, wire.ErrSignatureInvalid},
		{"the seq raised", func(d *wire.Bus) { d.Seq++ }, wire.ErrSignatureInvalid},
		{"unsigned", func(d *wire.Bus) { d.SignatureList = wire.SignatureList{} }, wire.ErrNotSigned},
		{"signed by a stranger", func(d *wire.Bus) {
			d.SignatureList = wire.SignatureList{}
			if err := d.Sign(meshtest.StrangerKey.Private); err != nil {
				t.Fatal(err)
			}
		}, wire.ErrKeyNotTrusted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := signedBus(t, []*x509.Certificate{old.Cert, next.Cert}, []string{"tls://bus.example.net:4222"}, meshtest.ReleaseKey.Private)
			tc.alter(&d)
			got, err := wire.ParseBus(d.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if err := trust.Verify(got.Envelope(), signedAt); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestBusWithURLsOnlyHasNoCALines(t *testing.T) {
	d := signedBus(t, nil, []string{"tls://bus.example.net:4222"}, meshtest.ReleaseKey.Private)
	got, err := wire.ParseBus(d.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(got.SigningText()), "ca=") || got.CAs != "" || bytes.Contains(d.Marshal(), []byte(`"cas"`)) {
		t.Fatalf("a configuration of URLs alone: %s / %s", got.SigningText(), d.Marshal())
	}
}

func TestParseBusRefusesWhatANodeCannotUse(t *testing.T) {
	ca := meshtest.NewCA(t, "ca")
	leaf := meshtest.NewCA(t, "x")
	notCA := leaf.Leaf(t)
	leafPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: notCA.Certificate[0]}))
	good := signedBus(t, []*x509.Certificate{ca.Cert}, []string{"tls://bus.example.net:4222"}, meshtest.ReleaseKey.Private)
	var nine strings.Builder
	for range wire.MaxBusCAs + 1 {
		nine.Write(meshtest.NewCA(t, "n").PEM)
	}
	for _, tc := range []struct {
		name  string
		alter func(*wire.Bus)
		raw   string
		want  string
	}{
		{name: "neither CAs nor URLs", alter: func(d *wire.Bus) { d.CAs, d.URLs = "", nil }, want: "bus: neither cas nor urls"},
		{name: "an empty bundle", alter: func(d *wire.Bus) { d.CAs = "\n" }, want: "bus: cas: no certificate"},
		{name: "a server certificate", alter: func(d *wire.Bus) { d.CAs = leafPEM }, want: "not a CA certificate"},
		{name: "a private key", alter: func(d *wire.Bus) { d.CAs = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n" }, want: "a PRIVATE KEY block"},
		{name: "text beside the certificates", alter: func(d *wire.Bus) { d.CAs = string(ca.PEM) + "junk" }, want: "certificate 2: not a PEM block"},
		{name: "too many CAs", alter: func(d *wire.Bus) { d.CAs = nine.String() }, want: "more than 8 certificates"},
		{name: "a CA twice", alter: func(d *wire.Bus) { d.CAs = string(append(ca.PEM, ca.PEM...)) }, want: "certificate 2 is certificate 1 again"},
		{name: "an empty URL list", raw: `{"seq":1,"urls":[],"expires":"2026-12-29T12:00:00Z","key_id":"","signature":""}`, want: "bus: urls: 0 URLs"},
		{name: "a URL with a password", alter: func(d *wire.Bus) { d.URLs = []string{"tls://u:pw@bus:4222"} }, want: "carries a user or password"},
		{name: "an http URL", alter: func(d *wire.Bus) { d.URLs = []string{"http://bus:4222"} }, want: `scheme "http" is not nats, tls, ws or wss`},
		{name: "a URL twice", alter: func(d *wire.Bus) { d.URLs = []string{"tls://a:1", "tls://a:1"} }, want: "URL 2 is URL 1 again"},
		{name: "seq 0", alter: func(d *wire.Bus) { d.Seq = 0 }, want: "bus: seq is 0"},
		{name: "no expiry", alter: func(d *wire.Bus) { d.Expires = "" }, want: "bus: expires"},
		{name: "an unknown field", raw: `{"seq":1,"cas":"","urls":[],"expires":"","key_id":"","signature":"","extra":1}`, want: "extra"},
		{name: "too big", raw: `{"cas":"` + strings.Repeat("A", 70<<10) + `"}`, want: "more than the 65536 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.raw)
			if tc.alter != nil {
				d := good
				d.URLs = append([]string(nil), good.URLs...)
				tc.alter(&d)
				b = d.Marshal()
			}
			_, err := wire.ParseBus(b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
