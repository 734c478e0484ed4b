package trust_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// NATS checks a message's subject against its publisher's permissions, never its reply subject,
// and JetStream publishes its answer to the reply subject in the requester's account. In the
// account that holds the streams a node could therefore have the server write its answer over
// another node's target or heartbeat, or copy a delete marker over its target
// (docs/decisions/0011, "Identities"). These are those attacks, made by node-a with exactly its
// permissions: each request is one node-a may make, its answer goes to the nodes account (a spy
// there sees it arrive), and node-b's target and heartbeat in the mesh account are unchanged. The
// same requests made in the mesh account (by the admin, on node-c) do change them: the attacks
// are real, and this test would see them succeed.

// state is a node's target and last heartbeat in the mesh account, as the admin reads them.
type state struct {
	targetRev uint64
	target    string
	hbSeq     uint64
	hb        string
}

func (s state) String() string {
	return fmt.Sprintf("target revision %d %q, heartbeat %d %q", s.targetRev, bounded(s.target), s.hbSeq, bounded(s.hb))
}

func (m *mesh) state(t *testing.T, node string) state {
	t.Helper()
	ctx := meshtest.Context(t, 10*time.Second)
	var s state
	kv, err := m.admin.JS.KeyValue(ctx, m.names.Targets())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, wire.NodeTargetKey(node))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound): // deleted: revision 0
	case err != nil:
		t.Fatal(err)
	default:
		s.targetRev, s.target = e.Revision(), string(e.Value())
	}
	st, err := m.admin.JS.Stream(ctx, m.names.HeartbeatStream())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.GetLastMsgForSubject(ctx, m.names.Heartbeat(node))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		t.Fatal(err)
	default:
		s.hbSeq, s.hb = msg.Sequence, string(msg.Data)
	}
	return s
}

// nodesUser signs a user of the nodes account with perms, with the nodes account's signing key
// as DATA/trust holds it: the spy, which no node could be.
func (m *mesh) nodesUser(t *testing.T, perms jwt.Permissions) user {
	t.Helper()
	return m.nodesUserSignedBy(t, trust.NodesSigningSeedFile, perms)
}

// nodesUserSignedBy is nodesUser signed by the nodes account's key in seedFile.
func (m *mesh) nodesUserSignedBy(t *testing.T, seedFile string, perms jwt.Permissions) user {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.store.Dir(), seedFile))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "spy"
	uc.IssuerAccount = m.store.NodesAccountPublicKey()
	uc.Permissions = perms
	text, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	return user{pub: pub, seed: string(seed), jwt: text, api: wire.NodeJSAPIPrefix}
}

// heartbeat publishes node's heartbeat as node, with body, and waits for its PubAck.
func (m *mesh) heartbeat(t *testing.T, u user, node, body string) {
	t.Helper()
	c, err := m.connect(u, nats.CustomInboxPrefix(wire.NodeInboxPrefix(node)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.nc.Close()
	ack, err := c.js.Publish(meshtest.Context(t, 10*time.Second), m.names.Heartbeat(node), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != m.names.HeartbeatStream() {
		t.Fatalf("%s's heartbeat was stored by %s, want %s", node, ack.Stream, m.names.HeartbeatStream())
	}
}

// injection is one attack: a request on subject (without the API prefix: "$JS.API." is replaced
// by the caller's) with reply as its reply subject, both naming the victim's keys.
type injection struct {
	name           string
	subject, reply func(n wire.Names, victim string) string
	body           string
	// changes says what the attack does to the victim when made in the mesh account.
	changes func(before, after state) bool
}

var injections = []injection{
	{
		name:    "overwrite another node's target with a stream info's answer",
		subject: func(n wire.Names, _ string) string { return "$JS.API.STREAM.INFO.KV_" + n.Targets() },
		reply:   func(n wire.Names, v string) string { return "$KV." + n.Targets() + "." + wire.NodeTargetKey(v) },
		changes: func(b, a state) bool { return a.targetRev > b.targetRev && strings.Contains(a.target, `"config"`) },
	},
	{
		name:    "overwrite another node's heartbeat with a stream info's answer",
		subject: func(n wire.Names, _ string) string { return "$JS.API.STREAM.INFO.KV_" + n.Targets() },
		reply:   func(n wire.Names, v string) string { return n.Heartbeat(v) },
		changes: func(b, a state) bool { return a.hbSeq > b.hbSeq && strings.Contains(a.hb, `"config"`) },
	},
	{
		name: "delete another node's target with a direct get of a deleted release",
		subject: func(n wire.Names, _ string) string {
			return "$JS.API.DIRECT.GET.KV_" + n.Releases() + ".$KV." + n.Releases() + "." + deletedRelease
		},
		reply:   func(n wire.Names, v string) string { return "$KV." + n.Targets() + "." + wire.NodeTargetKey(v) },
		changes: func(b, a state) bool { return b.targetRev > 0 && a.targetRev == 0 },
	},
}

// deletedRelease is a release key put and then deleted: its delete marker is readable.
const deletedRelease = "v0.9.0"

func TestNodeCannotWriteAnotherNodesKeysThroughAReplySubject(t *testing.T) {
	m := startMesh(t)
	n := m.names
	ctx := meshtest.Context(t, 60*time.Second)
	rel, err := m.admin.JS.KeyValue(ctx, n.Releases())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rel.Put(ctx, deletedRelease, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := rel.Delete(ctx, deletedRelease); err != nil {
		t.Fatal(err)
	}
	tg, err := m.admin.JS.KeyValue(ctx, n.Targets())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Put(ctx, wire.NodeTargetKey("node-c"), []byte(`{"version": "v1.0.0"}`)); err != nil {
		t.Fatal(err)
	}
	a, b := m.nodeUser("node-a"), m.nodeUser("node-b")
	m.heartbeat(t, b, "node-b", `{"node": "node-b"}`)
	admin := adminUser(t, m)
	if _, err := m.admin.JS.Publish(ctx, n.Heartbeat("node-c"), []byte(`{"node": "node-c"}`)); err != nil {
		t.Fatal(err)
	}

	// The spy: a nodes account user that hears every subject there.
	var spyPerms jwt.Permissions
	spyPerms.Sub.Allow.Add(">")
	spy, err := m.connect(m.nodesUser(t, spyPerms))
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan *nats.Msg, 64)
	if _, err := spy.nc.ChanSubscribe(">", heard); err != nil {
		t.Fatal(err)
	}
	if err := spy.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	for _, in := range injections {
		t.Run(in.name, func(t *testing.T) {
			// The node: allowed, answered into the nodes account (the spy hears it).
			node, err := m.connect(a, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")))
			if err != nil {
				t.Fatal(err)
			}
			before := m.state(t, "node-b")
			subject := strings.Replace(in.subject(n, "node-b"), "$JS.API.", wire.NodeJSAPIPrefix+".", 1)
			reply := in.reply(n, "node-b")
			if err := node.nc.PublishRequest(subject, reply, []byte(in.body)); err != nil {
				t.Fatal(err)
			}
			if err := node.nc.FlushTimeout(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			waitFor(t, heard, reply)

			// The control, made only now: the same request in the mesh account does what the
			// attack wants. The server published the node's answer before the spy heard it, and
			// the stream stores what reaches it in order: once the control's answer is stored,
			// the node's would be too, had it also reached the mesh account.
			c, err := m.connect(admin)
			if err != nil {
				t.Fatal(err)
			}
			defer c.nc.Close()
			beforeC := m.state(t, "node-c")
			if err := c.nc.PublishRequest(in.subject(n, "node-c"), in.reply(n, "node-c"), []byte(in.body)); err != nil {
				t.Fatal(err)
			}
			if err := c.nc.FlushTimeout(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for after := m.state(t, "node-c"); !in.changes(beforeC, after); after = m.state(t, "node-c") {
				if time.Now().After(deadline) {
					t.Fatalf("control: the same request in the mesh account did not change node-c: before %s, after %s", beforeC, after)
				}
				time.Sleep(50 * time.Millisecond)
			}

			if v := node.closeAndCollect(t); len(v) > 0 {
				t.Errorf("the node's request was refused (%s); the attack must be one a node may make", quoted(v))
			}
			if after := m.state(t, "node-b"); after != before {
				t.Errorf("node-b changed:\nbefore %s\n after %s", before, after)
			}
		})
	}
}

// waitFor waits for a message on subject among heard.
func waitFor(t *testing.T, heard <-chan *nats.Msg, subject string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case msg := <-heard:
			if msg.Subject == subject {
				return
			}
		case <-timeout:
			t.Fatalf("no answer arrived on %s in the nodes account", subject)
		}
	}
}
