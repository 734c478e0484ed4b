package rollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// currentKey names the newest rollout: {"id": …}.
const currentKey = "current"

func stateKey(id string) string { return "rollout." + id }

type pointer struct {
	ID string `json:"id"`
}

// errConflict is a compare-and-set that lost: someone else wrote the key since it was read.
var errConflict = errors.New("the rollout was changed by someone else")

// store is the buckets a rollout reads and writes, each call retried on transient errors.
type store struct {
	n        wire.Names
	log      *slog.Logger
	rollouts jetstream.KeyValue
	targets  jetstream.KeyValue
	w        targets.Writer // signs and writes targets, each operation retried like the rest

	mu    sync.Mutex
	lists map[string]cached // node lists written or read, by rollout id (they never change)
}

func discard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return l
}

// openStore opens the rollouts and targets buckets; targets are signed by signer (the zero
// signer for a store that only reads).
func openStore(ctx context.Context, js jetstream.JetStream, n wire.Names, signer targets.Signer, log *slog.Logger) (*store, error) {
	s := &store{n: n, log: discard(log)}
	var err error
	if s.rollouts, err = openKV(ctx, js, n.Rollouts(), s.log); err != nil {
		return nil, err
	}
	if s.targets, err = openKV(ctx, js, n.Targets(), s.log); err != nil {
		return nil, err
	}
	s.w = targets.Writer{KV: s.targets, Signer: signer, Do: func(ctx context.Context, what string, op func(context.Context) error) error {
		return retry(ctx, s.log, what, op)
	}}
	return s, nil
}

func openKV(ctx context.Context, js jetstream.JetStream, bucket string, log *slog.Logger) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := retry(ctx, log, "open "+bucket, func(ctx context.Context) (err error) {
		kv, err = js.KeyValue(ctx, bucket)
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("KV bucket %s does not exist on this bus; create the buckets with `mesh-release init`: %w", bucket, err)
	}
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// entry reads key; ok is false when it is absent or deleted.
func (s *store) entry(ctx context.Context, kv jetstream.KeyValue, key string) (e jetstream.KeyValueEntry, ok bool, err error) {
	err = retry(ctx, s.log, "read "+key, func(ctx context.Context) (err error) {
		e, err = kv.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s in %s: %w", key, kv.Bucket(), err)
	}
	return e, true, nil
}

// get reads rollout id — its head, and the chunks of its node list the head names — and the
// revision of the head, on which every write of the rollout is a compare-and-set.
func (s *store) get(ctx context.Context, id string) (State, uint64, error) {
	e, ok, err := s.entry(ctx, s.rollouts, stateKey(id))
	if err != nil {
		return State{}, 0, err
	}
	if !ok {
		return State{}, 0, fmt.Errorf("no rollout %s in %s (`mesh-release rollout status` names the current one)", text(id), s.n.Rollouts())
	}
	st, list, err := decodeHead(e.Value())
	if err == nil && list != nil {
		st, err = s.readNodes(ctx, st, *list)
	}
	if err == nil {
		st, err = check(st)
	}
	if err != nil {
		return State{}, 0, fmt.Errorf("%s in %s: %w", stateKey(id), s.n.Rollouts(), err)
	}
	return st, e.Revision(), nil
}

// current reads the pointer to the newest rollout; rev is its revision (0: absent).
func (s *store) current(ctx context.Context) (id string, rev uint64, err error) {
	e, ok, err := s.entry(ctx, s.rollouts, currentKey)
	if err != nil || !ok {
		return "", 0, err
	}
	var p pointer
	if err := json.Unmarshal(e.Value(), &p); err != nil || p.ID == "" {
		return "", 0, fmt.Errorf("%s in %s is unreadable (%q); set it with a new rollout", currentKey, s.n.Rollouts(), text(string(e.Value())))
	}
	return p.ID, e.Revision(), nil
}

// save writes v under key, created when rev is 0, else only if the key is still at rev; it
// returns the new revision, or errConflict. A write whose reply was lost and that landed is
// recognised by its bytes.
func (s *store) save(ctx context.Context, kv jetstream.KeyValue, key string, v []byte, rev uint64) (uint64, error) {
	var out uint64
	err := retry(ctx, s.log, "write "+key, func(ctx context.Context) (err error) {
		if rev == 0 {
			out, err = kv.Create(ctx, key, v)
		} else {
			out, err = kv.Update(ctx, key, v, rev)
		}
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, ok, gerr := s.entry(ctx, kv, key)
		if gerr != nil {
			return 0, gerr
		}
		if ok && bytes.Equal(e.Value(), v) {
			return e.Revision(), nil
		}
		return 0, errConflict
	}
	if err != nil {
		return 0, fmt.Errorf("write %s in %s: %w", key, kv.Bucket(), err)
	}
	return out, nil
}

// saveState writes st (its Updated set by the caller) with compare-and-set on rev: the chunks
// of its node list first if this store has not written or read them, then its head.
func (s *store) saveState(ctx context.Context, st State, rev uint64) (uint64, error) {
	list, err := s.writeNodes(ctx, st)
	if err != nil {
		return 0, err
	}
	b, err := encodeHead(st, list)
	if err != nil {
		return 0, err
	}
	return s.save(ctx, s.rollouts, stateKey(st.ID), b, rev)
}

func (s *store) savePointer(ctx context.Context, id string, rev uint64) (uint64, error) {
	b, _ := json.Marshal(pointer{ID: id})
	return s.save(ctx, s.rollouts, currentKey, b, rev)
}

// Get reads rollout id from the rollouts bucket.
func Get(ctx context.Context, js jetstream.JetStream, n wire.Names, id string) (State, error) {
	s, err := openStore(ctx, js, n, targets.Signer{}, nil)
	if err != nil {
		return State{}, err
	}
	st, _, err := s.get(ctx, id)
	return st, err
}

// Current reads the rollout "current" names; ok is false when no rollout was ever started.
func Current(ctx context.Context, js jetstream.JetStream, n wire.Names) (st State, ok bool, err error) {
	s, err := openStore(ctx, js, n, targets.Signer{}, nil)
	if err != nil {
		return State{}, false, err
	}
	id, _, err := s.current(ctx)
	if err != nil || id == "" {
		return State{}, false, err
	}
	st, _, err = s.get(ctx, id)
	return st, err == nil, err
}
