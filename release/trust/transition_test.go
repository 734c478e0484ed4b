package trust_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// legacyPermissions is what a node user signed before decision 0022 may do that matters here:
// create a push consumer filtered to its declaration, answer its flow control, receive in its
// inbox.
func legacyPermissions(n wire.Names, node string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(
		wire.NodeJSAPIPrefix+".CONSUMER.CREATE.KV_"+n.Declarations()+".*.$KV."+n.Declarations()+"."+node,
		"$JS.FC.>", n.Heartbeat(node))
	p.Sub.Allow.Add(wire.NodeInboxPrefix(node) + ".>")
	return p
}

// watchDeclaration creates, as c, the push consumer a host before decision 0022 watched its
// declaration with, and returns the first value it delivers.
func watchDeclaration(ctx context.Context, c *client, n wire.Names, node string) (string, error) {
	msgs := make(chan *nats.Msg, 4)
	inbox := c.nc.NewInbox()
	sub, err := c.nc.ChanSubscribe(inbox, msgs)
	if err != nil {
		return "", err
	}
	defer sub.Unsubscribe()
	body := `{"stream_name":"KV_` + n.Declarations() + `","config":{"name":"w` + node + `","filter_subject":"$KV.` + n.Declarations() + `.` + node +
		`","deliver_policy":"last_per_subject","ack_policy":"none","deliver_subject":"` + inbox + `","inactive_threshold":30000000000}}`
	subject := wire.NodeJSAPIPrefix + ".CONSUMER.CREATE.KV_" + n.Declarations() + ".w" + node + ".$KV." + n.Declarations() + "." + node
	m, err := c.nc.RequestWithContext(ctx, subject, []byte(body))
	if err != nil {
		return "", err
	}
	if jsonHasError(m.Data) {
		return "", errors.New(replyText(m))
	}
	select {
	case m := <-msgs:
		return string(m.Data), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func TestNodesEnrolledBeforeNoConsumersKeepWorkingUntilTheCutOver(t *testing.T) {
	data := t.TempDir()
	trust.LegacyStoreForTest(t, data)
	m := startMeshIn(t, data) // loading the store starts the transition
	if !m.store.InTransition() {
		t.Fatal("a store signed before decision 0022 is not in transition once loaded")
	}
	n := m.names
	old := m.nodesUserSignedBy(t, trust.NodesLegacySigningSeedFile, legacyPermissions(n, "node-a"))
	oldConn, err := m.connect(old, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")))
	if err != nil {
		t.Fatalf("a node user signed before: %v", err)
	}
	ctx := meshtest.Context(t, 60*time.Second)
	if got, err := watchDeclaration(ctx, oldConn, n, "node-a"); err != nil || got != `{"for": "a"}` {
		t.Fatalf("a node user signed before watches its declaration during the transition: %q, %v", got, err)
	}

	renewed := m.nodeUser("node-a")
	newConn, err := m.connect(renewed, nats.CustomInboxPrefix(wire.NodeInboxPrefix("node-a")))
	if err != nil {
		t.Fatal(err)
	}
	// A publish the user may not make gets no answer.
	if _, err := watchDeclaration(meshtest.Context(t, 2*time.Second), newConn, n, "node-a"); err == nil {
		t.Error("a node user signed now created a consumer during the transition")
	}
	getDecl := func(c *client) error {
		st, err := c.js.Stream(ctx, "KV_"+n.Declarations())
		if err != nil {
			return err
		}
		_, err = st.GetLastMsgForSubject(ctx, "$KV."+n.Declarations()+".node-a")
		return err
	}
	if err := getDecl(newConn); err != nil {
		t.Fatalf("a node user signed now gets its declaration directly: %v", err)
	}

	sys, err := bus.Connect(ctx, m.srv.ClientURL(), m.store.SystemCreds(), bus.WithCA(m.ca))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if err := m.store.CutOver(ctx, sys.NC); err != nil {
		t.Fatalf("cut over: %v", err)
	}
	select {
	case <-oldConn.closed:
	case <-ctx.Done():
		t.Fatal("the server kept the connection of a user signed before after the cut-over")
	}
	if _, err := m.connect(old); err == nil {
		t.Error("a user signed before connects after the cut-over")
	}
	if err := newConn.nc.FlushTimeout(10 * time.Second); err != nil || getDecl(newConn) != nil {
		t.Errorf("a renewed node lost its connection or its gets at the cut-over: %v, %v", err, getDecl(newConn))
	}
	if err := m.store.CutOver(ctx, sys.NC); !errors.Is(err, trust.ErrNotInTransition) {
		t.Errorf("a second cut-over: %v, want ErrNotInTransition", err)
	}
	if _, err := os.Stat(filepath.Join(m.store.Dir(), trust.NodesLegacySigningSeedFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the first signing key is kept after the cut-over: %v", err)
	}
	again, err := trust.Ensure(data)
	if err != nil || again.InTransition() {
		t.Errorf("the store loaded after the cut-over: in transition %v, %v", again != nil && again.InTransition(), err)
	}
}
