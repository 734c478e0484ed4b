package link

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

var names = wire.NamesFor("mesh")

func openLink(t *testing.T, url, node string) *Link {
	t.Helper()
	l, err := Open(context.Background(), Options{
		URLs: []string{url}, Node: node, Names: names,
		ReconnectWait: 20 * time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitFor reads events until one satisfies match, failing the test after a deadline. Events
// that do not match are skipped.
func waitFor[T Event](t *testing.T, l *Link, what string, match func(T) bool) T {
	t.Helper()
	deadline := time.After(15 * time.Second)
	var seen []string
	for {
		select {
		case ev, ok := <-l.Events():
			if !ok {
				t.Fatalf("events closed while waiting for %s (saw %v)", what, seen)
			}
			seen = append(seen, fmt.Sprintf("%T%+v", ev, ev))
			if e, ok := ev.(T); ok && (match == nil || match(e)) {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s within the deadline; saw %v", what, seen)
		}
	}
}

// target is a target for version signed for key with the test release key.
func target(t *testing.T, key, version string) []byte {
	t.Helper()
	tg, err := wire.NewTarget(key, version, 0, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	return tg.Marshal()
}

func decl(node string) []byte {
	return wire.Declaration{Version: 1, Node: node}.Marshal()
}

func TestLinkDeliversTheDeclarationWhenItIsPut(t *testing.T) {
	b := meshtest.StartBus(t)
	early := b.Put(names.Declarations(), "n1", decl("n1"))
	b.Put(names.Declarations(), "n2", decl("n2")) // another node's key is never delivered
	l := openLink(t, b.URL(), "n1")
	waitFor[Connected](t, l, "connected", nil)
	got := waitFor[DeclarationArrived](t, l, "the held declaration", nil)
	if got.Revision != early || string(got.Value) != string(decl("n1")) {
		t.Fatalf("first declaration = rev %d %s, want rev %d", got.Revision, got.Value, early)
	}
	rev := b.Put(names.Declarations(), "n1", decl("n1"))
	got = waitFor[DeclarationArrived](t, l, "the new declaration", nil)
	if got.Revision != rev || got.Deleted {
		t.Fatalf("declaration = %+v, want revision %d", got, rev)
	}
	b.Delete(names.Declarations(), "n1")
	got = waitFor[DeclarationArrived](t, l, "the deletion", nil)
	if !got.Deleted {
		t.Fatalf("declaration = %+v, want deleted", got)
	}
}

func TestLinkTargetNodeKeyWinsAndFallsBackToFleet(t *testing.T) {
	b := meshtest.StartBus(t)
	l := openLink(t, b.URL(), "n1")
	none := waitFor[TargetChanged](t, l, "the initial target", nil)
	if none.Key != "" || none.Target != nil {
		t.Fatalf("initial target = %+v, want none", none)
	}
	b.Put(names.Targets(), wire.FleetTargetKey, target(t, wire.FleetTargetKey, "v1.0.0"))
	got := waitFor[TargetChanged](t, l, "the fleet target", nil)
	if got.Key != "fleet" || got.Target == nil || got.Target.Version != "v1.0.0" {
		t.Fatalf("target = %+v", got)
	}
	b.Put(names.Targets(), wire.NodeTargetKey("n2"), target(t, wire.NodeTargetKey("n2"), "v9.0.0")) // not ours
	b.Put(names.Targets(), wire.NodeTargetKey("n1"), target(t, wire.NodeTargetKey("n1"), "v1.1.0"))
	got = waitFor[TargetChanged](t, l, "the node target", nil)
	if got.Key != "node.n1" || got.Target.Version != "v1.1.0" {
		t.Fatalf("target = %+v, want node.n1 v1.1.0", got)
	}
	b.Put(names.Targets(), wire.FleetTargetKey, target(t, wire.FleetTargetKey, "v1.2.0"))
	b.Put(names.Targets(), wire.NodeTargetKey("n1"), target(t, wire.NodeTargetKey("n1"), "v1.3.0"))
	got = waitFor[TargetChanged](t, l, "the node target again", nil)
	if got.Key != "node.n1" || got.Target.Version != "v1.3.0" {
		t.Fatalf("a fleet change while the node key is present was reported: %+v", got)
	}
	b.Delete(names.Targets(), wire.NodeTargetKey("n1"))
	got = waitFor[TargetChanged](t, l, "the fallback to fleet", nil)
	if got.Key != "fleet" || got.Target.Version != "v1.2.0" {
		t.Fatalf("target = %+v, want fleet v1.2.0", got)
	}
	b.Put(names.Targets(), wire.NodeTargetKey("n1"), []byte(`{"version":"latest"}`))
	got = waitFor[TargetChanged](t, l, "the invalid target", nil)
	if got.Err == nil || got.Target != nil || !strings.Contains(got.Err.Error(), "not a canonical semantic version") {
		t.Fatalf("target = %+v, want an error", got)
	}
}

func TestLinkReportsEachRevisionOfTheWithdrawalList(t *testing.T) {
	b := meshtest.StartBus(t)
	withdrawalsBucket(t, b.Conn.JS)
	w1, err := wire.Withdrawals{}.Withdraw("v1.1.0", "broken", time.Now(), meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	r1 := b.Put(names.Withdrawals(), wire.WithdrawalsKey, w1.Marshal())
	l := openLink(t, b.URL(), "n1")
	if got := waitFor[WithdrawalsArrived](t, l, "the list there before the link", nil); got.Revision != r1 || string(got.Value) != string(w1.Marshal()) {
		t.Fatalf("withdrawals = %+v, want revision %d", got, r1)
	}
	w2, err := w1.Withdraw("v1.2.0", "also broken", time.Now(), meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	r2 := b.Put(names.Withdrawals(), wire.WithdrawalsKey, w2.Marshal())
	if got := waitFor[WithdrawalsArrived](t, l, "the new list", nil); got.Revision != r2 || got.Deleted {
		t.Fatalf("withdrawals = %+v, want revision %d", got, r2)
	}
	b.Delete(names.Withdrawals(), wire.WithdrawalsKey)
	if got := waitFor[WithdrawalsArrived](t, l, "the deletion", nil); !got.Deleted || len(got.Value) != 0 {
		t.Fatalf("withdrawals = %+v, want deleted", got)
	}
}

func TestLinkReceivesOnlyBelowItsNodesInboxPrefix(t *testing.T) {
	b := meshtest.StartBus(t)
	l := openLink(t, b.URL(), "n1")
	waitFor[Connected](t, l, "connected", nil)
	if inbox := l.nc.NewInbox(); !strings.HasPrefix(inbox, wire.NodeInboxPrefix("n1")+".") {
		t.Fatalf("inbox %q is not below %s", inbox, wire.NodeInboxPrefix("n1"))
	}
}

func TestLinkConnectsWhenTheServerStartsLater(t *testing.T) {
	b := meshtest.StartBus(t)
	b.Put(names.Declarations(), "n1", decl("n1"))
	b.Stop()
	l := openLink(t, b.URL(), "n1")
	if err := l.PublishHeartbeat(context.Background(), wire.Heartbeat{State: wire.StateRunning}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("heartbeat while the server is down: %v, want ErrNotConnected", err)
	}
	b.Start()
	waitFor[Connected](t, l, "connected", nil)
	waitFor[DeclarationArrived](t, l, "the declaration", nil)
}

func TestLinkReconnectsAndWatchesAgain(t *testing.T) {
	b := meshtest.StartBus(t)
	r1 := b.Put(names.Declarations(), "n1", decl("n1"))
	l := openLink(t, b.URL(), "n1")
	waitFor[DeclarationArrived](t, l, "the declaration", func(e DeclarationArrived) bool { return e.Revision == r1 })
	b.Stop()
	waitFor[Disconnected](t, l, "disconnected", nil)
	b.Start()
	waitFor[Reconnected](t, l, "reconnected", nil)
	r2 := b.Put(names.Declarations(), "n1", decl("n1"))
	got := waitFor[DeclarationArrived](t, l, "the declaration after reconnect", nil)
	if got.Revision != r2 {
		t.Fatalf("after reconnect got revision %d, want %d (revision %d must not be reported twice)", got.Revision, r2, r1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := l.PublishHeartbeat(ctx, wire.Heartbeat{State: wire.StateRunning})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("heartbeats did not resume after reconnect: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLinkWaitsForBucketsCreatedLater(t *testing.T) {
	b := meshtest.StartBus(t, meshtest.NoBuckets())
	l := openLink(t, b.URL(), "n1")
	waitFor[Connected](t, l, "connected", nil)
	b.Init()
	rev := b.Put(names.Declarations(), "n1", decl("n1"))
	got := waitFor[DeclarationArrived](t, l, "the declaration", nil)
	if got.Revision != rev {
		t.Fatalf("revision %d, want %d", got.Revision, rev)
	}
}

func TestLinkHeartbeatIsStoredAsTheNodesLastWord(t *testing.T) {
	b := meshtest.StartBus(t)
	l := openLink(t, b.URL(), "n1")
	waitFor[Connected](t, l, "connected", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 1; i <= 3; i++ {
		if err := l.PublishHeartbeat(ctx, wire.Heartbeat{State: wire.StateRunning, DeclarationRevision: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	hb, err := wire.ParseHeartbeat(b.LastHeartbeat("n1"))
	if err != nil {
		t.Fatal(err)
	}
	if hb.Node != "n1" || hb.DeclarationRevision != 3 || hb.SentAt.IsZero() {
		t.Fatalf("last heartbeat = %+v", hb)
	}
	if err := l.PublishHeartbeat(ctx, wire.Heartbeat{Node: "n2", State: wire.StateRunning}); err == nil {
		t.Fatal("a heartbeat for another node was published")
	}
}

func TestLinkHeartbeatWithoutAStreamSaysRunInit(t *testing.T) {
	b := meshtest.StartBus(t, meshtest.NoBuckets())
	l := openLink(t, b.URL(), "n1")
	waitFor[Connected](t, l, "connected", nil)
	err := l.PublishHeartbeat(context.Background(), wire.Heartbeat{State: wire.StateRunning})
	if err == nil || !strings.Contains(err.Error(), "mesh-release init") {
		t.Fatalf("err = %v", err)
	}
}

func TestLinkCloseEndsTheEvents(t *testing.T) {
	b := meshtest.StartBus(t)
	l := openLink(t, b.URL(), "n1")
	waitFor[Connected](t, l, "connected", nil)
	closed := make(chan struct{})
	go func() {
		l.Close()
		l.Close()
		for range l.Events() {
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(meshtest.Wait):
		t.Fatalf("Close did not return, or Events was still open, %s after it was called: a host stopping its link would wait for ever", meshtest.Wait)
	}
}

func TestLinkRefusesBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"NoURL", Options{Node: "n1"}, "no NATS URL"},
		{"BadNode", Options{URLs: []string{"nats://127.0.0.1:1"}, Node: "a.b"}, `node id "a.b"`},
		{"MissingCreds", Options{URLs: []string{"nats://127.0.0.1:1"}, Node: "n1", Creds: "/nonexistent/x.creds"}, "credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(context.Background(), tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// A value behind the newest revision the link has seen of a key (what a replica that is behind
// answers, or a bucket made again) is not taken as the key's new value: the link asks again, and
// reports the next revision past the one it saw, never the older ones.
func TestLinkDoesNotTakeAValueBehindTheRevisionItHasSeen(t *testing.T) {
	b := meshtest.StartBus(t)
	var seen uint64
	for range 4 {
		seen = b.Put(names.Declarations(), "n1", decl("n1"))
	}
	l := openLink(t, b.URL(), "n1")
	if got := waitFor[DeclarationArrived](t, l, "the declaration", nil); got.Revision != seen {
		t.Fatalf("first declaration = rev %d, want %d", got.Revision, seen)
	}
	// The bucket made again: its revisions start over, behind what the link saw.
	ctx := t.Context()
	if err := b.Conn.JS.DeleteKeyValue(ctx, names.Declarations()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Conn.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: names.Declarations(), History: 10}); err != nil {
		t.Fatal(err)
	}
	// The test hears the bus's answers to the link's gets (on the inbox, as the link does): once
	// one has carried revision 1 to the link, newer ones are put. The link reads its answers in
	// order, so had it taken revision 1 it would report it before any later one.
	answers := make(chan *nats.Msg, 1024)
	sub, err := b.Conn.NC.ChanSubscribe("_INBOX.>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := b.Conn.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	rev := b.Put(names.Declarations(), "n1", decl("n1"))
	for answered := false; !answered; {
		select {
		case m := <-answers:
			answered = m.Header.Get(jetstream.SubjectHeader) == "$KV."+names.Declarations()+".n1" &&
				m.Header.Get(jetstream.SequenceHeader) == strconv.FormatUint(rev, 10)
		case <-time.After(meshtest.Wait):
			t.Fatalf("the bus did not answer the link's get with revision %d within %s", rev, meshtest.Wait)
		}
	}
	for rev <= seen {
		rev = b.Put(names.Declarations(), "n1", decl("n1"))
	}
	got := waitFor[DeclarationArrived](t, l, "a revision past the one seen", func(e DeclarationArrived) bool {
		if e.Revision <= seen {
			t.Errorf("the link reported revision %d, behind the %d it had seen", e.Revision, seen)
		}
		return e.Revision > seen
	})
	if got.Revision != rev {
		t.Errorf("declaration = rev %d, want %d", got.Revision, rev)
	}
}
