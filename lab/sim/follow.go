package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// The keys a node follows, as a host's link does (host/link/link.go): its declaration, its own
// target, the fleet target, the withdrawal list and (a node that reads plans) the rollout plan.
// Only the targets and the plan change what a simulated node does; the others cost what they
// cost a host.
type keyKind uint8

const (
	keyDeclaration keyKind = iota
	keyOwn
	keyFleet
	keyWithdrawals
	keyPlan
	numKeys
)

// staleRetries are the pauses before a node asks again when a notice came and the direct get
// still returned the revision it had: on a cluster the get may be answered by a replica that
// has not stored the write yet (host/link/watch.go's staleRetries).
var staleRetries = []time.Duration{50 * time.Millisecond, 250 * time.Millisecond, time.Second, 4 * time.Second}

// getRetry is the pause before a direct get that failed (a timeout, no responders while a
// server is gone) is made again; a host's link retries its session with backoff.
const getRetry = time.Second

// getJob is one direct get of a node's key; try counts the stale retries made for a notice
// (-1: not for a notice, the value is read whatever its revision).
type getJob struct {
	n    *node
	kind keyKind
	try  int
}

// followSubscriptions subscribes the shard to its nodes' keys: one plain subscription per
// node on its declaration and own target key, and one each on the fleet and withdrawal keys
// shared by the shard's nodes (a host has its own; the server delivers the same messages).
// Every notice is followed by a direct get of the key's last value by each node concerned.
func (s *shard) followSubscriptions() error {
	n := s.f.cfg.Names
	s.notices = make(chan *nats.Msg, 1<<16)
	subjects := []string{kvSubject(n.Targets(), wire.FleetTargetKey), kvSubject(n.Withdrawals(), wire.WithdrawalsKey), kvSubject(n.Rollouts(), wire.PlanKey)}
	for _, nd := range s.order {
		subjects = append(subjects, kvSubject(n.Declarations(), nd.id), kvSubject(n.Targets(), wire.NodeTargetKey(nd.id)))
	}
	for _, subj := range subjects {
		sub, err := s.nc.ChanSubscribe(subj, s.notices)
		if err != nil {
			return fmt.Errorf("sim: subscribe %s: %w", subj, err)
		}
		sub.SetPendingLimits(-1, -1)
	}
	// The server has every subscription before the first get: a write after a get is noticed.
	return s.nc.FlushTimeout(30 * time.Second)
}

// kvSubject is a key's subject in its bucket's stream.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// openStreams opens the streams of the three buckets a node reads its keys from by direct get.
func (s *shard) openStreams(ctx context.Context) error {
	n := s.f.cfg.Names
	for kind, bucket := range map[keyKind]string{keyDeclaration: n.Declarations(), keyOwn: n.Targets(), keyWithdrawals: n.Withdrawals(), keyPlan: n.Rollouts()} {
		st, err := s.js.Stream(ctx, "KV_"+bucket)
		if err != nil {
			return fmt.Errorf("sim: open KV bucket %s: %w", bucket, err)
		}
		if !st.CachedInfo().Config.AllowDirect {
			return fmt.Errorf("sim: KV bucket %s does not allow direct gets", bucket)
		}
		s.streams[kind] = st
	}
	s.streams[keyFleet] = s.streams[keyOwn]
	return nil
}

// subject is the subject of n's key of kind.
func (s *shard) subject(n *node, kind keyKind) string {
	names := s.f.cfg.Names
	switch kind {
	case keyDeclaration:
		return kvSubject(names.Declarations(), n.id)
	case keyOwn:
		return kvSubject(names.Targets(), wire.NodeTargetKey(n.id))
	case keyFleet:
		return kvSubject(names.Targets(), wire.FleetTargetKey)
	case keyPlan:
		return kvSubject(names.Rollouts(), wire.PlanKey)
	default:
		return kvSubject(names.Withdrawals(), wire.WithdrawalsKey)
	}
}

// getAll queues a get of every key of every node of the shard: at the start and after a
// reconnect, so a write made while the connection was down is not lost. Called without mu.
func (s *shard) getAll() {
	for _, n := range s.order {
		for k := range numKeys {
			if k != keyPlan || n.reads {
				s.queue(getJob{n: n, kind: k, try: -1})
			}
		}
	}
}

// queue adds a get unless the same key of the same node is already waiting for one (that one
// reads the latest value too). The channel holds a get per key per node, so it never blocks.
func (s *shard) queue(j getJob) {
	s.mu.Lock()
	if j.n.queued[j.kind] {
		s.mu.Unlock()
		return
	}
	j.n.queued[j.kind] = true
	s.mu.Unlock()
	s.pending.Add(1)
	s.gets <- j
}

// noticesLoop turns each notice into gets: of one node's key, or of a shared key by every node.
func (s *shard) noticesLoop(ctx context.Context) {
	names := s.f.cfg.Names
	fleet, withdrawals := kvSubject(names.Targets(), wire.FleetTargetKey), kvSubject(names.Withdrawals(), wire.WithdrawalsKey)
	plan := kvSubject(names.Rollouts(), wire.PlanKey)
	declPrefix, ownPrefix := kvSubject(names.Declarations(), ""), kvSubject(names.Targets(), "node.")
	for {
		var m *nats.Msg
		select {
		case <-ctx.Done():
			return
		case m = <-s.notices:
		}
		s.f.stats.notices.Add(1)
		switch {
		case m.Subject == fleet || m.Subject == withdrawals:
			kind := keyFleet
			if m.Subject == withdrawals {
				kind = keyWithdrawals
			}
			for _, n := range s.order {
				s.queue(getJob{n: n, kind: kind})
			}
		case m.Subject == plan:
			for _, n := range s.order {
				if n.reads {
					s.queue(getJob{n: n, kind: keyPlan})
				}
			}
		case strings.HasPrefix(m.Subject, ownPrefix):
			if n := s.nodes[strings.TrimPrefix(m.Subject, ownPrefix)]; n != nil {
				s.queue(getJob{n: n, kind: keyOwn})
			}
		case strings.HasPrefix(m.Subject, declPrefix):
			if n := s.nodes[strings.TrimPrefix(m.Subject, declPrefix)]; n != nil {
				s.queue(getJob{n: n, kind: keyDeclaration})
			}
		}
	}
}

// getter makes the queued gets until ctx ends; a shard runs GetsInFlight of them.
func (s *shard) getter(ctx context.Context) {
	for {
		var j getJob
		select {
		case <-ctx.Done():
			return
		case j = <-s.gets:
		}
		s.mu.Lock()
		j.n.queued[j.kind] = false // a notice from now on needs another get
		s.mu.Unlock()
		s.get(ctx, j)
		s.pending.Add(-1)
	}
}

// get reads j's key by a direct get and acts on a revision not seen before; a revision already
// seen after a notice is asked again after a pause (a replica behind), a failed get after
// getRetry.
func (s *shard) get(ctx context.Context, j getJob) {
	subject := s.subject(j.n, j.kind)
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	m, err := s.streams[j.kind].GetLastMsgForSubject(gctx, subject)
	cancel()
	s.f.stats.gets.Add(1)
	var rev uint64
	var value []byte
	deleted := false
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		deleted = true // never written, or its history is gone
	case err != nil:
		if ctx.Err() != nil {
			return
		}
		s.f.stats.getErrors.Add(1)
		s.later(getRetry, getJob{n: j.n, kind: j.kind, try: -1})
		return
	default:
		rev, value = m.Sequence, m.Data
		deleted = isDeleteMarker(m.Header)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	seen := j.n.rev[j.kind]
	switch {
	case rev > seen, rev == 0 && seen != 0:
	case j.try >= 0 && j.try < len(staleRetries): // a notice, and the answer is not newer yet
		s.later(staleRetries[j.try], getJob{n: j.n, kind: j.kind, try: j.try + 1})
		return
	default:
		return
	}
	j.n.rev[j.kind] = rev
	switch j.kind {
	case keyOwn, keyFleet:
		s.set(j.n, j.kind, value, deleted)
	case keyPlan:
		s.setPlan(j.n, rev, value, deleted)
	}
}

// later queues j after d, unless the fleet is closed by then.
func (s *shard) later(d time.Duration, j getJob) {
	time.AfterFunc(d, func() {
		s.mu.Lock()
		closed := s.closed
		s.mu.Unlock()
		if !closed {
			s.queue(j)
		}
	})
}

// isDeleteMarker tells a KV delete or purge, or a marker a server left, from a value (as
// host/link's does).
func isDeleteMarker(h nats.Header) bool {
	if h == nil {
		return false
	}
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	switch h.Get(jetstream.MarkerReasonHeader) {
	case "MaxAge", "Purge", "Remove":
		return true
	}
	return false
}

// followWatches follows each node's four keys with a KV watch each — an ordered consumer per
// key, as hosts did before decision 0022 — the "before" of the consumers figure.
func (s *shard) followWatches(ctx context.Context) error {
	names := s.f.cfg.Names
	buckets := map[keyKind]string{keyDeclaration: names.Declarations(), keyOwn: names.Targets(), keyFleet: names.Targets(), keyWithdrawals: names.Withdrawals()}
	kvs := map[keyKind]jetstream.KeyValue{}
	for kind, bucket := range buckets {
		kv, err := s.js.KeyValue(ctx, bucket)
		if err != nil {
			return fmt.Errorf("sim: KV bucket %s: %w", bucket, err)
		}
		kvs[kind] = kv
	}
	for _, n := range s.order {
		for kind := range keyPlan { // no plan: the figure is of hosts from before it
			key := strings.TrimPrefix(s.subject(n, kind), kvSubject(buckets[kind], ""))
			w, err := kvs[kind].Watch(ctx, key)
			if err != nil {
				return fmt.Errorf("sim: watch %s of %s: %w", key, n.id, err)
			}
			s.watchers = append(s.watchers, w)
			s.pending.Add(1)
			go func() {
				first := true
				for e := range w.Updates() {
					if e == nil {
						if first {
							s.pending.Add(-1) // the key's initial value is in
							first = false
						}
						continue
					}
					s.f.stats.notices.Add(1)
					s.mu.Lock()
					if !s.closed && e.Revision() > n.rev[kind] {
						n.rev[kind] = e.Revision()
						if kind == keyOwn || kind == keyFleet {
							s.set(n, kind, e.Value(), e.Operation() != jetstream.KeyValuePut)
						}
					}
					s.mu.Unlock()
				}
			}()
		}
	}
	return nil
}
