package rollout

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire/meshtest"
)

// lateReplies is the rollouts bucket on a loaded cluster: every Update lands on the server, but
// its reply comes only after delay — by then the caller may have stopped waiting (its context
// ended), and sees an error for a write that was made.
type lateReplies struct {
	jetstream.KeyValue
	delay   time.Duration
	started chan struct{} // a token each time an Update begins, when someone waits for one
}

func (k *lateReplies) Update(ctx context.Context, key string, v []byte, last uint64) (uint64, error) {
	select {
	case k.started <- struct{}{}:
	default:
	}
	select {
	case <-ctx.Done():
	case <-time.After(k.delay):
	}
	rev, err := k.KeyValue.Update(context.WithoutCancel(ctx), key, v, last)
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	return rev, err
}

// Found at 100,000 simulated nodes (issue 20): a lease renewal still in flight when the long
// operation beside it (setting a batch's targets, clearing them at the end) finished was
// cancelled with it, yet landed; the controller kept the revision before it, and its next
// write of its own rollout failed as "changed by another writer while this controller held it"
// (exit 1). The renewal's write is now let finish, so the controller knows the revision it made.
func TestALeaseRenewalInFlightWhenTheOperationEndsIsNotTakenForAnotherWriter(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 30*time.Second)
	js := connect(t, b)
	c, err := New(Config{JS: js, Names: b.Names, Key: meshtest.ReleaseKey.Private, Lease: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := testStore(t, b)
	st := planned("20261202T030000Z-v1.2.0", 10)
	rev, err := s.saveState(ctx, st, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := c.newRunner(s, st, rev)
	if err := r.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	late := &lateReplies{KeyValue: s.rollouts, delay: 200 * time.Millisecond, started: make(chan struct{})}
	s.rollouts = late
	// The operation ends just as a renewal's write has begun.
	if err := r.renewing(ctx, func(ctx context.Context) error { <-late.started; return nil }); err != nil {
		t.Fatalf("the operation: %v", err)
	}
	if err := r.write(ctx, func(st *State) { st.Current = 1 }); err != nil {
		t.Fatalf("the controller's next write of its own rollout: %v", err)
	}
	got, _, err := testStore(t, b).get(ctx, st.ID)
	if err != nil || got.Current != 1 || !c.mine(got.Holder) {
		t.Fatalf("read back batch %d held by %+v (%v); want batch 1, held by this controller", got.Current, got.Holder, err)
	}
}
