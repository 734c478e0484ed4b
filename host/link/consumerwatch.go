package link

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The watch of a node whose credentials predate decision 0022 (credentials.go): its user may
// create a consumer filtered to one of its own keys
// ($JS.API.CONSUMER.CREATE.<stream>.*.<filter>) but neither subscribe to the key's subject nor
// get it directly, so each key it follows has its own push consumer filtered to exactly that
// key's subject, as before 0022. The user may not delete one: the server removes it
// consumerIdle after its subscription ends.
const (
	// consumerIdle is how long the server keeps a watch's consumer once nobody receives from it.
	consumerIdle = 30 * time.Second
	// watchHeartbeat is the consumer's idle heartbeat; two missed end the watch, which starts
	// again.
	watchHeartbeat = 5 * time.Second
)

// watchOnceByConsumer follows k on one consumer until ctx ends or the watch fails: the key's
// current value (none, a value, or a delete marker), the end-of-initial-values mark, then every
// change.
func (l *Link) watchOnceByConsumer(ctx context.Context, k watchedKey, healthy func()) error {
	cons, err := l.js.CreatePushConsumer(ctx, kvStream(k.bucket), jetstream.ConsumerConfig{
		DeliverSubject:    l.nc.NewInbox(), // below the node's inbox prefix, the only place it may receive
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     kvSubject(k.bucket, k.key),
		AckPolicy:         jetstream.AckNonePolicy,
		FlowControl:       true,
		IdleHeartbeat:     watchHeartbeat,
		InactiveThreshold: consumerIdle,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("KV bucket %s does not exist yet (mesh-release init creates it): %w", k.bucket, err)
		}
		return fmt.Errorf("create a consumer on %s: %w", kvSubject(k.bucket, k.key), err)
	}
	done := make(chan struct{})
	defer close(done)
	msgs := make(chan jetstream.Msg, 16)
	failed := make(chan error, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-done:
		}
	}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) {
			select {
			case failed <- err:
			default:
			}
		}
	}))
	if err != nil {
		return fmt.Errorf("receive from the consumer on %s: %w", kvSubject(k.bucket, k.key), err)
	}
	defer cc.Stop() // unsubscribes only; the server removes the consumer consumerIdle later
	healthy()
	if k.start != nil {
		k.start()
	}
	initial := cons.CachedInfo().NumPending > 0
	if !initial && !k.handle(ctx, nil) {
		return ctx.Err()
	}
	var delivered uint64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return fmt.Errorf("the watch of %s ended: %w", kvSubject(k.bucket, k.key), err)
		case m := <-msgs:
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("a message on %s without JetStream metadata: %w", kvSubject(k.bucket, k.key), err)
			}
			if md.Sequence.Consumer != delivered+1 {
				// A slow consumer dropped a message: start again from the key's latest value.
				return fmt.Errorf("the watch of %s missed a change (delivery %d after %d); watching it again", kvSubject(k.bucket, k.key), md.Sequence.Consumer, delivered)
			}
			delivered = md.Sequence.Consumer
			e := &keyEntry{Key: k.key, Revision: md.Sequence.Stream, Deleted: isDeleteMarker(m.Headers())}
			if !e.Deleted {
				e.Value = m.Data()
			}
			if !l.take(ctx, k, e) {
				return ctx.Err()
			}
			if initial && md.NumPending == 0 {
				initial = false
				if !k.handle(ctx, nil) {
					return ctx.Err()
				}
			}
		}
	}
}
