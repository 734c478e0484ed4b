package targets

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// Windows and the withdrawal list expire as targets do (decision 0045: a list that never
// expires lets a freeze go unnoticed). The keeper signs them again, too, when they are its key's
// and less than half of the period they were signed for is left: the same content, numbered
// after, valid for that period again from now. The period is read from the document: from its
// seq (the Unix milliseconds it was signed at, as every writer numbers it) to its expiry; a seq
// that is no such time gives the keeper's TTL. A list without an expiry (written for hosts
// that do not read one) is left as it is.

// window is a window key as the keeper last saw it.
type window struct {
	rev uint64
	w   wire.Window
	ok  bool // it parses (and so may be signed again)
}

// isWindowKey reports whether a targets key holds a window, not a target.
func isWindowKey(key string) bool { return strings.HasPrefix(key, "window.") }

// windowOf is a window key's entry as read.
func windowOf(e jetstream.KeyValueEntry) window {
	w, err := wire.ParseWindow(e.Value())
	return window{rev: e.Revision(), w: w, ok: err == nil}
}

// period is how long a document signed at seq (Unix milliseconds) to expires was valid for;
// fallback when seq is no time before expires.
func period(seq uint64, expires time.Time, fallback time.Duration) time.Duration {
	if seq > uint64(expires.UnixMilli()) || expires.IsZero() {
		return fallback
	}
	p := expires.Sub(time.UnixMilli(int64(seq))).Round(time.Second)
	if p < time.Second || p > MaxTTL {
		return fallback
	}
	return p
}

// dueDoc reports whether a document signed at seq expiring at expires has less than half of its
// period left at now, and that period.
func (k *keeper) dueDoc(seq uint64, expires, now time.Time) (bool, time.Duration) {
	p := period(seq, expires, k.signer.TTL)
	return expires.Sub(now) < p/2, p
}

// legacyOwn is a trust holding the keeper's key alone: a document is the keeper's to sign again
// when one of its signatures is by that key (decision 0011's one-key check).
func (k *keeper) legacyOwn() wire.Trust {
	return wire.LegacyTrust(nil, []ed25519.PublicKey{k.signer.Public()})
}

// passWindows signs again each window of the keeper's key that is due.
func (k *keeper) passWindows(ctx context.Context, kv jetstream.KeyValue, now time.Time) {
	for key, cur := range k.windows {
		if ctx.Err() != nil {
			return
		}
		if !cur.ok || cur.w.Verify(key, k.legacyOwn(), now) != nil {
			continue
		}
		due, p := k.dueDoc(cur.w.Seq, cur.w.ExpiresAt(), now)
		if !due {
			continue
		}
		next, err := k.renewWindow(key, cur.w, now, p)
		if err == nil {
			var rev uint64
			rev, err = kv.Update(ctx, key, next.Marshal(), cur.rev)
			if err == nil {
				k.windows[key] = window{rev: rev, w: next, ok: true}
				k.log.Info("signed a window again before it expires", "key", key, "seq", next.Seq, "expires", next.Expires)
				continue
			}
		}
		if Conflict(err) {
			continue // changed meanwhile: the watch brings the new value, judged on the next pass
		}
		k.log.Warn("could not sign a window again; trying again on the next pass", "key", key, "err", err)
	}
}

// renewWindow is w again for key, numbered after it, valid for p from now, signed with every
// key of the keeper.
func (k *keeper) renewWindow(key string, w wire.Window, now time.Time, p time.Duration) (wire.Window, error) {
	if w.Seq >= wire.MaxSeq {
		return wire.Window{}, errors.New("its seq is the largest allowed")
	}
	next := w
	next.SignatureList = wire.SignatureList{}
	next.Seq = max(w.Seq+1, uint64(max(now.UnixMilli(), 0)))
	next.Expires = now.Add(p).UTC().Truncate(time.Second).Format(time.RFC3339)
	if err := next.Sign(key, k.signer.Key); err != nil {
		return wire.Window{}, err
	}
	for _, more := range k.signer.More {
		if err := next.AddSignature(key, more); err != nil {
			return wire.Window{}, err
		}
	}
	return next, nil
}

// passList signs the withdrawal list again when it is the keeper's key's, expires, and is due.
func (k *keeper) passList(ctx context.Context, now time.Time) {
	if k.lists == nil {
		return
	}
	list, rev, err := readList(ctx, k.lists)
	if err != nil {
		if k.listWarned != rev {
			k.listWarned = rev
			k.log.Warn("could not read the withdrawal list to sign it again", "err", err)
		}
		return
	}
	if rev == 0 || list.Expires == "" || list.Verify(k.legacyOwn(), now) != nil {
		return
	}
	due, p := k.dueDoc(list.Seq, list.ExpiresAt(), now)
	if !due {
		return
	}
	next, err := RenewList(list, now, p, k.signer)
	if err == nil {
		_, err = k.lists.Update(ctx, wire.WithdrawalsKey, next.Marshal(), rev)
	}
	switch {
	case err == nil:
		k.log.Info("signed the withdrawal list again before it expires", "seq", next.Seq, "expires", next.Expires, "withdrawn", len(next.Withdrawn))
	case Conflict(err):
		// a withdrawal landed meanwhile: the next pass judges the new list
	default:
		k.log.Warn("could not sign the withdrawal list again; trying again on the next pass", "err", err)
	}
}

// RenewList is list's withdrawals again, numbered after it, valid for ttl from now, signed with
// every key of s (wire.Withdrawals.Renew, then a signature by each further key).
func RenewList(list wire.Withdrawals, now time.Time, ttl time.Duration, s Signer) (wire.Withdrawals, error) {
	next, err := list.Renew(now, ttl, s.Key)
	if err != nil {
		return wire.Withdrawals{}, err
	}
	for _, more := range s.More {
		if err := next.AddSignature(more); err != nil {
			return wire.Withdrawals{}, err
		}
	}
	return next, nil
}

// passPlan signs the rollout plan again when it is the keeper's key's and due: a halted
// rollout's plan holds the batches done for as long as it is the plan on the bus, and a node
// holding an expired plan takes nothing new from it.
func (k *keeper) passPlan(ctx context.Context) {
	if k.plans == nil {
		return
	}
	e, err := k.plans.Get(ctx, wire.PlanKey)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) && k.planWarned != 1 {
			k.planWarned = 1
			k.log.Warn("could not read the rollout plan to sign it again", "err", err)
		}
		return
	}
	p, err := wire.ParsePlan(e.Value())
	if err != nil || !k.signer.SignedPlan(p) || !k.signer.PlanDue(p) {
		return
	}
	if err := k.signer.SignPlan(&p, p.Seq); err != nil {
		k.log.Warn("could not sign the rollout plan again", "err", err)
		return
	}
	_, err = k.plans.Update(ctx, wire.PlanKey, p.Marshal(), e.Revision())
	switch {
	case err == nil:
		k.log.Info("signed the rollout plan again before it expires", "rollout", p.Rollout, "seq", p.Seq, "expires", p.Expires)
	case Conflict(err):
		// the controller wrote the plan meanwhile: the next pass judges the new one
	default:
		k.log.Warn("could not sign the rollout plan again; trying again on the next pass", "err", err)
	}
}
