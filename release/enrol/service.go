package enrol

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/wire"
)

// ServiceName is the micro service's name, as `nats micro ls` shows it.
const ServiceName = "mesh-enrol"

// The codes a refusal carries (micro's Nats-Service-Error-Code header), HTTP's meanings: the
// request is malformed; the token is not good for it; it conflicts with what was done before;
// nothing is enrolled under that id; the service failed.
const (
	CodeBadRequest = "400"
	CodeForbidden  = "403"
	CodeNotFound   = "404"
	CodeConflict   = "409"
	CodeInternal   = "500"
)

// Config is what a Service runs with.
type Config struct {
	// Admin is the connection the service answers on and keeps its buckets through: a user
	// with every permission in the mesh account (release/trust's AdminCreds). Required.
	Admin *nats.Conn
	// System is a system account connection (release/trust's SystemCreds), through which a
	// revocation is pushed. Without it the service refuses to revoke or replace.
	System *nats.Conn
	Store  Store // required
	Names  wire.Names
	// CAFile is the bus's CA in PEM, given to every node it enrols (required).
	CAFile string
	// URLs are the bus URLs given to nodes; empty: those of the token each node presented.
	URLs []string
	// TrustedKeys and TrustedTargetKeys are given to nodes for host.json (standard base64
	// ed25519 public keys, as release.pub holds them).
	TrustedKeys, TrustedTargetKeys []string
	Logger                         *slog.Logger     // nil discards
	Now                            func() time.Time // nil is time.Now
	// Timeout bounds the bus calls of one request; default DefaultTimeout.
	Timeout time.Duration
	// SweepEvery is how often token records expired more than ExpiredTokenKept are purged;
	// default DefaultSweepEvery.
	SweepEvery time.Duration
}

// Service is a running enrolment service.
type Service struct {
	cfg    Config
	log    *slog.Logger
	caPEM  string
	tokens jetstream.KeyValue
	nodes  jetstream.KeyValue
	svc    micro.Service

	stop      chan struct{}
	done      chan struct{}
	renewDone chan struct{} // closed when the renewals end; nil when there are none
	renewals  renewals
	stopOnce  sync.Once
}

// The defaults of what a Config leaves zero.
const (
	DefaultTimeout    = 10 * time.Second
	DefaultSweepEvery = time.Hour
)

// withDefaults returns c with every zero field at its default (decision 0041).
func (c Config) withDefaults() Config {
	if c.Names.Prefix == "" {
		c.Names = wire.NamesFor("")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.SweepEvery == 0 {
		c.SweepEvery = DefaultSweepEvery
	}
	return c
}

// Start checks cfg, opens (or creates) the enrolment and nodes buckets and starts answering on
// cfg.Names' EnrolSubject and RevokeSubject, as the micro service ServiceName (queue group
// "q": several services on one bus share the requests, and a token's compare-and-set keeps
// each to one use). Stop ends it.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	cfg, err := cfg.checked()
	if err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	caPEM, _, err := ReadCA(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	js, err := jetstream.New(cfg.Admin)
	if err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	s := &Service{cfg: cfg, log: logkey.Sub(cfg.Logger, "enrol"), caPEM: string(caPEM),
		stop: make(chan struct{}), done: make(chan struct{})}
	if s.tokens, err = bucket(ctx, js, cfg.Names, enrolmentBucket(cfg.Names)); err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	if s.nodes, err = bucket(ctx, js, cfg.Names, nodesBucket(cfg.Names)); err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	if err := s.answer(); err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	if cfg.System != nil {
		// A store signed again on load (the transition of decision 0024) reaches every server.
		if pushed, err := cfg.Store.PushIfNewer(ctx, cfg.System); err != nil {
			s.log.Warn("enrolment service: the servers hold older accounts than the trust store, and pushing them failed", "err", err)
		} else if pushed {
			s.log.Info("enrolment service: pushed the trust store's accounts, newer than the servers'")
		}
	}
	if cfg.Store.InTransition() {
		if err := s.startRenewals(); err != nil {
			s.svc.Stop()
			return nil, fmt.Errorf("enrolment service: %w", err)
		}
	}
	go s.sweepLoop()
	return s, nil
}

// checked is cfg checked, with its defaults filled (withDefaults).
func (cfg Config) checked() (Config, error) {
	if cfg.Admin == nil || cfg.Store == nil {
		return cfg, errors.New("no admin connection or trust store")
	}
	for _, list := range [][]string{cfg.TrustedKeys, cfg.TrustedTargetKeys} {
		if _, err := wire.ParseTrustedKeys(list); err != nil {
			return cfg, err
		}
	}
	return cfg.withDefaults(), nil
}

// answer adds the service's endpoints (enrol, revoke, renew) and returns once the server has
// their subscriptions: without that, a request sent at once on another connection could find
// no responder. The service is stopped on an error.
func (s *Service) answer() error {
	var err error
	s.svc, err = micro.AddService(s.cfg.Admin, micro.Config{
		Name: ServiceName, Version: "1.0.0",
		Description: "mesh enrolment: a one-time token and a node's public key in, the node's user JWT out; renewal; revocation",
	})
	if err != nil {
		return err
	}
	// Enrolments are rare: a flood is held to a bounded queue, not to the memory it would take.
	limits := micro.WithEndpointPendingLimits(1000, 16<<20)
	for _, ep := range []struct {
		name, subject string
		h             micro.HandlerFunc
	}{
		{"enrol", s.cfg.Names.EnrolSubject(), s.handleEnrol},
		{"revoke", s.cfg.Names.RevokeSubject(), s.handleRevoke},
		{"renew", s.cfg.Names.RenewWildcard(), s.handleRenew},
	} {
		if err := s.svc.AddEndpoint(ep.name, ep.h, micro.WithEndpointSubject(ep.subject), limits); err != nil {
			s.svc.Stop()
			return err
		}
	}
	if err := s.cfg.Admin.FlushTimeout(10 * time.Second); err != nil {
		s.svc.Stop()
		return err
	}
	return nil
}

// Stop stops answering and waits for the sweeper.
func (s *Service) Stop() error {
	var err error
	s.stopOnce.Do(func() {
		close(s.stop)
		err = s.svc.Stop()
		<-s.done
		if s.renewDone != nil {
			<-s.renewDone
		}
	})
	return err
}

// refusal is a request refused: a micro error with code and reason.
type refusal struct{ code, reason string }

func refuse(code, format string, args ...any) *refusal {
	return &refusal{code: code, reason: fmt.Sprintf(format, args...)}
}

// unanswerable says why a request must be neither answered nor acted on: one with no reply
// subject, or whose reply is a JetStream ack subject. A consumer's deliver subject is in its
// request body, which permissions do not check, so a node could have a consumer on one of its
// own keys deliver copies here; those arrive with a $JS.ACK reply and must do nothing.
func unanswerable(req micro.Request) string {
	switch r := req.Reply(); {
	case r == "":
		return "it has no reply subject"
	case strings.HasPrefix(r, "$JS.ACK."):
		return "it is a JetStream delivery (a consumer's deliver subject pointed here), not a request"
	}
	return ""
}

func (s *Service) handleEnrol(req micro.Request) {
	if why := unanswerable(req); why != "" {
		s.log.Warn("ignored a message on the enrolment subject", "why", why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	reply, r := s.enrol(ctx, req.Data())
	if r != nil {
		s.log.Warn("enrolment refused", "code", r.code, "reason", r.reason)
		if err := req.Error(r.code, r.reason, nil); err != nil {
			s.log.Warn("could not answer an enrolment", "err", err)
		}
		return
	}
	if err := req.RespondJSON(reply); err != nil {
		s.log.Warn("could not answer an enrolment; its token is used, the node must be given a new one", "err", err)
	}
}

// enrol checks a request and enrols its node, in an order that spends the token only once
// everything that could be refused without it has been: the request, the token and its record,
// the node's existing enrolment, the signing of the JWT. Then the token is marked used with a
// compare-and-set, the replaced key revoked, and the node recorded.
func (s *Service) enrol(ctx context.Context, data []byte) (wire.EnrolReply, *refusal) {
	req, err := wire.ParseEnrolRequest(data)
	if err != nil {
		return wire.EnrolReply{}, refuse(CodeBadRequest, "%v", err)
	}
	if !nkeys.IsValidPublicUserKey(req.PublicKey) {
		return wire.EnrolReply{}, refuse(CodeBadRequest, "enrolment request: public_key %s is not a valid nkey user public key", req.PublicKey)
	}
	e := &enrolment{req: req, now: s.cfg.Now().UTC()}
	if r := s.checkToken(ctx, e); r != nil {
		return wire.EnrolReply{}, r
	}
	if r := s.checkNode(ctx, e); r != nil {
		return wire.EnrolReply{}, r
	}
	userJWT, err := s.cfg.Store.NodeUser(s.cfg.Names, req.Node, req.PublicKey)
	if err != nil {
		return wire.EnrolReply{}, refuse(CodeInternal, "sign node %s's user: %v", req.Node, err)
	}
	if r := s.spendToken(ctx, e); r != nil {
		return wire.EnrolReply{}, r
	}
	// The token is spent from here: a failure below needs a new token.
	if r := s.recordNode(ctx, e); r != nil {
		return wire.EnrolReply{}, r
	}
	s.log.Info("node enrolled", "node", req.Node, "key", req.PublicKey, "token", e.tok.ID, "replaced", e.revokeOld)
	urls := s.cfg.URLs
	if len(urls) == 0 {
		urls = e.tok.URLs
	}
	return wire.EnrolReply{JWT: userJWT, CAPEM: s.currentCA(), URLs: urls, Prefix: s.cfg.Names.Prefix,
		TrustedKeys: nonNil(s.cfg.TrustedKeys), TrustedTargetKeys: nonNil(s.cfg.TrustedTargetKeys)}, nil
}

// enrolment is one enrolment request as enrol's phases learn it: the request, its token and
// the token's record (entry, for the compare-and-set that spends it), the node's record before
// (nil for a new node) and whether its key is revoked in the change.
type enrolment struct {
	req       wire.EnrolRequest
	now       time.Time
	tok       wire.EnrolToken
	rec       TokenRecord
	entry     jetstream.KeyValueEntry
	old       *NodeRecord
	oldRev    uint64
	revokeOld bool
}

// checkToken reads e's token and its record, and refuses a token that is not this mesh's, not
// the one issued, expired, used, or for another node.
func (s *Service) checkToken(ctx context.Context, e *enrolment) *refusal {
	text := strings.TrimSpace(e.req.Token)
	tok, err := wire.ParseToken(text)
	if err != nil {
		return refuse(CodeBadRequest, "%v", err)
	}
	if tok.Prefix != s.cfg.Names.Prefix {
		return refuse(CodeForbidden, "token %s is for the mesh with prefix %q; this service enrols for %q", tok.ID, tok.Prefix, s.cfg.Names.Prefix)
	}
	entry, err := s.tokens.Get(ctx, wire.TokenKey(tok.ID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return refuse(CodeForbidden, "unknown token %s: this mesh never issued it, or its record was purged %s after it expired", tok.ID, ExpiredTokenKept)
	}
	if err != nil {
		return refuse(CodeInternal, "read token %s: %v", tok.ID, err)
	}
	var rec TokenRecord
	if err := wire.DecodeStrict(entry.Value(), &rec); err != nil {
		return refuse(CodeInternal, "token %s's record in %s is unreadable: %v", tok.ID, s.cfg.Names.Enrolment(), err)
	}
	if !sameHash(hashHex([]byte(text)), rec.TokenSHA256) || !sameHash(hashHex([]byte(tok.Secret)), rec.SecretSHA256) {
		return refuse(CodeForbidden, "token %s was altered: its text is not the one issued", tok.ID)
	}
	if !e.now.Before(rec.Expires) {
		return refuse(CodeForbidden, "%s", wire.TokenExpired(rec.Expires, rec.Node, rec.Expires.Sub(rec.IssuedAt)))
	}
	if rec.UsedAt != nil {
		return refuse(CodeConflict, "token %s was already used at %s (by node %s); a token enrols one node, once", tok.ID, rec.UsedAt.Format(time.RFC3339), rec.UsedBy)
	}
	if rec.Node != "" && rec.Node != e.req.Node {
		return refuse(CodeForbidden, "token %s is for node %s, not %s", tok.ID, rec.Node, e.req.Node)
	}
	e.tok, e.rec, e.entry = tok, rec, entry
	return nil
}

// checkNode reads the node's record and refuses replacing an enrolled node's key unless the
// request says --replace, its token was made for that node, and the service can revoke.
func (s *Service) checkNode(ctx context.Context, e *enrolment) *refusal {
	req := e.req
	switch entry, err := s.nodes.Get(ctx, wire.NodeKey(req.Node)); {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return refuse(CodeInternal, "read node %s's record: %v", req.Node, err)
	default:
		e.old, e.oldRev = new(NodeRecord), entry.Revision()
		if err := wire.DecodeStrict(entry.Value(), e.old); err != nil {
			return refuse(CodeInternal, "node %s's record in %s is unreadable: %v", req.Node, s.cfg.Names.Nodes(), err)
		}
	}
	old := e.old
	e.revokeOld = old != nil && old.RevokedAt == nil && old.PublicKey != req.PublicKey
	if e.revokeOld && !req.Replace {
		return refuse(CodeConflict, "node %s is already enrolled (key %s, since %s); enrol with --replace to revoke that key and take its place",
			req.Node, old.PublicKey, old.EnrolledAt.Format(time.RFC3339))
	}
	// Replacing a node revokes its key: only a token made for that node may do it, so a token for
	// any node (the first to use it) cannot take over one that is enrolled.
	if e.revokeOld && e.rec.Node == "" {
		return refuse(CodeForbidden, "node %s is already enrolled, and token %s names no node: replacing a node needs a token made for it (`mesh-release enrol-token --node %s`)",
			req.Node, e.tok.ID, req.Node)
	}
	if e.revokeOld && s.cfg.System == nil {
		return refuse(CodeInternal, "node %s is enrolled and this service has no system connection to revoke its key", req.Node)
	}
	return nil
}

// spendToken marks e's token used, by compare-and-set: of two requests with one token, one
// enrols.
func (s *Service) spendToken(ctx context.Context, e *enrolment) *refusal {
	rec := e.rec
	rec.UsedAt, rec.UsedBy = &e.now, e.req.Node
	b, _ := json.Marshal(rec)
	if _, err := s.tokens.Update(ctx, wire.TokenKey(e.tok.ID), b, e.entry.Revision()); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return refuse(CodeConflict, "token %s was used by another request at the same moment; a token enrols one node, once", e.tok.ID)
		}
		return refuse(CodeInternal, "mark token %s used: %v", e.tok.ID, err)
	}
	return nil
}

// recordNode revokes the key e replaces, if any, and writes the node's new record.
func (s *Service) recordNode(ctx context.Context, e *enrolment) *refusal {
	req, old := e.req, e.old
	nrec := NodeRecord{PublicKey: req.PublicKey, EnrolledAt: e.now, TokenID: e.tok.ID, SignedBy: s.cfg.Store.NodesSigningPublicKey()}
	if old != nil {
		nrec.Replaced = append(old.Replaced, old.PublicKey)
		if len(nrec.Replaced) > maxReplaced {
			nrec.Replaced = nrec.Replaced[len(nrec.Replaced)-maxReplaced:]
		}
	}
	if e.revokeOld {
		if err := s.cfg.Store.Revoke(ctx, s.cfg.System, old.PublicKey, e.now); err != nil {
			return refuse(CodeInternal, "revoke node %s's old key %s: %v (token %s is used; make a new one)", req.Node, old.PublicKey, err, e.tok.ID)
		}
	}
	nb, _ := json.Marshal(nrec)
	nodeKey := wire.NodeKey(req.Node)
	var err error
	if old != nil {
		_, err = s.nodes.Update(ctx, nodeKey, nb, e.oldRev)
	} else {
		_, err = s.nodes.Create(ctx, nodeKey, nb)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return refuse(CodeConflict, "node %s was enrolled by another request at the same moment (token %s is used; make a new one)", req.Node, e.tok.ID)
	}
	if err != nil {
		return refuse(CodeInternal, "record node %s: %v (token %s is used; make a new one)", req.Node, err, e.tok.ID)
	}
	return nil
}

func (s *Service) handleRevoke(req micro.Request) {
	if why := unanswerable(req); why != "" {
		s.log.Warn("ignored a message on the revoke subject", "why", why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	reply, r := s.revoke(ctx, req.Data())
	if r != nil {
		s.log.Warn("revocation refused", "code", r.code, "reason", r.reason)
		if err := req.Error(r.code, r.reason, nil); err != nil {
			s.log.Warn("could not answer a revocation", "err", err)
		}
		return
	}
	if err := req.RespondJSON(reply); err != nil {
		s.log.Warn("could not answer a revocation (it was made)", "err", err)
	}
}

// revoke revokes the key a node is enrolled with and marks its record revoked. Revoking a
// revoked node pushes the revocation again (the account JWT may have been replaced meanwhile)
// and says when it was first revoked.
func (s *Service) revoke(ctx context.Context, data []byte) (wire.RevokeReply, *refusal) {
	req, err := wire.ParseRevokeRequest(data)
	if err != nil {
		return wire.RevokeReply{}, refuse(CodeBadRequest, "%v", err)
	}
	key := wire.NodeKey(req.Node)
	e, err := s.nodes.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return wire.RevokeReply{}, refuse(CodeNotFound, "no node %s is enrolled", req.Node)
	}
	if err != nil {
		return wire.RevokeReply{}, refuse(CodeInternal, "read node %s's record: %v", req.Node, err)
	}
	var rec NodeRecord
	if err := wire.DecodeStrict(e.Value(), &rec); err != nil {
		return wire.RevokeReply{}, refuse(CodeInternal, "node %s's record in %s is unreadable: %v", req.Node, s.cfg.Names.Nodes(), err)
	}
	if s.cfg.System == nil {
		return wire.RevokeReply{}, refuse(CodeInternal, "this enrolment service has no system connection; it cannot revoke")
	}
	at, already := s.cfg.Now().UTC(), rec.RevokedAt != nil
	if already {
		at = *rec.RevokedAt
	}
	if err := s.cfg.Store.Revoke(ctx, s.cfg.System, rec.PublicKey, at); err != nil {
		return wire.RevokeReply{}, refuse(CodeInternal, "revoke node %s's key %s: %v", req.Node, rec.PublicKey, err)
	}
	if !already {
		rec.RevokedAt = &at
		b, _ := json.Marshal(rec)
		if _, err := s.nodes.Update(ctx, key, b, e.Revision()); err != nil {
			return wire.RevokeReply{}, refuse(CodeInternal, "key %s is revoked, but node %s's record could not say so: %v; run the revocation again", rec.PublicKey, req.Node, err)
		}
	}
	s.log.Info("node revoked", "node", req.Node, "key", rec.PublicKey, "already", already)
	return wire.RevokeReply{Node: req.Node, PublicKey: rec.PublicKey, RevokedAt: at, AlreadyRevoked: already}, nil
}

// Sweep purges the records of tokens that expired more than ExpiredTokenKept ago (a token
// presented after that is refused as unknown rather than expired) and returns how many.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	keys, err := s.tokens.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", s.cfg.Names.Enrolment(), err)
	}
	defer keys.Stop()
	cutoff := s.cfg.Now().Add(-ExpiredTokenKept)
	var expired []jetstream.KeyValueEntry
	for k := range keys.Keys() {
		e, err := s.tokens.Get(ctx, k)
		if err != nil {
			continue // deleted meanwhile
		}
		var rec TokenRecord
		if json.Unmarshal(e.Value(), &rec) == nil && rec.Expires.Before(cutoff) {
			expired = append(expired, e)
		}
	}
	n := 0
	for _, e := range expired {
		if err := s.tokens.Purge(ctx, e.Key(), jetstream.LastRevision(e.Revision())); err == nil {
			n++
		}
	}
	if n > 0 {
		if err := s.tokens.PurgeDeletes(ctx); err != nil {
			return n, fmt.Errorf("purge %s's markers: %w", s.cfg.Names.Enrolment(), err)
		}
	}
	return n, nil
}

func (s *Service) sweepLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.SweepEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if n, err := s.Sweep(ctx); err != nil {
			s.log.Warn("could not purge expired tokens", "err", err)
		} else if n > 0 {
			s.log.Info("purged expired tokens", "count", n)
		}
		cancel()
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
	}
}

func sameHash(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// currentCA is the CA file as it is now: after `mesh-release bus ca switch` (decision 0046) a
// node enrolled by a running service is given the new CA, which the servers present. The one
// read at start stands in when the file cannot be read.
func (s *Service) currentCA() string {
	b, _, err := ReadCA(s.cfg.CAFile)
	if err != nil {
		s.log.Warn("enrolment: cannot read the CA file; giving the node the CA read at start", "file", s.cfg.CAFile, "err", err)
		return s.caPEM
	}
	return string(b)
}
