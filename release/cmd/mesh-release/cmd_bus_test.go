package main

import (
	"context"
	"crypto/x509"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/busconf"
	"github.com/novox/mesh-host/release/enrol"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// A rollover of serve's CA with the bus commands (decision 0046), a node's heartbeat standing in
// for the node (lab/ runs real ones): add publishes both CAs; switch is refused until the node
// reports the new one, then serve presents a certificate of it and tokens pin it; drop publishes
// it alone; urls keeps the CAs.
func TestBusCARolloverCommands(t *testing.T) {
	b := startTrustedBus(t)
	key := keyFile(t)
	names := wire.NamesFor("")
	common := []string{"--data", b.data, "--nats", b.url}
	heartbeat := func(cas ...*x509.Certificate) {
		t.Helper()
		hb := wire.Heartbeat{Schema: wire.HeartbeatSchema, Node: "n1", State: wire.StateRunning, SentAt: time.Now().UTC(), BusCAs: wire.CAFingerprints(cas)}
		if _, err := b.admin.JS.Publish(context.Background(), names.Heartbeat("n1"), hb.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	cmd := func(wantCode int, args ...string) string {
		t.Helper()
		code, out, errOut := runMain(t, nil, append(args, common...)...)
		if code != wantCode {
			t.Fatalf("%q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out, errOut)
		}
		return out + errOut
	}
	doc := func() wire.Bus {
		t.Helper()
		kv, err := b.admin.JS.KeyValue(context.Background(), names.Releases())
		if err != nil {
			t.Fatal(err)
		}
		d, _, ok, err := busconf.Current(context.Background(), kv)
		if err != nil || !ok {
			t.Fatalf("bus configuration: %v, %v", ok, err)
		}
		return d
	}
	old, err := trust.ReadCAs(b.data)
	if err != nil {
		t.Fatal(err)
	}
	heartbeat(old.Current)

	out := cmd(0, "bus", "ca", "add", "--key", key)
	cas, err := trust.ReadCAs(b.data)
	if err != nil || cas.Next == nil {
		t.Fatalf("after add: %+v, %v", cas, err)
	}
	oldFP, newFP := wire.CAFingerprint(old.Current), wire.CAFingerprint(cas.Next)
	for _, want := range []string{"new CA " + newFP + " added in", "nodes trust " + oldFP + ", " + newFP} {
		if !strings.Contains(out, want) {
			t.Fatalf("add says:\n%s\nwant %q", out, want)
		}
	}
	if got := wire.CAFingerprints(doc().Certificates()); !slices.Equal(got, []string{oldFP, newFP}) {
		t.Fatalf("the bus configuration after add holds %v", got)
	}

	if out := cmd(1, "bus", "ca", "switch"); !strings.Contains(out, "switch refused: 1 of 1 nodes heard do not hold the new CA "+newFP+" in their bus_cas: n1") {
		t.Fatalf("switch before the node holds the new CA:\n%s", out)
	}
	if out := cmd(0, "bus", "ca", "status"); !strings.Contains(out, "0 of 1 nodes hold CA "+newFP+"; not yet: n1") {
		t.Fatalf("status:\n%s", out)
	}
	heartbeat(old.Current, cas.Next)
	if out := cmd(0, "bus", "ca", "status"); !strings.Contains(out, "every node heard (1) holds CA "+newFP) {
		t.Fatalf("status:\n%s", out)
	}
	if out := cmd(0, "bus", "ca", "switch"); !strings.Contains(out, "the servers' CA is now "+newFP) {
		t.Fatalf("switch:\n%s", out)
	}
	caFile := filepath.Join(b.data, trust.TLSDir, trust.CAFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := bus.Connect(ctx, b.url, b.store.AdminCreds(), bus.WithCA(caFile))
	if err != nil {
		t.Fatalf("a client of the new CA alone, after the switch: %v", err)
	}
	c.Close()
	if _, pin, err := enrol.ReadCA(caFile); err != nil || "sha256:"+pin != newFP {
		t.Fatalf("a token made now pins %s (%v), want %s", pin, err, newFP)
	}

	out = cmd(0, "bus", "ca", "drop", "--key", key)
	if !strings.Contains(out, "nodes trust "+newFP+"\n") || !strings.Contains(out, "CA "+oldFP+" dropped") {
		t.Fatalf("drop says:\n%s", out)
	}
	out = cmd(0, "bus", "urls", "tls://bus-1.example.net:4222,tls://bus-2.example.net:4222", "--key", key)
	d := doc()
	if !strings.Contains(out, "nodes dial tls://bus-1.example.net:4222,tls://bus-2.example.net:4222") ||
		!slices.Equal(wire.CAFingerprints(d.Certificates()), []string{newFP}) || len(d.URLs) != 2 {
		t.Fatalf("urls says:\n%s\nthe bus configuration: %+v", out, d)
	}
	if out := cmd(2, "bus", "urls", "http://x", "--key", key); !strings.Contains(out, `scheme "http" is not nats, tls, ws or wss`) {
		t.Fatalf("a bad URL:\n%s", out)
	}
}
