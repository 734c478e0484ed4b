package link

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// nodePermissions are the subjects decisions 0011, 0022 and 0029 let node n1 use for what the
// link does, and no others: its heartbeat; for each of its six keys (four, and two windows) the
// stream's info, a direct get of the key's last value and a subscription on its subject;
// receiving below its own inbox prefix. No consumer: a node creates none.
func nodePermissions(node string) (publish, subscribe []string) {
	subscribe = []string{wire.NodeInboxPrefix(node) + ".>"}
	streams := map[string]bool{}
	for subject, stream := range WatchedSubjects(names, node) {
		publish = append(publish, "$JS.API.DIRECT.GET."+stream+"."+subject)
		subscribe = append(subscribe, subject)
		if !streams[stream] {
			streams[stream] = true
			publish = append(publish, "$JS.API.STREAM.INFO."+stream)
		}
	}
	publish = append(publish, names.Heartbeat(node))
	return publish, subscribe
}

// permissionedBus runs a server whose mesh account has an admin user with every permission and
// node n1's user with only nodePermissions, makes the mesh's buckets as admin, and returns the
// node's URL and the admin's JetStream.
func permissionedBus(t *testing.T) (nodeURL string, admin jetstream.JetStream) {
	t.Helper()
	pub, sub := nodePermissions("n1")
	b := meshtest.StartNodeUserBus(t, names, pub, sub)
	withdrawalsBucket(t, b.Admin)
	return b.NodeURL(), b.Admin
}

// withdrawalsBucket makes the withdrawal list's bucket if bus.Init did not.
func withdrawalsBucket(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: names.Withdrawals(), History: 5, MaxValueSize: wire.MaxWithdrawalsBytes})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		t.Fatal(err)
	}
}

// The link does all its work with only the permissions a node's user has: it watches its four
// keys, each on a consumer filtered to that key alone, receives on its own inbox prefix,
// heartbeats, and stops its watches without a consumer delete it may not make.
func TestLinkWorksWithOnlyANodesPermissions(t *testing.T) {
	url, admin := permissionedBus(t)
	ctx := context.Background()
	kv := func(bucket string) jetstream.KeyValue {
		k, err := admin.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	put := func(bucket, key string, value []byte) uint64 {
		rev, err := kv(bucket).Put(ctx, key, value)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	declRev := put(names.Declarations(), "n1", decl("n1"))
	put(names.Declarations(), "n2", decl("n2"))
	put(names.Targets(), wire.FleetTargetKey, target(t, wire.FleetTargetKey, "v1.1.0"))
	w, err := wire.Withdrawals{}.Withdraw("v1.0.1", "broken", time.Now(), meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	wRev := put(names.Withdrawals(), wire.WithdrawalsKey, w.Marshal())

	l, logs := openLogged(t, Options{URLs: []string{url}})
	// The three watches report in any order.
	var (
		gotDecl   *DeclarationArrived
		gotTarget *TargetChanged
		gotW      *WithdrawalsArrived
	)
	deadline := time.After(15 * time.Second)
	for gotDecl == nil || gotTarget == nil || gotW == nil {
		select {
		case ev := <-l.Events():
			switch ev := ev.(type) {
			case DeclarationArrived:
				gotDecl = &ev
			case TargetChanged:
				gotTarget = &ev
			case WithdrawalsArrived:
				gotW = &ev
			}
		case <-deadline:
			t.Fatalf("not every key reported: declaration %+v, target %+v, withdrawals %+v", gotDecl, gotTarget, gotW)
		}
	}
	if gotDecl.Revision != declRev {
		t.Errorf("declaration revision %d, want %d", gotDecl.Revision, declRev)
	}
	if gotTarget.Key != wire.FleetTargetKey || gotTarget.Target == nil || gotTarget.Target.Version != "v1.1.0" {
		t.Errorf("target %+v, want fleet v1.1.0", gotTarget)
	}
	if gotW.Revision != wRev || string(gotW.Value) != string(w.Marshal()) {
		t.Errorf("withdrawals %+v, want revision %d", gotW, wRev)
	}
	put(names.Targets(), wire.NodeTargetKey("n1"), target(t, wire.NodeTargetKey("n1"), "v1.2.0"))
	if got := waitFor[TargetChanged](t, l, "the node target", nil); got.Key != "node.n1" || got.Target.Version != "v1.2.0" {
		t.Errorf("target %+v, want node.n1 v1.2.0", got)
	}
	if err := l.PublishHeartbeat(ctx, wire.Heartbeat{State: wire.StateRunning}); err != nil {
		t.Errorf("heartbeat: %v", err)
	}
	// A refused request is logged (a consumer delete at debug level, which openLogged keeps), so
	// a watch stopped with a delete the node may not make shows here.
	l.Close()
	if strings.Contains(strings.ToLower(logs.String()), "permissions violation") {
		t.Errorf("the link used a subject a node may not:\n%s", logs.String())
	}
}

// What the permissions refuse stays refused: a node cannot watch another node's declaration or
// the whole targets bucket, the way nats.go's KV watch would.
func TestANodesPermissionsRefuseOtherKeys(t *testing.T) {
	url, _ := permissionedBus(t)
	nc, err := nats.Connect(url, nats.CustomInboxPrefix(wire.NodeInboxPrefix("n1")), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{kvSubject(names.Declarations(), "n2"), kvSubject(names.Targets(), ">")} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.CreatePushConsumer(ctx, kvStream(strings.Split(subject, ".")[1]), jetstream.ConsumerConfig{
			DeliverSubject: nc.NewInbox(), FilterSubject: subject, AckPolicy: jetstream.AckNonePolicy})
		if err == nil {
			t.Errorf("a consumer on %s was created", subject)
		}
	}
}
