package enrol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Renewals (decision 0024). While the trust store is in transition, a node whose user was signed
// before decision 0022 puts wire.RenewCredentialsHeader on its heartbeats; the service signs the
// node's user again, with today's permissions, for the public key in the node's record, and sends
// the JWT to the node's inbox (wire.NodeCredentialsSubject). Only the node's own user may publish
// its heartbeat subject, and a JWT is of no use without the node's seed, so the heartbeat is the
// whole request.
const (
	// renewQueue shares the heartbeats among several enrolment services: one renews each.
	renewQueue = "mesh-enrol-renew"
	// renewEvery is the least time between two renewals of one node: it asks with every
	// heartbeat until it has one.
	renewEvery = 10 * time.Second
	// renewPending bounds the heartbeats waiting to be looked at; more are dropped (the node asks
	// again with its next).
	renewPending = 4096
	// renewRemembered bounds the nodes whose last renewal is remembered.
	renewRemembered = 100_000
)

// startRenewals subscribes to the heartbeats and answers the ones that ask, until Stop.
func (s *Service) startRenewals() error {
	msgs := make(chan *nats.Msg, renewPending)
	sub, err := s.cfg.Admin.ChanQueueSubscribe(s.cfg.Names.HeartbeatWildcard(), renewQueue, msgs)
	if err != nil {
		return err
	}
	s.log.Info("renewing the users of nodes enrolled before decision 0022 when they ask (the trust store is in transition until `mesh-release node cut-over`)")
	s.renewDone = make(chan struct{})
	go func() {
		defer close(s.renewDone)
		defer sub.Unsubscribe()
		for {
			select {
			case <-s.stop:
				return
			case m := <-msgs:
				if m.Header.Get(wire.RenewCredentialsHeader) != wire.RenewCredentialsLegacy {
					continue
				}
				node := strings.TrimSuffix(strings.TrimPrefix(m.Subject, s.cfg.Names.Prefix+".node."), ".heartbeat")
				if !s.renewals.allow(node, s.cfg.Now()) {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
				if err := s.renew(ctx, node); err != nil {
					s.log.Warn("renewal refused", "node", text.Cut(node, 64), "err", err)
				}
				cancel()
			}
		}
	}()
	return nil
}

// renew signs node's user again for the key in its record and sends it to the node's inbox.
func (s *Service) renew(ctx context.Context, node string) error {
	userJWT, err := s.signAgain(ctx, node)
	if err != nil {
		return err
	}
	return s.cfg.Admin.Publish(wire.NodeCredentialsSubject(node), []byte(userJWT))
}

// handleRenew answers a node's request on its RenewSubject with its user signed again.
func (s *Service) handleRenew(req micro.Request) {
	node := strings.TrimPrefix(req.Subject(), s.cfg.Names.RenewSubject(""))
	if !s.renewals.allow(node, s.cfg.Now()) {
		req.Error(CodeConflict, fmt.Sprintf("node %s was renewed less than %s ago; ask again later", text.Cut(node, 64), renewEvery), nil)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	userJWT, err := s.signAgain(ctx, node)
	if err != nil {
		s.log.Warn("renewal refused", "node", text.Cut(node, 64), "err", err)
		req.Error(CodeForbidden, text.Cut(err.Error(), 512), nil)
		return
	}
	req.Respond([]byte(userJWT))
}

// renewals remembers when each node was last renewed, to renew one at most every renewEvery.
type renewals struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (r *renewals) allow(node string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.last[node]; ok && now.Sub(t) < renewEvery {
		return false
	}
	if r.last == nil || len(r.last) >= renewRemembered {
		r.last = map[string]time.Time{}
	}
	r.last[node] = now
	return true
}

// signAgain signs node's user again, with today's permissions, for the key in its record, and
// records which key signed it.
func (s *Service) signAgain(ctx context.Context, node string) (string, error) {
	if err := wire.ValidNode(node); err != nil {
		return "", err
	}
	e, err := s.nodes.Get(ctx, wire.NodeKey(node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", errors.New("no node of that id is enrolled")
	}
	if err != nil {
		return "", err
	}
	var rec NodeRecord
	if err := wire.DecodeStrict(e.Value(), &rec); err != nil {
		return "", err
	}
	if rec.RevokedAt != nil {
		return "", errors.New("the node is revoked")
	}
	userJWT, err := s.cfg.Store.NodeUser(s.cfg.Names, node, rec.PublicKey)
	if err != nil {
		return "", err
	}
	if rec.SignedBy != s.cfg.Store.NodesSigningPublicKey() {
		now := s.cfg.Now().UTC()
		rec.SignedBy, rec.RenewedAt = s.cfg.Store.NodesSigningPublicKey(), &now
		b, _ := json.Marshal(rec)
		// Another service renewing it at the same moment writes the same.
		if _, err := s.nodes.Update(ctx, wire.NodeKey(node), b, e.Revision()); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return "", err
		}
	}
	s.log.Info("renewed a node's user with today's permissions", "node", node, "key", rec.PublicKey)
	return userJWT, nil
}
