// Package sim runs light simulated nodes that speak only the wire protocol, thousands on one
// machine.
//
// A rollout can be driven across thousands of nodes on one machine: each node follows its target
// (KV node.<id>, falling back to the fleet key; a signed target, verified as a host verifies it
// when Config.TrustedKeys is set), heartbeats into the heartbeat stream, "starts" a newer target
// after a random delay and confirms it shortly after — or, if told to fail it, rolls back from it
// as a launcher would. There is no root, no records, no fetch.
//
// Nodes are spread over a few connections (shards). A node follows the keys a host follows
// (its declaration, its own and the fleet target, the withdrawal list) as a host does since
// decision 0022 (host/link/watch.go), holding no JetStream consumer: a plain subscription on
// each key's subject tells it the key was written, and a direct get of the key's last value
// says what it holds — made once the subscriptions are in place, after every notice (again
// after a pause while a replica still answers the revision seen), and after every reconnect,
// so nothing written meanwhile is lost. The shard subscribes once per node to the node's own
// keys and once to the fleet and withdrawal keys its nodes share; each node makes its own gets.
// Config.Watch selects a KV watch per key instead (an ordered consumer each, as hosts held
// before 0022), to measure what those cost.
package sim

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// Config says what fleet to simulate.
type Config struct {
	URLs  []string   // one per server; shards are spread over them in turn
	Names wire.Names // bus names (default prefix when zero)
	Nodes []string   // node ids
	// Shards is how many client connections carry the nodes (default 30).
	Shards int
	// Running is the version every node runs, confirmed, at the start.
	Running string
	// Heartbeat is each node's heartbeat interval (default 3s); heartbeats of a shard's nodes
	// are spread evenly over it. A node also heartbeats at once when it starts, confirms or
	// rolls back a version.
	Heartbeat time.Duration
	// A node given a newer target starts it after a delay drawn in [StartMin, StartMax]
	// (fetch and stand-aside), then confirms it (or rolls back) after ConfirmAfter.
	StartMin, StartMax time.Duration
	ConfirmAfter       time.Duration
	// Fails reports whether node rolls back from version instead of confirming it.
	Fails func(node, version string) bool
	// Watch makes each node follow its four keys with a KV watch each (an ordered consumer per
	// key), as hosts did before decision 0022, instead of subscriptions and direct gets: the
	// "before" of the consumers figure.
	Watch bool
	// ReconnectWait is how long a shard waits before trying a server again after losing it
	// (default nats.go's, 2s).
	ReconnectWait time.Duration
	// GetsInFlight is how many direct gets each shard has outstanding at most (default 8).
	GetsInFlight int
	// TrustedKeys, when set, are the target keys: a target that does not verify with one of
	// them for the key it is stored under, or has expired, is not acted on (the key keeps the
	// target it had) and is counted in Stats.Refused, as a host refuses it. Empty: targets are
	// read, not verified.
	TrustedKeys []ed25519.PublicKey
	// OldHosts reports whether node's host is from before rollout plans: it follows its target
	// keys only and says no plans in its heartbeat (nil: every node reads plans).
	OldHosts func(node string) bool
}

// Stats are counters since Start.
type Stats struct {
	Heartbeats  int64 // heartbeats the stream acknowledged
	Errors      int64 // heartbeats it did not (timeouts, no responders)
	Started     int64 // versions started
	Confirmed   int64 // versions confirmed
	RolledBack  int64 // versions rolled back from
	TargetsSeen int64 // target key updates received (node and fleet keys)
	Refused     int64 // targets not acted on: not verifying with TrustedKeys, or expired
	Notices     int64 // messages on the keys' subscriptions (or watches) received
	Gets        int64 // direct gets of a key's last value made
	GetErrors   int64 // direct gets that failed (and were made again)
	Reconnects  int64 // connections of the shards reconnected
}

// Fleet is a running simulated fleet.
type Fleet struct {
	cfg    Config
	shards []*shard
	stats  struct {
		heartbeats, errors, started, confirmed, rolledBack, targets, refused atomic.Int64
		notices, gets, getErrors, reconnects                                 atomic.Int64
	}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// The defaults of what a Config leaves zero.
const (
	DefaultShards       = 30
	DefaultHeartbeat    = 3 * time.Second
	DefaultGetsInFlight = 8
)

// withDefaults returns c with every zero field at its default (decision 0041).
func (c Config) withDefaults() Config {
	if c.Names.Prefix == "" {
		c.Names = wire.NamesFor("")
	}
	if c.Shards <= 0 {
		c.Shards = DefaultShards
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Fails == nil {
		c.Fails = func(string, string) bool { return false }
	}
	if c.GetsInFlight <= 0 {
		c.GetsInFlight = DefaultGetsInFlight
	}
	return c
}

// Start connects the shards, subscribes every node to its keys, and publishes each node's first
// heartbeat, returning once the stream has acknowledged them all: from then on every node is
// in the fleet a rollout sees. Close stops it.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if len(cfg.URLs) == 0 || len(cfg.Nodes) == 0 || !wire.ValidVersion(cfg.Running) {
		return nil, errors.New("sim: URLs, Nodes and a valid Running version are required")
	}
	cfg = cfg.withDefaults()
	cfg.Shards = min(cfg.Shards, len(cfg.Nodes))
	if cfg.StartMax < cfg.StartMin {
		cfg.StartMax = cfg.StartMin
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &Fleet{cfg: cfg, cancel: cancel}
	for i := 0; i < cfg.Shards; i++ {
		f.shards = append(f.shards, &shard{f: f, nodes: map[string]*node{}})
	}
	for i, id := range cfg.Nodes {
		s := f.shards[i%len(f.shards)]
		n := &node{id: id, running: cfg.Running, knownGood: cfg.Running, started: time.Now(), subject: cfg.Names.Heartbeat(id),
			reads: cfg.OldHosts == nil || !cfg.OldHosts(id)}
		s.nodes[id] = n
		s.order = append(s.order, n)
	}
	for i, s := range f.shards {
		s.gets = make(chan getJob, int(numKeys)*len(s.order))
		if err := f.connect(ctx, i, s); err != nil {
			f.Close()
			return nil, err
		}
	}
	for _, s := range f.shards {
		if cfg.Watch {
			if err := s.followWatches(runCtx); err != nil { // KV watches live as long as the fleet
				f.Close()
				return nil, err
			}
			continue
		}
		if err := s.followSubscriptions(); err != nil {
			f.Close()
			return nil, err
		}
		if err := s.openStreams(ctx); err != nil {
			f.Close()
			return nil, err
		}
		f.wg.Add(1 + cfg.GetsInFlight)
		go func() { defer f.wg.Done(); s.noticesLoop(runCtx) }()
		for range cfg.GetsInFlight {
			go func() { defer f.wg.Done(); s.getter(runCtx) }()
		}
		s.getAll()
	}
	// Every node knows its keys' values before it first says what it runs, as a host does.
	for _, s := range f.shards {
		for s.pending.Load() > 0 {
			select {
			case <-ctx.Done():
				f.Close()
				return nil, fmt.Errorf("sim: the keys' first values: %w", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	for _, s := range f.shards {
		s.mu.Lock()
		for _, n := range s.order {
			s.beat(n)
		}
		s.mu.Unlock()
	}
	for _, s := range f.shards {
		select {
		case <-s.js.PublishAsyncComplete():
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("sim: first heartbeats: %w", ctx.Err())
		}
	}
	if e := f.stats.errors.Load(); e > 0 {
		f.Close()
		return nil, fmt.Errorf("sim: %d first heartbeats were not stored (is the heartbeat stream there?)", e)
	}
	for _, s := range f.shards {
		f.wg.Add(1)
		go func() { defer f.wg.Done(); s.heartbeats(runCtx) }()
	}
	return f, nil
}

// connect opens shard i's connection to its server. After a reconnect every node of the shard
// gets each of its keys again (the subscriptions are renewed by the client before), so a write
// made while the connection was down is not lost.
func (f *Fleet) connect(ctx context.Context, i int, s *shard) error {
	url := f.cfg.URLs[i%len(f.cfg.URLs)]
	nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("sim-%d", i)), nats.DontRandomize(), nats.MaxReconnects(-1),
		nats.ReconnectWait(cmp.Or(f.cfg.ReconnectWait, nats.DefaultReconnectWait)),
		nats.ReconnectHandler(func(*nats.Conn) {
			f.stats.reconnects.Add(1)
			if !f.cfg.Watch {
				s.getAll()
			}
		}))
	if err != nil {
		return fmt.Errorf("sim: connect shard %d to %s: %w", i, url, err)
	}
	s.nc = nc
	s.js, err = jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(1024),
		jetstream.WithPublishAsyncTimeout(10*time.Second),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { f.stats.heartbeats.Add(1) }),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { f.stats.errors.Add(1) }))
	if err != nil {
		nc.Close()
		return err
	}
	return nil
}

// Stats returns the counters so far.
func (f *Fleet) Stats() Stats {
	return Stats{
		Heartbeats: f.stats.heartbeats.Load(), Errors: f.stats.errors.Load(), Started: f.stats.started.Load(),
		Confirmed: f.stats.confirmed.Load(), RolledBack: f.stats.rolledBack.Load(), TargetsSeen: f.stats.targets.Load(),
		Refused: f.stats.refused.Load(), Notices: f.stats.notices.Load(), Gets: f.stats.gets.Load(),
		GetErrors: f.stats.getErrors.Load(), Reconnects: f.stats.reconnects.Load(),
	}
}

// Targeted lists the nodes that their own key or the plan ever told to run version, in no order.
func (f *Fleet) Targeted(version string) []string {
	var out []string
	for _, s := range f.shards {
		s.mu.Lock()
		for _, n := range s.order {
			if n.targeted[version] {
				out = append(out, n.id)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// Running returns how many nodes run version, confirmed.
func (f *Fleet) Running(version string) int {
	c := 0
	for _, s := range f.shards {
		s.mu.Lock()
		for _, n := range s.order {
			if n.running == version && n.knownGood == version {
				c++
			}
		}
		s.mu.Unlock()
	}
	return c
}

// Close stops every node and closes the connections.
func (f *Fleet) Close() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
	for _, s := range f.shards {
		s.mu.Lock()
		s.closed = true
		for _, n := range s.order {
			if n.timer != nil {
				n.timer.Stop()
			}
		}
		s.mu.Unlock()
		for _, w := range s.watchers {
			w.Stop()
		}
		if s.nc != nil {
			s.nc.Close()
		}
	}
}

// jitter returns a delay in [lo, hi].
func jitter(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}
