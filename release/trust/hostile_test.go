package trust_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A hostile run found that a node could create a push consumer on a stream it may read with
// another node's heartbeat subject as the deliver subject: the consumer runs in the mesh account,
// so once anyone there subscribes to that subject (an operator's `nats sub`), each message it
// delivers is a publish on the heartbeat subject, and the heartbeat stream stores it — over that
// node's last heartbeat (one per subject), and, being whatever the node may read (archive chunks
// of 128 KiB), pushing other nodes' heartbeats out of the stream's 1 GiB. Nodes now create no
// consumer at all (docs/security.md); here each route is tried with a node's own credentials and
// the heartbeat stream must still hold the other node's own heartbeat, and nothing else.
func TestNodeCannotMakeTheHeartbeatStreamStoreAnythingButItsOwnHeartbeat(t *testing.T) {
	m := startMesh(t)
	n := m.names
	D, T, W, A := n.Declarations(), n.Targets(), n.Withdrawals(), n.Archives()
	const J = wire.NodeJSAPIPrefix + "."
	victim := n.Heartbeat("node-b")
	create := func(name, stream, filter, deliver string) (subject, body string) {
		cfg := map[string]any{"stream_name": stream, "config": map[string]any{
			"name": name, "filter_subject": filter, "ack_policy": "none",
			"deliver_policy": "all", "deliver_subject": deliver,
		}}
		b, _ := json.Marshal(cfg)
		return J + "CONSUMER.CREATE." + stream + "." + name + "." + filter, string(b)
	}
	for i, tc := range []struct{ name, stream, filter, deliver string }{
		{"a consumer on its own declaration delivering to another node's heartbeat subject", "KV_" + D, "$KV." + D + ".node-a", victim},
		{"a consumer on its own target delivering to another node's heartbeat subject", "KV_" + T, "$KV." + T + "." + wire.NodeTargetKey("node-a"), victim},
		{"a consumer on the fleet target delivering to another node's heartbeat subject", "KV_" + T, "$KV." + T + "." + wire.FleetTargetKey, victim},
		{"a consumer on the withdrawals delivering to another node's heartbeat subject", "KV_" + W, "$KV." + W + "." + wire.WithdrawalsKey, victim},
		{"a consumer on archive chunks delivering to another node's heartbeat subject", "OBJ_" + A, "$O." + A + ".C.*", victim},
		{"a consumer on its own declaration delivering to another node's target key", "KV_" + D, "$KV." + D + ".node-a", "$KV." + T + "." + wire.NodeTargetKey("node-b")},
	} {
		name := fmt.Sprintf("hostile%d", i)
		t.Run(tc.name, func(t *testing.T) {
			ctx := meshtest.Context(t, 60*time.Second)
			// node-b's own heartbeat, the one the stream must keep.
			b, err := m.connect(m.nodeUser("node-b"), nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-b")))
			if err != nil {
				t.Fatal(err)
			}
			own := fmt.Sprintf(`{"node": "node-b", "at": %d}`, time.Now().UnixNano())
			ack, err := b.js.Publish(ctx, victim, []byte(own))
			if err != nil {
				t.Fatalf("node-b's own heartbeat: %v", err)
			}
			// An operator watching node-b's heartbeats: interest on the deliver subject, which a
			// push consumer waits for.
			watcher, err := m.admin.NC.SubscribeSync(tc.deliver)
			if err != nil {
				t.Fatal(err)
			}
			defer watcher.Unsubscribe()
			if err := m.admin.NC.Flush(); err != nil {
				t.Fatal(err)
			}
			hb, err := m.admin.JS.Stream(ctx, n.HeartbeatStream())
			if err != nil {
				t.Fatal(err)
			}
			lastSeq := hb.CachedInfo().State.LastSeq
			a, err := m.connect(m.nodeUser("node-a"), nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")))
			if err != nil {
				t.Fatal(err)
			}
			before := m.state(t, "node-b")
			subject, body := create(name, tc.stream, tc.filter, tc.deliver)
			reply, reqErr, refused := requestOrRefusal(ctx, a, subject, body)
			created := reqErr == nil && !refused && !jsonHasError(reply.Data)
			if created {
				t.Logf("the server created node-a's consumer: %s", bounded(string(reply.Data)))
				// The consumer delivers at once to the watcher; the stream stores what arrives on
				// its subjects through its own queue: give it the time to, and stop once it has.
				if _, err := watcher.NextMsg(10 * time.Second); err != nil {
					t.Logf("nothing delivered to %s: %v", victim, err)
				}
				st, err := m.admin.JS.Stream(ctx, n.HeartbeatStream())
				if err != nil {
					t.Fatal(err)
				}
				for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					if info, err := st.Info(ctx); err == nil && info.State.LastSeq != lastSeq {
						break
					}
				}
			} else {
				t.Logf("refused: %v %s %s", reqErr, replyText(reply), refusedText(refused, subject))
			}
			st, err := m.admin.JS.Stream(ctx, n.HeartbeatStream())
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
			if err != nil {
				t.Fatal(err)
			}
			for subj, count := range info.State.Subjects {
				if !heartbeatSubject.MatchString(subj) {
					t.Errorf("%s stores %d message(s) on %s, not a heartbeat subject", n.HeartbeatStream(), count, subj)
				}
			}
			last, err := st.GetLastMsgForSubject(ctx, victim)
			if err != nil {
				t.Fatal(err)
			}
			if last.Sequence != ack.Sequence || string(last.Data) != own {
				t.Errorf("%s holds #%d (%d bytes) on %s, not node-b's own heartbeat #%d", n.HeartbeatStream(), last.Sequence, len(last.Data), victim, ack.Sequence)
			}
			if created {
				t.Errorf("a node created a push consumer delivering to %s", victim)
			}
			// Whatever the refusal, no consumer of node-a's making is left on the stream.
			s, err := m.admin.JS.Stream(ctx, tc.stream)
			if err != nil {
				t.Fatal(err)
			}
			if after := m.state(t, "node-b"); after != before {
				t.Errorf("node-b's target or heartbeat changed:\nbefore %s\n after %s", before, after)
			}
			if _, err := s.Consumer(ctx, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
				t.Errorf("the stream %s has node-a's consumer (err %v)", tc.stream, err)
			}
		})
	}
}

// requestOrRefusal sends a request as c and returns its answer, or refused once the server has
// named the publish a permissions violation (a refused request is never answered).
func requestOrRefusal(ctx context.Context, c *client, subject, body string) (*nats.Msg, error, bool) {
	type answer struct {
		m   *nats.Msg
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan answer, 1)
	go func() {
		m, err := c.nc.RequestWithContext(ctx, subject, []byte(body))
		done <- answer{m, err}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case a := <-done:
			return a.m, a.err, false
		case <-tick.C:
			for _, v := range c.violations() {
				if v == "Publish "+subject {
					return nil, nil, true
				}
			}
		}
	}
}

func refusedText(refused bool, subject string) string {
	if refused {
		return "(the server refused Publish " + subject + ")"
	}
	return ""
}

func jsonHasError(b []byte) bool {
	var r struct {
		Error *struct{} `json:"error"`
	}
	return json.Unmarshal(b, &r) != nil || r.Error != nil
}

func replyText(m *nats.Msg) string {
	if m == nil {
		return ""
	}
	return bounded(string(m.Data))
}

// heartbeatSubject is a heartbeat's subject under the default names: mesh.node.<id>.heartbeat.
var heartbeatSubject = regexp.MustCompile(`^mesh\.node\.[^.]+\.heartbeat$`)

// A node enrolled before nodes lost their consumers keeps a user that may publish consumer
// creates (decision 0011's list). Its requests reach nothing: the nodes account no longer
// imports the JetStream API's consumer create, nor flow control, so no consumer is made.
func TestANodeEnrolledBeforeStillCreatesNoConsumer(t *testing.T) {
	m := startMesh(t)
	n := m.names
	D := n.Declarations()
	var old jwt.Permissions
	old.Pub.Allow.Add(wire.NodeJSAPIPrefix+".CONSUMER.CREATE.>", "$JS.FC.>")
	old.Sub.Allow.Add(wire.NodeInboxPrefix("node-a") + ".>")
	a, err := m.connect(m.nodesUser(t, old), nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"stream_name":"KV_` + D + `","config":{"name":"old","filter_subject":"$KV.` + D + `.node-a","ack_policy":"none","deliver_subject":"` + n.Heartbeat("node-b") + `"}}`
	subject := wire.NodeJSAPIPrefix + ".CONSUMER.CREATE.KV_" + D + ".old.$KV." + D + ".node-a"
	_, err = a.nc.RequestWithContext(meshtest.Context(t, 10*time.Second), subject, []byte(body))
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("a consumer create by a user that may publish it: %v, want no responders", err)
	}
	st, err := m.admin.JS.Stream(meshtest.Context(t, 10*time.Second), "KV_"+D)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(meshtest.Context(t, 10*time.Second)); err != nil || info.State.Consumers != 0 {
		t.Errorf("the declarations stream has consumers: %v %v", info.State.Consumers, err)
	}
}
