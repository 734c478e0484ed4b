// Package busconf publishes the bus configuration nodes follow and reads which nodes report a CA.
// The configuration (decision 0046) is the CA bundle and the bus's URLs, signed under the targets
// role.
package busconf

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
)

// DefaultTTL is how long a bus configuration stays valid unless published again: a node does
// not apply an expired one (it keeps what it applied). A month, a targets role's usual max_ttl.
const DefaultTTL = 30 * 24 * time.Hour

// Current is the bus configuration the releases bucket holds; ok is false when there is none.
func Current(ctx context.Context, kv jetstream.KeyValue) (d wire.Bus, rev uint64, ok bool, err error) {
	e, err := kv.Get(ctx, wire.BusKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.Bus{}, 0, false, nil
	}
	if err != nil {
		return wire.Bus{}, 0, false, fmt.Errorf("read the bus configuration (%s key %s): %w", kv.Bucket(), wire.BusKey, err)
	}
	d, err = wire.ParseBus(e.Value())
	if err != nil {
		return wire.Bus{}, e.Revision(), false, fmt.Errorf("the bus configuration on the bus (revision %d) does not parse: %w", e.Revision(), err)
	}
	return d, e.Revision(), true, nil
}

// Publish puts a bus configuration of cas and urls, signed by each of keys, numbered after the
// one the bucket holds: cas (or urls) nil keeps the current configuration's. It is put only if
// the key was not written meanwhile (another operator's configuration is not overwritten).
func Publish(ctx context.Context, kv jetstream.KeyValue, cas []*x509.Certificate, urls []string, keys []ed25519.PrivateKey, ttl time.Duration, now time.Time) (wire.Bus, uint64, error) {
	cur, rev, ok, err := Current(ctx, kv)
	if err != nil && rev == 0 {
		return wire.Bus{}, 0, err
	}
	if cas == nil && ok {
		cas = cur.Certificates()
	}
	if urls == nil && ok {
		urls = cur.URLs
	}
	d, err := wire.NewBus(cas, urls, cur.Seq, now, ttl)
	if err != nil {
		return wire.Bus{}, 0, err
	}
	if len(keys) == 0 {
		return wire.Bus{}, 0, errors.New("bus configuration: no key to sign it with")
	}
	for _, k := range keys {
		if err := d.Sign(k); err != nil {
			return wire.Bus{}, 0, err
		}
	}
	if rev == 0 {
		rev, err = kv.Create(ctx, wire.BusKey, d.Marshal())
	} else {
		rev, err = kv.Update(ctx, wire.BusKey, d.Marshal(), rev)
	}
	if err != nil {
		return wire.Bus{}, 0, fmt.Errorf("put the bus configuration (%s key %s; written by another meanwhile? run it again): %w", kv.Bucket(), wire.BusKey, err)
	}
	return d, rev, nil
}

// Node is what one node's last heartbeat says of a CA.
type Node struct {
	Node   string
	Heard  time.Time
	BusSeq uint64
	// Holds: its bus_cas name the CA. Reports: it sends bus_cas at all (not an older host, nor
	// one without nats_ca).
	Holds, Reports bool
}

// Holding says, for each node heard, whether its last heartbeat's bus_cas names the CA of
// fingerprint fp, in node order.
func Holding(entries []fleet.Entry, fp string) []Node {
	out := make([]Node, 0, len(entries))
	for _, e := range entries {
		n := Node{Node: e.Node, Heard: e.Heard}
		if e.Err == nil {
			n.BusSeq = e.Heartbeat.BusSeq
			n.Reports = len(e.Heartbeat.BusCAs) > 0
			n.Holds = slices.Contains(e.Heartbeat.BusCAs, fp)
		}
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b Node) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out
}

// Missing are the nodes of ns that do not hold the CA.
func Missing(ns []Node) []Node {
	var out []Node
	for _, n := range ns {
		if !n.Holds {
			out = append(out, n)
		}
	}
	return out
}
