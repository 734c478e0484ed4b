package rollout

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// slowReads is a bus that hands the heartbeats over slowly, as a loaded machine does: each
// message of a consumer's Messages comes perMsg late.
type slowReads struct {
	jetstream.JetStream
	perMsg time.Duration
}

func (s slowReads) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	c, err := s.JetStream.OrderedConsumer(ctx, stream, cfg)
	return slowConsumer{c, s.perMsg}, err
}

type slowConsumer struct {
	jetstream.Consumer
	perMsg time.Duration
}

func (c slowConsumer) Messages(opts ...jetstream.PullMessagesOpt) (jetstream.MessagesContext, error) {
	m, err := c.Consumer.Messages(opts...)
	return slowMessages{m, c.perMsg}, err
}

type slowMessages struct {
	jetstream.MessagesContext
	perMsg time.Duration
}

func (m slowMessages) Next(opts ...jetstream.NextOpt) (jetstream.Msg, error) {
	time.Sleep(m.perMsg)
	return m.MessagesContext.Next(opts...)
}

// Found at 100,000 simulated nodes on a loaded machine (issue 20): reading every node's last
// heartbeat before planning took longer than the 5s bound of one bus operation, so each attempt
// was cut short and begun again from the first heartbeat — 7 minutes of retries before one
// rollout started, and with a larger fleet or a slower machine it would never start. A read is
// now cut short only when the heartbeats stop coming for that long.
func TestReadingTheFleetForLongerThanOneOperationsBoundIsNotCutShort(t *testing.T) {
	b := meshtest.StartBus(t)
	js := connect(t, b)
	const nodes = 2500 // 2ms each: 5s and more in all
	for i := range nodes {
		node := fmt.Sprintf("n%04d", i)
		hb := wire.Heartbeat{Schema: wire.HeartbeatSchema, Node: node, State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", SentAt: time.Now().UTC()}
		if _, err := js.PublishAsync(b.Names.Heartbeat(node), hb.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("the heartbeats were not stored")
	}
	c, err := New(Config{JS: slowReads{js, 2 * time.Millisecond}, Names: b.Names, Key: meshtest.ReleaseKey.Private})
	if err != nil {
		t.Fatal(err)
	}
	ctx := meshtest.Context(t, 40*time.Second)
	entries, err := c.readFleet(ctx)
	if err != nil {
		t.Fatalf("reading %d heartbeats, 2ms each: %v", nodes, err)
	}
	if len(entries) != nodes {
		t.Fatalf("read %d heartbeats, want %d", len(entries), nodes)
	}
	for _, e := range entries {
		if e.Err != nil || e.Heartbeat.Running != "v1.0.0" {
			t.Fatalf("%s: %+v", e.Node, e)
		}
	}
}
