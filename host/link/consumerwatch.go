package link

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// watchOnceByConsumer follows k's keys, each on its own consumer, until ctx ends or the watch
// fails: the keys' current values (none, a value, or a delete marker), the end-of-initial-values
// mark, then every change. Two keys' changes arrive on two consumers, in no order between them:
// a fold followed so may report the gap between a fleet key put and a node key deleted after it
// (keyFold), until the node's renewed credentials bring the watch without consumers.
func (l *Link) watchOnceByConsumer(ctx context.Context, k watchedKeys, healthy func()) error {
	done := make(chan struct{})
	defer close(done)
	msgs := make(chan jetstream.Msg, 16)
	failed := make(chan error, 1)
	// initial are the keys whose initial values are still arriving; delivered, each key's
	// consumer's last delivery.
	initial := map[string]bool{}
	delivered := map[string]uint64{}
	for _, key := range k.keys {
		r := keyRef{k.bucket, key}
		pending, cc, err := l.consumeKey(ctx, r, msgs, failed, done)
		if err != nil {
			return err
		}
		defer cc.Stop() // unsubscribes only; the server removes the consumer consumerIdle later
		if pending {
			initial[key] = true
		}
	}
	healthy()
	if k.start != nil {
		k.start()
	}
	if len(initial) == 0 && !k.handle(ctx, nil) {
		return ctx.Err()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return fmt.Errorf("the watch of %s ended: %w", k, err)
		case m := <-msgs:
			e, md, err := consumedEntry(k, m, delivered)
			if err != nil {
				return err
			}
			if !l.take(ctx, k, e) {
				return ctx.Err()
			}
			if md.NumPending == 0 {
				delete(initial, e.Key)
			}
			if len(initial) > 0 {
				continue // the keys' initial values are handed on together
			}
			if !k.handle(ctx, nil) {
				return ctx.Err()
			}
		}
	}
}

// consumeKey creates r's consumer and starts receiving from it onto msgs; pending says the key
// has an initial value to deliver.
func (l *Link) consumeKey(ctx context.Context, r keyRef, msgs chan<- jetstream.Msg, failed chan<- error, done <-chan struct{}) (bool, jetstream.ConsumeContext, error) {
	cons, err := l.js.CreatePushConsumer(ctx, kvStream(r.bucket), jetstream.ConsumerConfig{
		DeliverSubject:    l.nc.NewInbox(), // below the node's inbox prefix, the only place it may receive
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		FilterSubject:     r.subject(),
		AckPolicy:         jetstream.AckNonePolicy,
		FlowControl:       true,
		IdleHeartbeat:     watchHeartbeat,
		InactiveThreshold: consumerIdle,
		MemoryStorage:     true,
		Replicas:          1,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return false, nil, fmt.Errorf("KV bucket %s does not exist yet (mesh-release init creates it): %w", r.bucket, err)
		}
		return false, nil, fmt.Errorf("create a consumer on %s: %w", r.subject(), err)
	}
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
		return false, nil, fmt.Errorf("receive from the consumer on %s: %w", r.subject(), err)
	}
	return cons.CachedInfo().NumPending > 0, cc, nil
}

// consumedEntry is the key value m carries; a delivery out of sequence on its key's consumer (a
// slow consumer dropped one) ends the watch, which starts again from the keys' latest values.
func consumedEntry(k watchedKeys, m jetstream.Msg, delivered map[string]uint64) (*keyEntry, *jetstream.MsgMetadata, error) {
	key := strings.TrimPrefix(m.Subject(), kvSubject(k.bucket, ""))
	md, err := m.Metadata()
	if err != nil {
		return nil, nil, fmt.Errorf("a message on %s without JetStream metadata: %w", kvSubject(k.bucket, key), err)
	}
	if md.Sequence.Consumer != delivered[key]+1 {
		return nil, nil, fmt.Errorf("the watch of %s missed a change (delivery %d after %d); watching it again", kvSubject(k.bucket, key), md.Sequence.Consumer, delivered[key])
	}
	delivered[key] = md.Sequence.Consumer
	e := &keyEntry{Key: key, Revision: md.Sequence.Stream, Deleted: isDeleteMarker(m.Headers())}
	if !e.Deleted {
		e.Value = m.Data()
	}
	return e, md, nil
}
