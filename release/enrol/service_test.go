package enrol

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// clock is a settable clock for the service and the issuer.
type clock struct{ t atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.t.Store(time.Now().UnixNano())
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.t.Load()) }
func (c *clock) add(d time.Duration) { c.t.Add(int64(d)) }
func (c *clock) opts(node string) TokenOptions {
	return TokenOptions{Node: node, URLs: []string{"tls://127.0.0.1:4222"}, Now: c.now}
}

type env struct {
	t     *testing.T
	bus   *meshtest.Bus
	store *fakeStore
	clock *clock
	ca    string
	svc   *Service
	names wire.Names
}

func startEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, bus: meshtest.StartBus(t), store: newFakeStore(t), clock: newClock(), names: wire.NamesFor("")}
	e.ca = writeCA(t, t.TempDir())
	e.svc = e.startService()
	return e
}

func (e *env) startService() *Service {
	e.t.Helper()
	nc, err := nats.Connect(e.bus.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	svc, err := Start(context.Background(), Config{Admin: nc, System: nc, Store: e.store, Names: e.names, CAFile: e.ca,
		TrustedKeys:       []string{build.PublicKeyString(meshtest.ReleaseKey.Public)},
		TrustedTargetKeys: []string{build.PublicKeyString(meshtest.SecondKey.Public)},
		Now:               e.clock.now})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { svc.Stop() })
	return svc
}

func (e *env) issue(node string) Issued {
	e.t.Helper()
	o := e.clock.opts(node)
	o.CAFile = e.ca
	tok, err := IssueToken(context.Background(), e.bus.Conn.JS, e.store, e.names, o)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func newUser(t testing.TB) string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}

// serviceError is a micro error reply: its code and description.
type serviceError struct{ code, reason string }

func (e *serviceError) Error() string { return e.code + " " + e.reason }

// request sends a request as a node would and returns the reply or the service's refusal.
func request(nc *nats.Conn, subject string, v any) ([]byte, error) {
	b, _ := json.Marshal(v)
	m, err := nc.Request(subject, b, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &serviceError{code: code, reason: m.Header.Get(micro.ErrorHeader)}
	}
	return m.Data, nil
}

func (e *env) enrol(req wire.EnrolRequest) (wire.EnrolReply, error) {
	b, err := request(e.bus.Conn.NC, e.names.EnrolSubject(), req)
	if err != nil {
		return wire.EnrolReply{}, err
	}
	return wire.ParseEnrolReply(b)
}

func (e *env) nodeRecord(node string) (NodeRecord, bool) {
	e.t.Helper()
	kv, err := e.bus.Conn.JS.KeyValue(context.Background(), e.names.Nodes())
	if err != nil {
		e.t.Fatal(err)
	}
	en, err := kv.Get(context.Background(), wire.NodeKey(node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return NodeRecord{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var r NodeRecord
	if err := wire.DecodeStrict(en.Value(), &r); err != nil {
		e.t.Fatal(err)
	}
	return r, true
}

func (e *env) tokenRecord(id string) (TokenRecord, []byte) {
	e.t.Helper()
	en, err := e.bus.KV(e.names.Enrolment()).Get(context.Background(), wire.TokenKey(id))
	if err != nil {
		e.t.Fatal(err)
	}
	var r TokenRecord
	if err := wire.DecodeStrict(en.Value(), &r); err != nil {
		e.t.Fatal(err)
	}
	return r, en.Value()
}

func wantRefused(t *testing.T, err error, code, says string) {
	t.Helper()
	var se *serviceError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a refusal %s saying %q", err, code, says)
	}
	if se.code != code || !strings.Contains(se.reason, says) {
		t.Fatalf("refused with %s %q, want %s saying %q", se.code, se.reason, code, says)
	}
}

func TestEnrolGivesTheNodeItsUserAndRecordsIt(t *testing.T) {
	e := startEnv(t)
	tok := e.issue("web-01")
	pub := newUser(t)
	reply, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "web-01", PublicKey: pub})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(reply.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Subject != pub || claims.Name != "web-01" {
		t.Fatalf("JWT for %s named %q, want %s web-01", claims.Subject, claims.Name, pub)
	}
	if !strings.Contains(reply.CAPEM, "BEGIN CERTIFICATE") || reply.Prefix != "mesh" || reply.URLs[0] != "tls://127.0.0.1:4222" {
		t.Fatalf("reply %+v", reply)
	}
	if len(reply.TrustedKeys) != 1 || len(reply.TrustedTargetKeys) != 1 || reply.TrustedTargetKeys[0] == reply.TrustedKeys[0] {
		t.Fatalf("trusted keys %v, target keys %v", reply.TrustedKeys, reply.TrustedTargetKeys)
	}
	rec, ok := e.nodeRecord("web-01")
	if !ok || rec.PublicKey != pub || rec.TokenID != tok.ID || rec.RevokedAt != nil || rec.EnrolledAt.IsZero() {
		t.Fatalf("node record %+v (present %v)", rec, ok)
	}
	trec, raw := e.tokenRecord(tok.ID)
	if trec.UsedAt == nil || trec.UsedBy != "web-01" {
		t.Fatalf("token record %+v not marked used", trec)
	}
	parsed, _ := wire.ParseToken(tok.Token)
	if strings.Contains(string(raw), parsed.Secret) || strings.Contains(string(raw), base64.RawURLEncoding.EncodeToString([]byte(parsed.Secret))) {
		t.Fatalf("the token record holds the secret: %s", raw)
	}
}

func TestTokenForAnyNodeEnrolsTheFirst(t *testing.T) {
	e := startEnv(t)
	tok := e.issue("")
	if _, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "db-07", PublicKey: newUser(t)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.nodeRecord("db-07"); !ok {
		t.Fatal("db-07 not recorded")
	}
}

func TestEnrolRefuses(t *testing.T) {
	e := startEnv(t)
	pub := newUser(t)

	t.Run("reused token", func(t *testing.T) {
		tok := e.issue("n-reuse")
		if _, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "n-reuse", PublicKey: pub}); err != nil {
			t.Fatal(err)
		}
		_, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "n-reuse", PublicKey: newUser(t), Replace: true})
		wantRefused(t, err, CodeConflict, "was already used at")
	})
	t.Run("expired token", func(t *testing.T) {
		tok := e.issue("n-exp")
		e.clock.add(DefaultTTL + time.Second)
		defer e.clock.add(-DefaultTTL - time.Second)
		_, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "n-exp", PublicKey: pub})
		wantRefused(t, err, CodeForbidden, "this token expired at "+tok.Expires.UTC().Format(time.RFC3339)+" (made for n-exp, ttl 1h): make a new one with mesh-release enrol-token")
	})
	t.Run("altered token", func(t *testing.T) {
		// A longer life is what a thief would change: same id, same secret, a later expiry.
		tok := e.issue("n-alt")
		p, _ := wire.ParseToken(tok.Token)
		p.Expires = p.Expires.Add(24 * time.Hour)
		text, err := wire.FormatToken(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.enrol(wire.EnrolRequest{Token: text, Node: "n-alt", PublicKey: pub})
		wantRefused(t, err, CodeForbidden, "was altered")
		// And the genuine token still works: a refused forgery does not spend it.
		if _, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "n-alt", PublicKey: pub}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("one byte changed", func(t *testing.T) {
		tok := e.issue("n-byte")
		// Every byte of the text counts: change each position in turn until one still parses
		// (a change inside the JSON's values), and it is refused as altered or unknown.
		refused := 0
		for i := len(wire.TokenPrefix); i < len(tok.Token) && refused < 3; i += 97 {
			b := []byte(tok.Token)
			if b[i] == 'A' {
				b[i] = 'B'
			} else {
				b[i] = 'A'
			}
			if _, err := wire.ParseToken(string(b)); err != nil {
				continue // the node refuses it before sending
			}
			_, err := e.enrol(wire.EnrolRequest{Token: string(b), Node: "n-byte", PublicKey: pub})
			var se *serviceError
			if !errors.As(err, &se) || (se.code != CodeForbidden && se.code != CodeBadRequest) {
				t.Fatalf("byte %d changed: %v", i, err)
			}
			refused++
		}
		if refused == 0 {
			t.Fatal("no one-byte change parsed; the test tested nothing")
		}
		if _, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "n-byte", PublicKey: pub}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown token", func(t *testing.T) {
		tok := e.issue("n-unk")
		p, _ := wire.ParseToken(tok.Token)
		p.ID = strings.Repeat("0", 32)
		text, _ := wire.FormatToken(p)
		_, err := e.enrol(wire.EnrolRequest{Token: text, Node: "n-unk", PublicKey: pub})
		wantRefused(t, err, CodeForbidden, "unknown token "+p.ID)
	})
	t.Run("token for another node", func(t *testing.T) {
		tok := e.issue("web-01")
		_, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "web-02", PublicKey: pub})
		wantRefused(t, err, CodeForbidden, "is for node web-01, not web-02")
	})
	t.Run("token of another mesh", func(t *testing.T) {
		tok := e.issue("n-mesh")
		p, _ := wire.ParseToken(tok.Token)
		p.Prefix = "other"
		text, _ := wire.FormatToken(p)
		_, err := e.enrol(wire.EnrolRequest{Token: text, Node: "n-mesh", PublicKey: pub})
		wantRefused(t, err, CodeForbidden, `prefix "other"`)
	})
	t.Run("malformed request", func(t *testing.T) {
		b, err := request(e.bus.Conn.NC, e.names.EnrolSubject(), map[string]any{"token": "x", "node": "n", "public_key": pub, "admin": true})
		_ = b
		wantRefused(t, err, CodeBadRequest, `admin: unknown field`)
	})
	t.Run("public key with a bad checksum", func(t *testing.T) {
		tok := e.issue("n-key")
		bad := pub[:55] + map[bool]string{true: "A", false: "B"}[pub[55] != 'A']
		_, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "n-key", PublicKey: bad})
		wantRefused(t, err, CodeBadRequest, "not a valid nkey user public key")
	})
}

func TestEnrolledNodeIsRefusedUnlessReplaceWhichRevokesTheOldKey(t *testing.T) {
	e := startEnv(t)
	first := newUser(t)
	if _, err := e.enrol(wire.EnrolRequest{Token: e.issue("web-01").Token, Node: "web-01", PublicKey: first}); err != nil {
		t.Fatal(err)
	}
	second := newUser(t)
	// A token for any node cannot take over one that is enrolled, --replace or not.
	anyNode := e.issue("")
	_, err := e.enrol(wire.EnrolRequest{Token: anyNode.Token, Node: "web-01", PublicKey: second, Replace: true})
	wantRefused(t, err, CodeForbidden, "token "+anyNode.ID+" names no node")
	tok := e.issue("web-01")
	_, err = e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "web-01", PublicKey: second})
	wantRefused(t, err, CodeConflict, "node web-01 is already enrolled (key "+first)
	if e.store.isRevoked(first) {
		t.Fatal("a refused enrolment revoked the enrolled key")
	}
	// The refusal did not spend the token: --replace with it works.
	if _, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: "web-01", PublicKey: second, Replace: true}); err != nil {
		t.Fatal(err)
	}
	if !e.store.isRevoked(first) || e.store.isRevoked(second) {
		t.Fatalf("after replace: first revoked %v (want true), second revoked %v (want false)", e.store.isRevoked(first), e.store.isRevoked(second))
	}
	rec, _ := e.nodeRecord("web-01")
	if rec.PublicKey != second || rec.TokenID != tok.ID || len(rec.Replaced) != 1 || rec.Replaced[0] != first {
		t.Fatalf("record after replace: %+v", rec)
	}
}

func TestRevokeMarksTheNodeAndARevokedNodeMayEnrolAgain(t *testing.T) {
	e := startEnv(t)
	pub := newUser(t)
	if _, err := e.enrol(wire.EnrolRequest{Token: e.issue("web-01").Token, Node: "web-01", PublicKey: pub}); err != nil {
		t.Fatal(err)
	}
	b, err := request(e.bus.Conn.NC, e.names.RevokeSubject(), wire.RevokeRequest{Node: "web-01"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := wire.ParseRevokeReply(b)
	if err != nil || r.PublicKey != pub || r.AlreadyRevoked || r.RevokedAt.IsZero() {
		t.Fatalf("revoke reply %+v %v", r, err)
	}
	if !e.store.isRevoked(pub) {
		t.Fatal("the key was not revoked in the store")
	}
	rec, _ := e.nodeRecord("web-01")
	if rec.RevokedAt == nil {
		t.Fatalf("record not marked revoked: %+v", rec)
	}
	b, err = request(e.bus.Conn.NC, e.names.RevokeSubject(), wire.RevokeRequest{Node: "web-01"})
	if err != nil {
		t.Fatal(err)
	}
	if r2, _ := wire.ParseRevokeReply(b); !r2.AlreadyRevoked || !r2.RevokedAt.Equal(r.RevokedAt) {
		t.Fatalf("second revoke %+v, want already revoked at %s", r2, r.RevokedAt)
	}
	_, err = request(e.bus.Conn.NC, e.names.RevokeSubject(), wire.RevokeRequest{Node: "nobody"})
	wantRefused(t, err, CodeNotFound, "no node nobody is enrolled")
	_, err = request(e.bus.Conn.NC, e.names.RevokeSubject(), map[string]string{"node": "a.b"})
	wantRefused(t, err, CodeBadRequest, "node id")

	// A revoked node enrols again without --replace; its old key stays revoked.
	again := newUser(t)
	if _, err := e.enrol(wire.EnrolRequest{Token: e.issue("web-01").Token, Node: "web-01", PublicKey: again}); err != nil {
		t.Fatal(err)
	}
	rec, _ = e.nodeRecord("web-01")
	if rec.PublicKey != again || rec.RevokedAt != nil || len(rec.Replaced) != 1 || rec.Replaced[0] != pub || e.store.isRevoked(again) {
		t.Fatalf("record after enrolling again: %+v", rec)
	}
}

// Two services share the requests (a queue group); many nodes present one token at once:
// exactly one is enrolled, every other is refused as a conflict.
func TestConcurrentUseOfOneTokenEnrolsOnce(t *testing.T) {
	e := startEnv(t)
	e.startService()
	tok := e.issue("")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		nc, err := nats.Connect(e.bus.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = request(nc, e.names.EnrolSubject(), wire.EnrolRequest{Token: tok.Token, Node: "node-" + string(rune('a'+i)), PublicKey: newUser(t)})
		}()
	}
	close(start)
	wg.Wait()
	won := 0
	for i, err := range errs {
		var se *serviceError
		switch {
		case err == nil:
			won++
		case errors.As(err, &se) && se.code == CodeConflict:
		default:
			t.Errorf("request %d: %v", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d requests enrolled with one token, want 1 (errors: %v)", won, errs)
	}
	rec, _ := e.tokenRecord(tok.ID)
	if _, ok := e.nodeRecord(rec.UsedBy); !ok {
		t.Fatalf("the token was used by %q, which has no record", rec.UsedBy)
	}
}

func TestIssueTokenRefuses(t *testing.T) {
	e := startEnv(t)
	for _, tc := range []struct {
		name string
		f    func(o *TokenOptions)
		want string
	}{
		{"bad node", func(o *TokenOptions) { o.Node = "a b" }, "node id"},
		{"short ttl", func(o *TokenOptions) { o.TTL = time.Second }, "not between 1m and"},
		{"long ttl", func(o *TokenOptions) { o.TTL = MaxTTL + time.Hour }, "not between 1m and"},
		{"no urls", func(o *TokenOptions) { o.URLs = nil }, "no bus URL"},
		{"no CA", func(o *TokenOptions) { o.CAFile = "" }, "no CA file"},
		{"CA not PEM", func(o *TokenOptions) { o.CAFile = "service.go" }, "holds no PEM CERTIFICATE"},
		{"bad url", func(o *TokenOptions) { o.URLs = []string{"http://x"} }, "scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := e.clock.opts("")
			o.CAFile = e.ca
			tc.f(&o)
			if _, err := IssueToken(context.Background(), e.bus.Conn.JS, e.store, e.names, o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestIssueTokenCreatesTheBucketAndPinsTheCA(t *testing.T) {
	e := startEnv(t)
	names := wire.NamesFor("other")
	o := e.clock.opts("x")
	o.CAFile = e.ca
	tok, err := IssueToken(context.Background(), e.bus.Conn.JS, e.store, names, o)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := wire.ParseToken(tok.Token)
	_, pin, _ := ReadCA(e.ca)
	if p.CASHA256 != pin || p.Prefix != "other" || !p.Expires.Equal(e.clock.now().UTC().Truncate(time.Second).Add(DefaultTTL)) {
		t.Fatalf("token %+v", p)
	}
	kv, err := e.bus.Conn.JS.KeyValue(context.Background(), names.Enrolment())
	if err != nil {
		t.Fatal(err)
	}
	st, _ := kv.Status(context.Background())
	if cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config; cfg.MaxMsgSize != MaxRecordBytes || cfg.MaxAge != 0 {
		t.Fatalf("bucket made with max value %d, max age %s", cfg.MaxMsgSize, cfg.MaxAge)
	}
}

func TestSweepPurgesLongExpiredTokensOnly(t *testing.T) {
	e := startEnv(t)
	old := e.issue("a")
	e.clock.add(ExpiredTokenKept + DefaultTTL + time.Minute)
	fresh := e.issue("b")
	n, err := e.svc.Sweep(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("swept %d (%v), want 1", n, err)
	}
	if _, err := e.bus.KV(e.names.Enrolment()).Get(context.Background(), wire.TokenKey(old.ID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the long-expired token is still there: %v", err)
	}
	e.tokenRecord(fresh.ID)
	_, err = e.enrol(wire.EnrolRequest{Token: old.Token, Node: "a", PublicKey: newUser(t)})
	wantRefused(t, err, CodeForbidden, "unknown token")
}

// A consumer's deliver subject is not checked by permissions, so a node could point one at the
// revoke subject: such a delivery (a $JS.ACK reply) and a message with no reply do nothing.
func TestRevokeIgnoresDeliveriesAndMessagesWithoutAReply(t *testing.T) {
	e := startEnv(t)
	pub := newUser(t)
	if _, err := e.enrol(wire.EnrolRequest{Token: e.issue("web-01").Token, Node: "web-01", PublicKey: pub}); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(wire.RevokeRequest{Node: "web-01"})
	nc := e.bus.Conn.NC
	if err := nc.Publish(e.names.RevokeSubject(), body); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: e.names.RevokeSubject(), Reply: "$JS.ACK.KV_mesh_declarations.c.1.1.1.1.0", Data: body}); err != nil {
		t.Fatal(err)
	}
	// A real request after them is answered, so the two before it were seen and passed over.
	if _, err := request(nc, e.names.RevokeSubject(), wire.RevokeRequest{Node: "nobody"}); err == nil {
		t.Fatal("revoking an unknown node was answered as done")
	}
	if e.store.isRevoked(pub) {
		t.Fatal("a message without a request's reply revoked the node")
	}
	if rec, _ := e.nodeRecord("web-01"); rec.RevokedAt != nil {
		t.Fatalf("record marked revoked: %+v", rec)
	}
}

// Issue 20: the enrolment service runs as two or more processes sharing the requests (a queue
// group). One killed — its connection gone without a word, as SIGKILL leaves it — enrolment goes
// on through the other, for every request.
func TestEnrolmentGoesOnWhenOneOfTwoServicesIsKilled(t *testing.T) {
	e := startEnv(t)
	nc, err := nats.Connect(e.bus.URL())
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := Start(context.Background(), Config{Admin: nc, System: nc, Store: e.store, Names: e.names, CAFile: e.ca,
		TrustedKeys: []string{build.PublicKeyString(meshtest.ReleaseKey.Public)}, Now: e.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { doomed.Stop() })
	// Both answer: the queue group shares requests between them.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close() // killed: no unsubscription, no drain
	for i := range 8 {
		node := "node-" + string(rune('a'+i))
		tok := e.issue(node)
		if _, err := e.enrol(wire.EnrolRequest{Token: tok.Token, Node: node, PublicKey: newUser(t)}); err != nil {
			t.Fatalf("enrolment %d after one service was killed: %v", i, err)
		}
	}
}
