package targets

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/wire"
)

// Keep keeps the targets signed with key from expiring, until ctx ends: it follows every key
// of the targets bucket (a KV watch, pushed by the server) and re-signs, by compare-and-set,
// each target that verifies with key and has less than half of ttl left — the same version,
// numbered after it, valid for ttl from now. Windows, the withdrawal list and the rollout plan
// (decision 0047) of key are signed again the same way, each for the period it was signed for (keepdocs.go). A target signed by another key, or not signed, is
// left alone (it is that key holder's to keep); a key changed by someone else while it was being
// re-signed is left to its new value. Any number of Keeps may run on one bus (`serve --key`,
// each rollout controller): the compare-and-set makes one of them win each time.
//
// It returns ctx's error when ctx ends, or at once when the key or ttl is unusable or the
// targets bucket does not exist. A bus that goes away is waited for.
func Keep(ctx context.Context, js jetstream.JetStream, names wire.Names, key ed25519.PrivateKey, ttl time.Duration, log *slog.Logger) error {
	s, err := NewSigner(key, ttl)
	if err != nil {
		return err
	}
	return KeepSigned(ctx, js, names, s, log)
}

// KeepSigned is Keep with s: its Key decides what is the keeper's to sign again, and each
// document is signed again by Key and every key of More (a targets threshold of two or more).
func KeepSigned(ctx context.Context, js jetstream.JetStream, names wire.Names, s Signer, log *slog.Logger) error {
	if err := s.Check(); err != nil {
		return err
	}
	if err := ValidTTL(s.TTL); err != nil {
		return err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	k := &keeper{signer: s, log: logkey.Sub(log, "target-keeper"), names: names}
	return k.run(ctx, js)
}

// keeper is one Keep.
type keeper struct {
	signer Signer
	log    *slog.Logger
	names  wire.Names
	// check is how often the targets are looked over (default: a twentieth of the TTL, between
	// 50ms and a minute).
	check time.Duration

	keys    map[string]Current
	windows map[string]window  // the window keys
	lists   jetstream.KeyValue // the withdrawals bucket; nil on a bus without it
	plans   jetstream.KeyValue // the rollouts bucket, holding the rollout plan; nil on a bus without it
	// listWarned is the revision of the list last said unreadable, so it is said once.
	listWarned uint64
	planWarned int                  // 1 once the plan was said unreadable
	retryAt    map[string]time.Time // a key whose re-signing failed, and when to try again
	foreign    map[string]uint64    // keys reported as not ours, at that revision (said once)
	// signed is, per key, whether its target at a revision verifies with this keeper's key:
	// each pass looks over every key, and checking an ed25519 signature each time was a third
	// of a rollout controller's CPU at 100,000 nodes. A revision's value never changes.
	signed map[string]signedAt
	// verify checks a target's signature (default: the signer's); tests count the checks.
	verify func(kvKey string, t wire.Target) bool
}

// signedAt is whether a key's target at rev verifies with the keeper's key.
type signedAt struct {
	rev uint64
	ok  bool
}

func (k *keeper) run(ctx context.Context, js jetstream.JetStream) error {
	if k.check <= 0 {
		k.check = min(max(k.signer.TTL/20, 50*time.Millisecond), time.Minute)
	}
	kv, err := k.open(ctx, js)
	if err != nil {
		return err
	}
	w := Writer{KV: kv, Signer: k.signer}
	if lists, err := js.KeyValue(ctx, k.names.Withdrawals()); err == nil {
		k.lists = lists // a bus set up before withdrawals has no list to keep
	}
	if plans, err := js.KeyValue(ctx, k.names.Rollouts()); err == nil {
		k.plans = plans
	}
	k.retryAt = make(map[string]time.Time)
	k.foreign = make(map[string]uint64)
	k.signed = make(map[string]signedAt)
	for ctx.Err() == nil {
		if err := k.follow(ctx, js.Conn(), w); err != nil && ctx.Err() == nil {
			k.log.Warn("the targets watch stopped; establishing it again", "err", err)
			wait(ctx, time.Second)
		}
	}
	return ctx.Err()
}

// open opens the targets bucket, waiting while the bus is away.
func (k *keeper) open(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := js.KeyValue(octx, k.names.Targets())
		cancel()
		switch {
		case err == nil:
			return kv, nil
		case errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("KV bucket %s does not exist on this bus; create the buckets with `mesh-release init`: %w", k.names.Targets(), err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		k.log.Warn("could not open the targets bucket; trying again", "err", err)
		wait(ctx, time.Second)
	}
}

// follow runs one watch of the whole bucket until it fails, the connection reconnects (a watch
// does not always survive a server restart) or ctx ends.
func (k *keeper) follow(ctx context.Context, nc *nats.Conn, w Writer) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reconnects := nc.Stats().Reconnects
	kw, err := w.KV.WatchAll(wctx)
	if err != nil {
		return err
	}
	defer func() { _ = kw.Stop() }()
	k.keys = make(map[string]Current)
	k.windows = make(map[string]window)
	k.signed = make(map[string]signedAt) // keys deleted while the watch was down go with it
	ready := false
	tick := time.NewTicker(k.check)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return errors.New("the watch ended")
			}
			if e == nil {
				ready = true
				k.pass(ctx, w)
				continue
			}
			if isWindowKey(e.Key()) {
				k.noteWindow(e)
				continue
			}
			if have, ok := k.keys[e.Key()]; ok && have.Rev >= e.Revision() {
				continue // what this keeper wrote itself, already noted
			}
			if e.Operation() == jetstream.KeyValuePut {
				k.keys[e.Key()] = CurrentOf(e.Key(), e)
			} else {
				delete(k.keys, e.Key())
				delete(k.signed, e.Key())
			}
		case <-tick.C:
			if nc.Stats().Reconnects != reconnects {
				return nil // establish the watch again: it may be gone without a word
			}
			if ready {
				k.pass(ctx, w)
			}
		}
	}
}

// noteWindow records a window key's change.
func (k *keeper) noteWindow(e jetstream.KeyValueEntry) {
	if have, ok := k.windows[e.Key()]; ok && have.rev >= e.Revision() {
		return // what this keeper wrote itself, already noted
	}
	if e.Operation() == jetstream.KeyValuePut {
		k.windows[e.Key()] = windowOf(e)
	} else {
		delete(k.windows, e.Key())
	}
}

// pass re-signs the windows, the withdrawal list and the rollout plan that are due, then every
// target that is due, in key order.
func (k *keeper) pass(ctx context.Context, w Writer) {
	now := time.Now()
	k.passWindows(ctx, w.KV, now)
	k.passList(ctx, now)
	k.passPlan(ctx)
	var due []string
	for key, c := range k.keys {
		if at, ok := k.retryAt[key]; ok && now.Before(at) {
			continue
		}
		if k.due(c) {
			due = append(due, key)
		}
	}
	if len(due) == 0 {
		return
	}
	sort.Strings(due)
	resigned := 0
	for _, key := range due {
		if ctx.Err() != nil {
			return
		}
		c := k.keys[key]
		res, err := w.Update(ctx, key, &c, func(c Current) Decision {
			if !k.due(c) {
				return Leave() // changed meanwhile: someone else signed it again, or set another version
			}
			return SetTo(c.Target.Version)
		})
		if err != nil {
			k.log.Warn("could not sign a target again; trying again shortly", "key", key, "err", err)
			k.retryAt[key] = now.Add(max(k.check, 5*time.Second))
			continue
		}
		delete(k.retryAt, key)
		if res.Wrote {
			resigned++
			// The watch brings the new value too; until then this pass must not sign it again.
			k.keys[key] = Current{Key: key, Rev: res.Rev, Value: res.Target.Marshal(), Target: res.Target}
			k.log.Debug("signed a target again", "key", key, "version", res.Target.Version, "seq", res.Target.Seq, "expires", res.Target.Expires)
		}
	}
	if resigned > 0 {
		k.log.Info("signed targets again before they expire", "targets", resigned, "ttl", k.signer.TTL)
	}
}

// due reports whether c is a target of this key with less than half its TTL left. A target of
// another key is said once per revision.
func (k *keeper) due(c Current) bool {
	if !c.Present() || c.Err != nil {
		return false
	}
	if !k.ours(c) {
		if k.foreign[c.Key] != c.Rev && c.Target.KeyID != "" {
			k.foreign[c.Key] = c.Rev
			k.log.Info("a target signed by another key is left to that key's holder", "key", c.Key, "key_id", c.Target.KeyID, "expires", c.Target.Expires)
		}
		return false
	}
	return k.signer.Due(c.Target)
}

// ours reports whether c's target verifies with the keeper's key, checking each revision of
// a key once.
func (k *keeper) ours(c Current) bool {
	if at, ok := k.signed[c.Key]; ok && at.rev == c.Rev && c.Rev != 0 {
		return at.ok
	}
	verify := k.verify
	if verify == nil {
		verify = k.signer.Signed
	}
	ok := verify(c.Key, c.Target)
	if k.signed == nil {
		k.signed = make(map[string]signedAt)
	}
	k.signed[c.Key] = signedAt{rev: c.Rev, ok: ok}
	return ok
}

// wait waits d or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
