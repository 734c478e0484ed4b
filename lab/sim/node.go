package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/wire"
)

// node is one simulated node: what a real host would say about itself.
type node struct {
	id, subject        string
	running, knownGood string
	previous           string // what running was before the version being tried
	started            time.Time
	own, fleet         string // the node's key and the fleet key
	reads              bool   // it reads rollout plans (Config.OldHosts says not)
	plan               *wire.Plan
	carry              string // what a plan another one replaced held it at (host/plan.go)
	target             string // the effective target: own, else the plan holding it, else carry, else fleet
	pending            string // the version being started or judged
	bad                map[string]bool
	rollbacks          []wire.Rollback
	targeted           map[string]bool // the versions its own key or the plan ever told it to run
	timer              *time.Timer
	rev                [numKeys]uint64 // the revision of each key acted on
	queued             [numKeys]bool   // a get of the key waits in the shard's queue
}

// shard is one connection and the nodes it carries. mu guards the nodes.
type shard struct {
	f        *Fleet
	nc       *nats.Conn
	js       jetstream.JetStream
	notices  chan *nats.Msg            // the plain subscriptions on the keys' subjects
	gets     chan getJob               // direct gets to make, at most one waiting per key per node
	streams  [numKeys]jetstream.Stream // the bucket's stream each kind of key is read from
	pending  atomic.Int64              // gets queued or running (and, with Watch, initial values not in)
	watchers []jetstream.KeyWatcher    // Config.Watch

	mu     sync.Mutex
	nodes  map[string]*node
	order  []*node
	closed bool
	// planRev and planAt are the last plan revision the shard's nodes read, parsed and
	// verified (nil: refused).
	planRev uint64
	planAt  *wire.Plan
}

// set acts on a new value of n's own or the fleet target key: a target that does not verify
// is refused and the one in force stays. Called with mu held.
func (s *shard) set(n *node, kind keyKind, value []byte, deleted bool) {
	s.f.stats.targets.Add(1)
	version := ""
	if !deleted {
		t, err := wire.ParseTarget(value)
		if err == nil && len(s.f.cfg.TrustedKeys) > 0 {
			key := wire.FleetTargetKey
			if kind == keyOwn {
				key = wire.NodeTargetKey(n.id)
			}
			if err = t.Verify(key, wire.LegacyTrust(nil, s.f.cfg.TrustedKeys), time.Now()); err == nil && t.ExpiredAt(time.Now()) {
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
	if kind == keyFleet {
		n.fleet = version
		s.consider(n)
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

// setPlan acts on a new value of the plan key, as a host evaluates it (host/plan.go): a plan
// that does not verify is refused and the one in force stays; one of another rollout carries
// the version the plan it replaces held the node at, until a plan completes. Each revision is
// parsed and verified once per shard (a host does it once for itself). Called with mu held.
func (s *shard) setPlan(n *node, rev uint64, value []byte, deleted bool) {
	s.f.stats.targets.Add(1)
	if deleted {
		return // the plan in force stays
	}
	if s.planRev != rev {
		s.planRev, s.planAt = rev, nil
		p, err := wire.ParsePlan(value)
		if err == nil && len(s.f.cfg.TrustedKeys) > 0 {
			err = p.Verify(wire.LegacyTrust(nil, s.f.cfg.TrustedKeys), time.Now())
		}
		if err == nil {
			s.planAt = &p
		}
	}
	p := s.planAt
	if p == nil {
		s.f.stats.refused.Add(1)
		return
	}
	me := wire.PlanNode{ID: n.id}
	if old := n.plan; old != nil && old.Rollout != p.Rollout && old.Holds(me) {
		n.carry = old.Version
	}
	if p.State == wire.PlanCompleted {
		n.carry = ""
	}
	n.plan = p
	s.consider(n)
}

// consider starts the effective target after a delay when it is newer than what runs, as a
// host fetches, stages and stands aside for it. An older target changes nothing: the newest
// good version wins on a node. Called with mu held.
func (s *shard) consider(n *node) {
	target := n.own
	switch {
	case target != "":
	case n.plan != nil && n.plan.Holds(wire.PlanNode{ID: n.id}) && !n.plan.ExpiredAt(time.Now()):
		target = n.plan.Version
		if n.targeted == nil {
			n.targeted = map[string]bool{}
		}
		n.targeted[target] = true
	case n.carry != "":
		target = n.carry
	default:
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
		// As a host of this tree says it: a rollout of a schema 4 release is gated on it.
		ManifestSchema: wire.ManifestSchemaPlatforms,
	}
	if n.reads {
		hb.Plans = wire.PlanSchema
	}
	if _, err := s.js.PublishAsync(n.subject, hb.Marshal()); err != nil {
		s.f.stats.errors.Add(1)
	}
}
