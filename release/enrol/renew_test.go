package enrol

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// startEnvInTransition is startEnv with a trust store in the transition of decision 0024.
func startEnvInTransition(t *testing.T) *env {
	t.Helper()
	store := newFakeStore(t)
	store.transition = true
	e := &env{t: t, bus: meshtest.StartBus(t), store: store, clock: newClock(), names: wire.NamesFor("")}
	e.ca = writeCA(t, t.TempDir())
	e.svc = e.startService()
	return e
}

// putRecord stores node's record as an enrolment before decision 0024 left it.
func (e *env) putRecord(node string, rec NodeRecord) {
	e.t.Helper()
	kv, err := e.bus.Conn.JS.KeyValue(context.Background(), e.names.Nodes())
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := json.Marshal(rec)
	if _, err := kv.Put(context.Background(), wire.NodeKey(node), b); err != nil {
		e.t.Fatal(err)
	}
}

// heartbeat publishes a heartbeat as node would, asking for its user again when ask.
func (e *env) heartbeat(node string, ask bool) {
	e.t.Helper()
	m := nats.NewMsg(e.names.Heartbeat(node))
	m.Data = []byte(`{}`)
	if ask {
		m.Header.Set(wire.RenewCredentialsHeader, wire.RenewCredentialsLegacy)
	}
	if err := e.bus.Conn.NC.PublishMsg(m); err != nil {
		e.t.Fatal(err)
	}
}

func TestServiceRenewsANodeUserWhenItsHeartbeatAsks(t *testing.T) {
	e := startEnvInTransition(t)
	nc := e.bus.Conn.NC
	pubA, pubR := newUser(t), newUser(t)
	revokedAt := e.clock.now().UTC()
	e.putRecord("node-a", NodeRecord{PublicKey: pubA, EnrolledAt: revokedAt, TokenID: "t1"})
	e.putRecord("node-r", NodeRecord{PublicKey: pubR, EnrolledAt: revokedAt, TokenID: "t2", RevokedAt: &revokedAt})
	subs := map[string]*nats.Subscription{}
	for _, node := range []string{"node-a", "node-r", "node-q", "node-unknown"} {
		sub, err := nc.SubscribeSync(wire.NodeCredentialsSubject(node))
		if err != nil {
			t.Fatal(err)
		}
		subs[node] = sub
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	next := func(node string) *nats.Msg {
		t.Helper()
		m, err := subs[node].NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no renewed user for %s: %v", node, err)
		}
		return m
	}
	// The service reads heartbeats in order: once an answer to a later one came, an earlier one
	// that got none never will.
	none := func(node string) {
		t.Helper()
		if n, _, _ := subs[node].Pending(); n != 0 {
			t.Errorf("%s was sent %d user(s), want none", node, n)
		}
	}

	e.heartbeat("node-a", true)
	m := next("node-a")
	uc, err := jwt.DecodeUserClaims(string(m.Data))
	if err != nil || uc.Subject != pubA {
		t.Fatalf("the renewed user: %v, subject %s, want %s", err, uc.Subject, pubA)
	}
	rec, _ := e.nodeRecord("node-a")
	if rec.SignedBy != e.store.NodesSigningPublicKey() || rec.RenewedAt == nil || rec.PublicKey != pubA {
		t.Errorf("the record after the renewal: %+v", rec)
	}

	for _, tc := range []struct {
		name, node string
		ask        bool
	}{
		{"a node renewed less than renewEvery ago", "node-a", true},
		{"a heartbeat that does not ask", "node-a", false},
		{"a revoked node", "node-r", true},
		{"a node never enrolled", "node-unknown", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.putRecord("node-q", NodeRecord{PublicKey: newUser(t), EnrolledAt: revokedAt, TokenID: "t3"})
			e.heartbeat(tc.node, tc.ask)
			e.heartbeat("node-q", true)
			next("node-q")
			none(tc.node)
			e.clock.add(renewEvery + time.Second) // node-q may ask again in the next case
		})
	}
	e.heartbeat("node-a", true)
	next("node-a")
}

func TestServiceRenewsANodeUserThatAsksOnItsRenewSubject(t *testing.T) {
	e := startEnv(t) // not in transition: any node of today may ask
	pub, pubR := newUser(t), newUser(t)
	at := e.clock.now().UTC()
	e.putRecord("node-a", NodeRecord{PublicKey: pub, EnrolledAt: at, TokenID: "t1"})
	e.putRecord("node-r", NodeRecord{PublicKey: pubR, EnrolledAt: at, TokenID: "t2", RevokedAt: &at})
	ask := func(node string) ([]byte, error) {
		return request(e.bus.Conn.NC, e.names.RenewSubject(node), nil)
	}
	b, err := ask("node-a")
	if err != nil {
		t.Fatalf("renew node-a: %v", err)
	}
	if uc, err := jwt.DecodeUserClaims(string(b)); err != nil || uc.Subject != pub {
		t.Fatalf("the renewed user: %v (%s), want one for %s", err, b, pub)
	}
	for _, tc := range []struct {
		name, node, code, why string
	}{
		{"asked again at once", "node-a", CodeConflict, "renewed less than"},
		{"a revoked node", "node-r", CodeForbidden, "revoked"},
		{"a node never enrolled", "node-x", CodeForbidden, "no node of that id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ask(tc.node)
			var se *serviceError
			if !errors.As(err, &se) || se.code != tc.code || !strings.Contains(se.reason, tc.why) {
				t.Errorf("renew %s: %v, want refusal %s saying %q", tc.node, err, tc.code, tc.why)
			}
		})
	}
	e.clock.add(renewEvery)
	if _, err := ask("node-a"); err != nil {
		t.Errorf("renew node-a after renewEvery: %v", err)
	}
}
