package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/wire"
)

// kvOperation is the header JetStream KV sets on a delete or purge (nats.go's kvop); a put
// has none.
const kvOperation = "KV-Operation"

// node is one simulated node: what a real host would say about itself.
type node struct {
	id, subject        string
	running, knownGood string
	previous           string // what running was before the version being tried
	started            time.Time
	own, fleet         string // the node's key and the fleet key
	target             string // the effective target: own, else fleet
	pending            string // the version being started or judged
	bad                map[string]bool
	rollbacks          []wire.Rollback
	targeted           map[string]bool // the versions its own key was ever set to
	timer              *time.Timer
}

// update is a target key changing, for one node or (node "") every node of the shard.
type update struct {
	node, key string
	value     []byte
	deleted   bool
}

// shard is one connection and the nodes it carries. mu guards the nodes.
type shard struct {
	f        *Fleet
	nc       *nats.Conn
	js       jetstream.JetStream
	msgs     chan *nats.Msg // plain subscriptions on the keys' subjects
	updates  chan update    // KV watches (Config.Watch)
	watchers []jetstream.KeyWatcher

	mu     sync.Mutex
	nodes  map[string]*node
	order  []*node
	closed bool
}

// follow subscribes the shard's nodes to their target keys and the fleet key.
func (s *shard) follow(ctx context.Context) error {
	bucket := s.f.cfg.Names.Targets()
	s.msgs = make(chan *nats.Msg, 1<<16)
	s.updates = make(chan update, 1<<12)
	if !s.f.cfg.Watch {
		subjects := []string{"$KV." + bucket + "." + wire.FleetTargetKey}
		for _, n := range s.order {
			subjects = append(subjects, "$KV."+bucket+"."+wire.NodeTargetKey(n.id))
		}
		for _, subj := range subjects {
			sub, err := s.nc.ChanSubscribe(subj, s.msgs)
			if err != nil {
				return fmt.Errorf("sim: subscribe %s: %w", subj, err)
			}
			sub.SetPendingLimits(-1, -1)
		}
		return s.nc.FlushTimeout(10 * time.Second) // the server has every subscription before the first heartbeat
	}
	kv, err := s.js.KeyValue(ctx, bucket)
	if err != nil {
		return fmt.Errorf("sim: targets bucket: %w", err)
	}
	for _, n := range s.order {
		w, err := kv.WatchFiltered(ctx, []string{wire.NodeTargetKey(n.id), wire.FleetTargetKey})
		if err != nil {
			return fmt.Errorf("sim: watch the targets of %s: %w", n.id, err)
		}
		s.watchers = append(s.watchers, w)
		go func() {
			for e := range w.Updates() {
				if e == nil {
					continue // the initial values are in
				}
				s.updates <- update{node: n.id, key: e.Key(), value: e.Value(), deleted: e.Operation() != jetstream.KeyValuePut}
			}
		}()
	}
	return nil
}

// targets applies key updates until ctx ends.
func (s *shard) targets(ctx context.Context) {
	prefix := "$KV." + s.f.cfg.Names.Targets() + "."
	for {
		var u update
		select {
		case <-ctx.Done():
			return
		case m := <-s.msgs:
			u = update{key: strings.TrimPrefix(m.Subject, prefix), value: m.Data, deleted: m.Header.Get(kvOperation) != ""}
		case u = <-s.updates:
		}
		s.apply(u)
	}
}

func (s *shard) apply(u update) {
	s.f.stats.targets.Add(1)
	version := ""
	if !u.deleted {
		t, err := wire.ParseTarget(u.value)
		if err == nil && len(s.f.cfg.TrustedKeys) > 0 {
			if err = t.Verify(u.key, s.f.cfg.TrustedKeys); err == nil && t.ExpiredAt(time.Now()) {
				err = errors.New("expired")
			}
			if err != nil {
				s.f.stats.refused.Add(1)
				return // refused: the target in force stays
			}
		}
		if err == nil {
			version = t.Version
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u.key == wire.FleetTargetKey {
		for _, n := range s.order {
			if u.node == "" || u.node == n.id {
				n.fleet = version
				s.consider(n)
			}
		}
		return
	}
	n := s.nodes[strings.TrimPrefix(u.key, "node.")]
	if n == nil {
		return
	}
	if version != "" {
		if n.targeted == nil {
			n.targeted = map[string]bool{}
		}
		n.targeted[version] = true
	}
	n.own = version
	s.consider(n)
}

// consider starts the effective target after a delay when it is newer than what runs, as a
// host fetches, stages and stands aside for it. An older target changes nothing: the newest
// good version wins on a node. Called with mu held.
func (s *shard) consider(n *node) {
	target := n.own
	if target == "" {
		target = n.fleet
	}
	changed := target != n.target
	n.target = target
	if target == "" || n.pending != "" || n.bad[target] || semver.Compare(target, n.running) <= 0 {
		if changed {
			s.beat(n)
		}
		return
	}
	n.pending = target
	s.beat(n)
	n.timer = time.AfterFunc(jitter(s.f.cfg.StartMin, s.f.cfg.StartMax), func() { s.start(n, target) })
}

// start runs version on n, unconfirmed, and judges it after ConfirmAfter.
func (s *shard) start(n *node, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	n.previous, n.running, n.started = n.running, version, time.Now()
	s.f.stats.started.Add(1)
	s.beat(n)
	n.timer = time.AfterFunc(s.f.cfg.ConfirmAfter, func() { s.settle(n, version) })
}

// settle confirms version on n, or rolls back from it to what ran before when the node is
// told to fail it.
func (s *shard) settle(n *node, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	n.pending = ""
	if s.f.cfg.Fails(n.id, version) {
		if n.bad == nil {
			n.bad = map[string]bool{}
		}
		n.bad[version] = true
		n.rollbacks = append([]wire.Rollback{{
			From: version, To: n.previous, At: time.Now().UTC(),
			Reason: fmt.Sprintf("%s failed 3 times without confirming (last: exit status 1)", version),
			Output: fmt.Sprintf("mesh-host %s: injected failure (lab/sim)\n", version),
		}}, n.rollbacks...)
		n.rollbacks = n.rollbacks[:min(len(n.rollbacks), 5)]
		n.running, n.started = n.previous, time.Now()
		s.f.stats.rolledBack.Add(1)
	} else {
		n.knownGood = version
		s.f.stats.confirmed.Add(1)
	}
	s.beat(n)
	s.consider(n) // the target may have moved on meanwhile
}

// heartbeats sends each node's heartbeat every interval, the shard's nodes spread evenly over
// it, until ctx ends.
func (s *shard) heartbeats(ctx context.Context) {
	every := s.f.cfg.Heartbeat
	t := time.NewTicker(min(every/10, 50*time.Millisecond))
	defer t.Stop()
	begin, sent := time.Now(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(begin) * time.Duration(len(s.order)) / every)
		s.mu.Lock()
		for ; sent < due; sent++ {
			s.beat(s.order[sent%len(s.order)])
		}
		s.mu.Unlock()
	}
}

// beat publishes n's heartbeat; the stream's acknowledgement is counted by the shard's
// handlers. Called with mu held.
func (s *shard) beat(n *node) {
	now := time.Now()
	hb := wire.Heartbeat{
		Schema: wire.HeartbeatSchema, Node: n.id, State: wire.StateRunning, Running: n.running,
		KnownGood: n.knownGood, Target: n.target, Rollbacks: n.rollbacks,
		UptimeS: int64(now.Sub(n.started).Seconds()), SentAt: now.UTC(),
		LastReconcile: &wire.LastReconcile{At: now.UTC(), Trigger: wire.TriggerTimer, OK: true, DurationMS: 1},
	}
	if _, err := s.js.PublishAsync(n.subject, hb.Marshal()); err != nil {
		s.f.stats.errors.Add(1)
	}
}
