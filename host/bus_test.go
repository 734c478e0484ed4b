package host

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A CA rollover over the link, as decision 0046 runs it, against a real server on TLS: a bundle
// that would cut the node off and an unsigned one are refused and change nothing; the bundle of
// both CAs is applied (the CA file, host.json's nats_urls with every other field kept, the
// heartbeat's bus_seq and bus_cas); then the server presents a certificate of the new CA, the
// bundle of the new CA alone is taken without the link dropping (a new connection verifies it,
// though the session's does not), and the host reconnects to the server after its connection
// is cut.
func TestBusCARolloverOverTheLink(t *testing.T) {
	ca1, ca2 := meshtest.NewCA(t, "ca 1"), meshtest.NewCA(t, "ca 2")
	opt, srvTLS := meshtest.TLS(t, ca1)
	b := meshtest.StartBus(t, opt)
	hbs := b.Heartbeats("n1")
	root := newRoot(t, "v1.0.0")
	caFile, cfgFile := filepath.Join(root, "ca.pem"), filepath.Join(root, "host.json")
	if err := os.WriteFile(caFile, ca1.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	hostJSON := `{"node": "n1", "nats_urls": ["` + b.URL() + `"], "nats_ca": "` + caFile + `", "link_class": "metered", "heartbeat_interval": "1h"}`
	if err := os.WriteFile(cfgFile, []byte(hostJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	th := startHost(t, root, "n1", b.URL(), func(c *config.Config) { c.NATSCA, c.File = caFile, cfgFile })
	fp1, fp2 := wire.CAFingerprint(ca1.Cert), wire.CAFingerprint(ca2.Cert)
	meshtest.WaitHeartbeat(t, hbs, "bus_cas naming the CA of enrolment", func(hb wire.Heartbeat) bool {
		return slices.Equal(hb.BusCAs, []string{fp1}) && hb.BusSeq == 0
	})

	urls := []string{"tls://" + b.Addr(), "tls://localhost:" + strings.Split(b.Addr(), ":")[1]}
	doc := func(cas []*x509.Certificate, sign bool) wire.Bus {
		d, err := wire.NewBus(cas, urls, 0, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if sign {
			if err := d.Sign(meshtest.ReleaseKey.Private); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	for _, tc := range []struct {
		name string
		doc  wire.Bus
		want string
	}{
		{"unsigned", doc([]*x509.Certificate{ca1.Cert, ca2.Cert}, false), "not signed"},
		{"without the CA of the server connected to", doc([]*x509.Certificate{ca2.Cert}, true), "would lose its link at its next reconnect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := b.Put(b.Names.Releases(), wire.BusKey, tc.doc.Marshal())
			meshtest.WaitHeartbeat(t, hbs, "the bus configuration refused", func(hb wire.Heartbeat) bool {
				return hb.Refused != nil && hb.Refused.What == "bus" && hb.Refused.Revision == rev && strings.Contains(hb.Refused.Error, tc.want)
			})
			if got, _ := os.ReadFile(caFile); !bytes.Equal(got, ca1.PEM) {
				t.Errorf("the CA file changed:\n%s", got)
			}
			if got, _ := os.ReadFile(cfgFile); string(got) != hostJSON {
				t.Errorf("host.json changed:\n%s", got)
			}
		})
	}

	both := doc([]*x509.Certificate{ca1.Cert, ca2.Cert}, true)
	b.Put(b.Names.Releases(), wire.BusKey, both.Marshal())
	meshtest.WaitHeartbeat(t, hbs, "bus_seq and bus_cas of the bundle of both CAs", func(hb wire.Heartbeat) bool {
		return hb.BusSeq == both.Seq && slices.Equal(hb.BusCAs, []string{fp1, fp2})
	})
	var written map[string]json.RawMessage
	if b, err := os.ReadFile(cfgFile); err != nil || json.Unmarshal(b, &written) != nil {
		t.Fatalf("host.json: %s, %v", b, err)
	}
	wantURLs, _ := json.Marshal(urls)
	if !jsonEqual(written["nats_urls"], wantURLs) || !jsonEqual(written["link_class"], []byte(`"metered"`)) ||
		!jsonEqual(written["nats_ca"], []byte(`"`+caFile+`"`)) || !jsonEqual(written["heartbeat_interval"], []byte(`"1h"`)) || len(written) != 5 {
		t.Fatalf("host.json after the bundle: %v", written)
	}

	// The servers switch: new handshakes meet a certificate of CA 2; the host's connection made
	// before stays. The bundle of CA 2 alone (the old CA's drop) does not verify that session's
	// certificate, but a new connection to the same server verifies with it: it is taken while
	// the host stays on the session it had.
	srvTLS.Trust(ca2)
	srvTLS.Present(t, ca2)
	only1, only2 := x509.NewCertPool(), x509.NewCertPool()
	only1.AddCert(ca1.Cert)
	only2.AddCert(ca2.Cert)
	drop, err := wire.NewBus([]*x509.Certificate{ca2.Cert}, urls, both.Seq, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := drop.Sign(meshtest.ReleaseKey.Private); err != nil {
		t.Fatal(err)
	}
	b.Put(b.Names.Releases(), wire.BusKey, drop.Marshal())
	meshtest.WaitHeartbeat(t, hbs, "bus_seq and bus_cas of the bundle of CA 2 alone", func(hb wire.Heartbeat) bool {
		return hb.BusSeq == drop.Seq && slices.Equal(hb.BusCAs, []string{fp2})
	})
	if got, _ := os.ReadFile(caFile); !bytes.Equal(got, wire.EncodeCAs([]*x509.Certificate{ca2.Cert})) {
		t.Errorf("the CA file after the drop:\n%s", got)
	}
	// Still the session of CA 1's certificate: no reconnect took the bundle.
	if err := th.h.link.CheckServerCAs(only1); err != nil {
		t.Fatalf("the drop was taken on a new session, not the one made before the switch: %v", err)
	}
	if logs := th.logs.String(); strings.Contains(logs, "linked to the bus again") || strings.Contains(logs, "lost the bus") {
		t.Fatalf("the link dropped while the bundle was taken:\n%s", logs)
	}

	// Cut, it reconnects, verifying the server with the CA file it wrote.
	if n := b.Kick("mesh-host n1"); n != 1 {
		t.Fatalf("cut %d connections of the host, want 1", n)
	}
	meshtest.Eventually(t, "the host reconnected", func() bool { return strings.Contains(th.logs.String(), "linked to the bus again") })
	if err := th.h.link.CheckServerCAs(only2); err != nil {
		t.Fatalf("after the switch the host is not connected to a server of ca 2: %v", err)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && mustJSON(x) == mustJSON(y)
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
