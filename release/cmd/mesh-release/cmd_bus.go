package main

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/busconf"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

const busArgs = "ca (add|status|switch|drop) | urls URL[,URL…]"

const busAbout = `The bus configuration is what every node learns over its link (decision 0046): the CAs it
trusts for the bus's TLS and the bus's URLs, signed by --key (a target key) and kept in the
releases bucket under key bus. A node applies it without a restart (its CA file, host.json's
nats_urls) and reports it in its heartbeat (bus_seq, bus_cas).

subcommands:
  ca add      make a new CA beside the one serve uses (--data), and tell every node to trust both
  ca status   show which nodes hold the new CA (their bus_cas)
  ca switch   once every node holds it: serve's certificate is issued by the new CA
  ca drop     once the servers use it: tell every node to trust the new CA alone
  urls URL…   tell every node the bus's URLs (dialled from each host's next start)

A rollover, nodes connected throughout: ca add; ca status until every node holds the new CA;
ca switch; ca drop. Run ` + "`mesh-release bus <subcommand> --help`" + ` for its flags.`

var busCommands = []command{
	{"bus ca", "(add|status|switch|drop) [flags]", "roll the bus's CA over with every node connected", busAbout, busCACmd},
	{"bus urls", "URL[,URL…]", "tell every node the bus's URLs, kept in its host.json", busURLsAbout, busURLsCmd},
}

var busCACommands = []command{
	{"bus ca add", "", "make a new CA beside serve's and tell every node to trust both", busCAAddAbout, busCAAddCmd},
	{"bus ca status", "", "show which nodes hold the new CA", busCAStatusAbout, busCAStatusCmd},
	{"bus ca switch", "", "make the new CA issue serve's certificate, once every node holds it", busCASwitchAbout, busCASwitchCmd},
	{"bus ca drop", "", "tell every node to trust the new CA alone, once the servers use it", busCADropAbout, busCADropCmd},
}

const busCAAddAbout = `Makes a new CA in --data's tls/next/ (once: run again, it keeps it) and publishes a bus
configuration of the CA serve uses and the new one, signed by --key. Prints
"new CA sha256:<hex> added in DIR/tls/next" and "bus configuration seq N (revision R): nodes
trust sha256:<hex>, sha256:<hex>". Refused while the CA of the last switch is not dropped.`

const busCAStatusAbout = `Shows serve's CA, the new one (after add) or the old one (after a switch), the bus
configuration on the bus, and for every node heard (the heartbeat stream keeps each node's last
heartbeat) whether its bus_cas holds the new CA, else the servers' CA. Its last line is
"every node heard (N) holds CA sha256:<hex>" or "K of N nodes hold CA sha256:<hex>; not yet: …".`

const busCASwitchAbout = `Refuses unless every node heard holds the new CA in its bus_cas (or --force: a node without
it loses its link at its next reconnect, until it is enrolled again). Then the new CA becomes
serve's (DIR/tls/ca.pem, ca.key; the old one kept in DIR/tls/previous/) and issues serve's
certificate for the names the old one held. A running serve presents it from its next
handshake; connections made stay. Enrolment tokens made from now on pin the new CA; tokens made
before no longer enrol. A cluster of nats-server processes (init --cluster): run init --cluster
again and reload each server. Prints "the servers' CA is now sha256:<hex>".`

const busCADropAbout = `Publishes a bus configuration of serve's CA alone, signed by --key, and retires the CA
switched from (kept in DIR/tls/retired/). Run it once every server presents a certificate of the
new CA: a node still connected to a server of the old one refuses the configuration (it would
lose its link), and keeps both. Prints "bus configuration seq N (revision R): nodes trust
sha256:<hex>" and "CA sha256:<hex> dropped".`

const busURLsAbout = `URL… are the bus's servers, as nodes dial them (tls://bus-1.example.net:4222), one argument
or comma-separated: 1 to 32, scheme nats, tls, ws or wss, no user or password. Publishes a bus
configuration of them (keeping its CAs), signed by --key. Each node writes them to host.json's
nats_urls and dials them from its next start; a node refuses plaintext URLs its
insecure_plaintext does not allow. Prints "bus configuration seq N (revision R): nodes dial …".`

func busCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	return dispatch(ctx, s, fs, args, "bus", busCommands)
}

func busCACmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	return dispatch(ctx, s, fs, args, "bus ca", busCACommands)
}

// busPublish are the flags of a command that publishes a bus configuration.
type busPublish struct {
	trustFlags
	k   keyFlags
	ttl time.Duration
}

func (p *busPublish) register(fs *flag.FlagSet, getenv func(string) string) {
	p.trustFlags.register(fs, getenv)
	p.k.register(fs, false, getenv)
	fs.DurationVar(&p.ttl, "ttl", busconf.DefaultTTL, "how long the bus configuration stays valid; a node does not apply an expired one (and keeps what it applied)")
}

// publish signs and puts a configuration of cas and urls (nil: the current one's).
func (p *busPublish) publish(ctx context.Context, cas []*x509.Certificate, urls []string) (wire.Bus, uint64, error) {
	if p.ttl < time.Minute || p.ttl > 10*365*24*time.Hour {
		return wire.Bus{}, 0, usagef("--ttl %s is not between 1m and 87600h", p.ttl)
	}
	key, err := p.k.key()
	if err != nil {
		return wire.Bus{}, 0, err
	}
	kv, done, err := p.releases(ctx)
	if err != nil {
		return wire.Bus{}, 0, err
	}
	defer done()
	return busconf.Publish(ctx, kv, cas, urls, []ed25519.PrivateKey{key}, p.ttl, time.Now())
}

// releases opens the releases bucket as the admin of --data's trust store.
func (t *trustFlags) releases(ctx context.Context) (jetstream.KeyValue, func(), error) {
	c, _, err := t.connectAdmin(ctx)
	if err != nil {
		return nil, nil, err
	}
	kv, err := c.JS.KeyValue(ctx, t.names().Releases())
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("KV %s: %w (create the buckets with `mesh-release init`)", t.names().Releases(), err)
	}
	return kv, c.Close, nil
}

// connectAdmin dials the bus as the admin of --data's trust store.
func (t *trustFlags) connectAdmin(ctx context.Context) (*bus.Conn, string, error) {
	store, err := t.open()
	if err != nil {
		return nil, "", err
	}
	c, err := t.connectAs(ctx, store, store.AdminCreds())
	if err != nil {
		return nil, "", err
	}
	dir, _ := t.dataDir()
	return c, dir, nil
}

func busCAAddCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var p busPublish
	p.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	dir, _ := p.dataDir()
	if _, err := p.k.key(); err != nil {
		return err
	}
	next, made, err := trust.AddCA(dir)
	if err != nil {
		return err
	}
	cas, err := trust.ReadCAs(dir)
	if err != nil {
		return err
	}
	verb := "added"
	if !made {
		verb = "added before, kept"
	}
	s.printf("new CA %s %s in %s\n", wire.CAFingerprint(next), verb, filepath.Join(dir, trust.TLSDir, trust.NextCADir))
	d, rev, err := p.publish(ctx, cas.Bundle(), nil)
	if err != nil {
		return err
	}
	s.printf("bus configuration seq %d (revision %d): nodes trust %s\n", d.Seq, rev, strings.Join(wire.CAFingerprints(d.Certificates()), ", "))
	s.printf("next: `mesh-release bus ca status` until every node holds %s, then `mesh-release bus ca switch`\n", wire.CAFingerprint(next))
	return nil
}

func busCAStatusCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var t trustFlags
	t.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	dir, _ := t.dataDir()
	cas, err := trust.ReadCAs(dir)
	if err != nil {
		return err
	}
	c, _, err := t.connectAdmin(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s.printf("servers' CA  %s  (%s)\n", wire.CAFingerprint(cas.Current), filepath.Join(dir, trust.TLSDir, trust.CAFile))
	want := cas.Current
	if cas.Next != nil {
		want = cas.Next
		s.printf("new CA       %s  (added; `bus ca switch` once every node holds it)\n", wire.CAFingerprint(cas.Next))
	}
	if cas.Previous != nil {
		s.printf("old CA       %s  (switched from; `bus ca drop` once every server uses the new one)\n", wire.CAFingerprint(cas.Previous))
	}
	if kv, err := c.JS.KeyValue(ctx, t.names().Releases()); err == nil {
		s.println(busDocLine(ctx, kv))
	}
	entries, err := fleet.Read(ctx, c.JS, t.names())
	if err != nil {
		return err
	}
	nodes := busconf.Holding(entries, wire.CAFingerprint(want))
	w := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tHOLDS\tBUS_SEQ\tHEARD")
	now := time.Now()
	for _, n := range nodes {
		holds := "yes"
		if !n.Holds {
			holds = "no"
			if !n.Reports {
				holds = "no (no bus_cas: an older host, or no nats_ca)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", n.Node, holds, n.BusSeq, agoText(now.Sub(n.Heard)))
	}
	w.Flush()
	s.println(holdingLine(nodes, wire.CAFingerprint(want)))
	return nil
}

// busDocLine says what the bus configuration on the bus is.
func busDocLine(ctx context.Context, kv jetstream.KeyValue) string {
	d, rev, ok, err := busconf.Current(ctx, kv)
	switch {
	case err != nil:
		return "bus configuration: " + err.Error()
	case !ok:
		return "bus configuration: none on the bus"
	}
	parts := []string{}
	if fps := wire.CAFingerprints(d.Certificates()); len(fps) > 0 {
		parts = append(parts, "cas "+strings.Join(fps, ", "))
	}
	if d.URLs != nil {
		parts = append(parts, "urls "+strings.Join(d.URLs, ","))
	}
	return fmt.Sprintf("bus configuration seq %d (revision %d): %s; expires %s", d.Seq, rev, strings.Join(parts, "; "), d.Expires)
}

// holdingLine is status's last line.
func holdingLine(nodes []busconf.Node, fp string) string {
	missing := busconf.Missing(nodes)
	if len(missing) == 0 {
		return fmt.Sprintf("every node heard (%d) holds CA %s", len(nodes), fp)
	}
	return fmt.Sprintf("%d of %d nodes hold CA %s; not yet: %s", len(nodes)-len(missing), len(nodes), fp, nodeList(missing))
}

func nodeList(ns []busconf.Node) string {
	names := make([]string, 0, len(ns))
	for i, n := range ns {
		if i == 10 {
			names = append(names, fmt.Sprintf("and %d more", len(ns)-i))
			break
		}
		names = append(names, n.Node)
	}
	return strings.Join(names, ", ")
}

func agoText(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(int(d.Seconds()), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func busCASwitchCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var t trustFlags
	t.register(fs, s.getenv)
	force := fs.Bool("force", false, "switch even though some nodes heard do not hold the new CA: they lose their link at their next reconnect")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	dir, _ := t.dataDir()
	cas, err := trust.ReadCAs(dir)
	if err != nil {
		return err
	}
	if cas.Next == nil {
		return errors.New("no new CA to switch to: add one first (mesh-release bus ca add), and switch once every node holds it")
	}
	fp := wire.CAFingerprint(cas.Next)
	c, _, err := t.connectAdmin(ctx)
	if err != nil {
		return err
	}
	entries, err := fleet.Read(ctx, c.JS, t.names())
	c.Close()
	if err != nil {
		return err
	}
	missing := busconf.Missing(busconf.Holding(entries, fp))
	if len(missing) > 0 && !*force {
		return fmt.Errorf("switch refused: %d of %d nodes heard do not hold the new CA %s in their bus_cas: %s; switched, they would lose their link at their next reconnect. Wait for them (mesh-release bus ca status), or switch anyway with --force",
			len(missing), len(entries), fp, nodeList(missing))
	}
	if len(missing) > 0 {
		s.printf("switching with --force: %s do not hold the new CA and lose their link at their next reconnect\n", nodeList(missing))
	}
	after, err := trust.SwitchCA(dir)
	if err != nil {
		return err
	}
	s.printf("the servers' CA is now %s: serve presents a certificate it issued from its next handshake (connections made stay)\n", wire.CAFingerprint(after.Current))
	s.printf("enrolment tokens made from now on pin %s; tokens made before no longer enrol\n", wire.CAFingerprint(after.Current))
	s.printf("next: once every server presents it (a cluster: run `mesh-release init --cluster` again and reload each server), `mesh-release bus ca drop`\n")
	return nil
}

func busCADropCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var p busPublish
	p.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	dir, _ := p.dataDir()
	cas, err := trust.ReadCAs(dir)
	if err != nil {
		return err
	}
	if cas.Previous == nil {
		return errors.New("no CA to drop: the servers' CA was not switched since the last drop (mesh-release bus ca switch)")
	}
	d, rev, err := p.publish(ctx, []*x509.Certificate{cas.Current}, nil)
	if err != nil {
		return err
	}
	s.printf("bus configuration seq %d (revision %d): nodes trust %s\n", d.Seq, rev, strings.Join(wire.CAFingerprints(d.Certificates()), ", "))
	dropped, err := trust.DropCA(dir)
	if err != nil {
		return err
	}
	s.printf("CA %s dropped (kept in %s)\n", wire.CAFingerprint(dropped), filepath.Join(dir, trust.TLSDir, trust.RetiredCADir))
	return nil
}

func busURLsCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var p busPublish
	p.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var urls []string
	for _, a := range pos {
		for _, u := range strings.Split(a, ",") {
			if u = strings.TrimSpace(u); u != "" {
				urls = append(urls, u)
			}
		}
	}
	if err := wire.CheckBusURLs(urls); err != nil {
		return usagef("%v", err)
	}
	d, rev, err := p.publish(ctx, nil, urls)
	if err != nil {
		return err
	}
	s.printf("bus configuration seq %d (revision %d): nodes dial %s from their next start (kept in host.json nats_urls)\n", d.Seq, rev, text.Redact(strings.Join(d.URLs, ",")))
	return nil
}
