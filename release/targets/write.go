package targets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// Current is a target key as read: its revision (0 when absent or deleted), its bytes, and the
// target they hold when they parse.
type Current struct {
	Key   string
	Rev   uint64
	Value []byte
	// Target is the parsed value; zero unless Err is nil and Rev is not 0.
	Target wire.Target
	// Err says why Value is not a target (nil when the key is absent or holds a valid one).
	Err error
}

// Present reports whether the key holds a value.
func (c Current) Present() bool { return c.Rev != 0 }

// Names reports whether the key holds a readable target for version (signed or not).
func (c Current) Names(version string) bool {
	return c.Present() && c.Err == nil && c.Target.Version == version
}

// Seq is the sequence number of the value held, for numbering the next one: the target's, or
// whatever "seq" an unreadable value carries (0 when none), so that a broken value never makes
// the number go back.
func (c Current) Seq() uint64 {
	if !c.Present() {
		return 0
	}
	if c.Err == nil {
		return c.Target.Seq
	}
	var v struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(c.Value, &v)
	return v.Seq
}

// CurrentOf reads a KV entry (nil: absent) as a Current.
func CurrentOf(key string, e jetstream.KeyValueEntry) Current {
	if e == nil || e.Operation() != jetstream.KeyValuePut {
		return Current{Key: key}
	}
	c := Current{Key: key, Rev: e.Revision(), Value: e.Value()}
	c.Target, c.Err = wire.ParseTarget(c.Value)
	if c.Err != nil {
		c.Target = wire.Target{}
	}
	return c
}

// Decision is what Writer.Update does with a key: leave it, set it to a version, or delete it.
type Decision struct {
	op      op
	version string
}

type op int

const (
	opLeave op = iota
	opSet
	opDelete
)

// Leave keeps the key as it is.
func Leave() Decision { return Decision{} }

// SetTo signs version for the key, numbered after its value.
func SetTo(version string) Decision { return Decision{op: opSet, version: version} }

// Delete deletes the key (a node falls back to the fleet key).
func Delete() Decision { return Decision{op: opDelete} }

// Result is what Update did.
type Result struct {
	// Rev is the key's revision after Update: the one written, or the one left (0 when deleted
	// or absent).
	Rev uint64
	// Target is what the key holds now when it holds a readable target.
	Target  wire.Target
	Wrote   bool
	Deleted bool
}

// DefaultTries is how many times Update reads a key again after losing a compare-and-set.
const DefaultTries = 10

// ErrKeptChanging is returned when every compare-and-set of Update lost to another writer.
var ErrKeptChanging = errors.New("the key kept changing while it was being written; another writer is busy on it — try again")

// Writer writes targets into one targets bucket, each by compare-and-set.
type Writer struct {
	KV     jetstream.KeyValue
	Signer Signer
	// Do runs one bus operation (nil: once). The rollout controller passes its retry, which
	// rides out a server restart; an operation retried after its reply was lost may have landed,
	// which the next compare-and-set sees as a change, and the decision is taken again.
	Do func(ctx context.Context, what string, op func(context.Context) error) error
	// Tries bounds the compare-and-sets lost in a row (default DefaultTries).
	Tries int
}

func (w Writer) do(ctx context.Context, what string, op func(context.Context) error) error {
	if w.Do != nil {
		return w.Do(ctx, what, op)
	}
	return op(ctx)
}

// Read reads key.
func (w Writer) Read(ctx context.Context, key string) (Current, error) {
	var e jetstream.KeyValueEntry
	err := w.do(ctx, "read "+key, func(ctx context.Context) (err error) {
		e, err = w.KV.Get(ctx, key)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Current{Key: key}, nil
	}
	if err != nil {
		return Current{}, fmt.Errorf("read %s in %s: %w", key, w.KV.Bucket(), err)
	}
	return CurrentOf(key, e), nil
}

// Update reads key (or starts from cur, a read the caller made already), asks decide what to do
// with it, and does it by compare-and-set against the value decide saw: a target signed with
// w.Signer and numbered after that value, or a deletion. When another writer changed the key in
// between, it reads the key again and asks decide again, up to Tries times (ErrKeptChanging).
func (w Writer) Update(ctx context.Context, key string, cur *Current, decide func(Current) Decision) (Result, error) {
	w = w.withDefaults()
	var c Current
	if cur != nil {
		c = *cur
		c.Key = key
	}
	for i := 0; i < w.Tries; i++ {
		if cur == nil || i > 0 {
			var err error
			if c, err = w.Read(ctx, key); err != nil {
				return Result{}, err
			}
		}
		d := decide(c)
		var err error
		var res Result
		switch d.op {
		case opLeave:
			return Result{Rev: c.Rev, Target: c.Target}, nil
		case opSet:
			res, err = w.set(ctx, c, d.version)
		case opDelete:
			if !c.Present() {
				return Result{Deleted: true}, nil
			}
			res, err = w.delete(ctx, c)
		}
		if !Conflict(err) {
			return res, err
		}
	}
	return Result{}, fmt.Errorf("set %s in %s: %w", key, w.KV.Bucket(), ErrKeptChanging)
}

func (w Writer) set(ctx context.Context, c Current, version string) (Result, error) {
	// A target signed again for the same version stays urgent if it was (the keeper re-signs
	// what it finds); a new version is urgent only if this writer's signer says so.
	urgent := w.Signer.Urgent || (c.Present() && c.Err == nil && c.Target.Version == version && c.Target.Urgent)
	t, err := w.Signer.sign(c.Key, version, c.Seq(), urgent)
	if err != nil {
		return Result{}, fmt.Errorf("sign the target %s for %s: %w", version, c.Key, err)
	}
	val := t.Marshal()
	var rev uint64
	err = w.do(ctx, "set "+c.Key, func(ctx context.Context) (err error) {
		if c.Present() {
			rev, err = w.KV.Update(ctx, c.Key, val, c.Rev)
		} else {
			rev, err = w.KV.Create(ctx, c.Key, val) // also over a deleted key
		}
		return err
	})
	if Conflict(err) {
		return Result{}, err
	}
	if err != nil {
		return Result{}, fmt.Errorf("set %s in %s: %w", c.Key, w.KV.Bucket(), err)
	}
	return Result{Rev: rev, Target: t, Wrote: true}, nil
}

func (w Writer) delete(ctx context.Context, c Current) (Result, error) {
	err := w.do(ctx, "delete "+c.Key, func(ctx context.Context) error {
		return w.KV.Delete(ctx, c.Key, jetstream.LastRevision(c.Rev))
	})
	if Conflict(err) {
		return Result{}, err
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return Result{}, fmt.Errorf("delete %s in %s: %w", c.Key, w.KV.Bucket(), err)
	}
	return Result{Deleted: true}, nil
}

// Conflict reports whether err is a compare-and-set that lost: the key changed since it was
// read (a single server says 10071, a replicated stream 10164).
func Conflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// withDefaults returns w with every zero (or negative) setting at its default (decision 0041).
func (w Writer) withDefaults() Writer {
	if w.Tries <= 0 {
		w.Tries = DefaultTries
	}
	return w
}
