package targets

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// ErrUntrustedList is wrapped when the withdrawal list on the bus does not verify with the key
// adding to it nor with a key it was told to trust: signing it would vouch for entries nobody
// checked.
var ErrUntrustedList = errors.New("the withdrawal list on the bus is not signed by this key nor by a key given to trust")

// withdrawTries bounds the compare-and-sets a withdrawal loses in a row to other withdrawals.
const withdrawTries = 50

// ReadWithdrawals reads the withdrawal list and its revision: the zero list and revision 0 when
// none was ever written. The list is parsed (its fields checked), not verified: hosts verify it
// with the keys they trust; the release side shows it.
func ReadWithdrawals(ctx context.Context, js jetstream.JetStream, names wire.Names) (wire.Withdrawals, uint64, error) {
	kv, err := withdrawalsKV(ctx, js, names)
	if err != nil {
		return wire.Withdrawals{}, 0, err
	}
	return readList(ctx, kv)
}

func withdrawalsKV(ctx context.Context, js jetstream.JetStream, names wire.Names) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, names.Withdrawals())
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("KV bucket %s does not exist on this bus; create it with `mesh-release init` (it adds what is missing): %w", names.Withdrawals(), err)
	}
	if err != nil {
		return nil, fmt.Errorf("KV bucket %s: %w", names.Withdrawals(), err)
	}
	return kv, nil
}

func readList(ctx context.Context, kv jetstream.KeyValue) (wire.Withdrawals, uint64, error) {
	e, err := kv.Get(ctx, wire.WithdrawalsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return wire.Withdrawals{}, 0, nil
	}
	if err != nil {
		return wire.Withdrawals{}, 0, fmt.Errorf("read %s in %s: %w", wire.WithdrawalsKey, kv.Bucket(), err)
	}
	w, err := wire.ParseWithdrawals(e.Value())
	if err != nil {
		return wire.Withdrawals{}, e.Revision(), fmt.Errorf("%s in %s (revision %d) is unreadable: %w", wire.WithdrawalsKey, kv.Bucket(), e.Revision(), err)
	}
	return w, e.Revision(), nil
}

// Withdrawal is what Withdraw did.
type Withdrawal struct {
	// List is the list on the bus afterwards, Rev its revision.
	List wire.Withdrawals
	Rev  uint64
	// Entry is the version's entry in it.
	Entry wire.Withdrawn
	// Already is true when the version was withdrawn before: nothing was written.
	Already bool
}

// Withdraw adds version, withdrawn for reason, to the withdrawal list, signed with key, by
// compare-and-set: a withdrawal that loses to another one reads the list again and adds its
// entry to the new list, so concurrent withdrawals all land. A version already on the list is
// not added again (Already). The list already on the bus must verify with key or with one of
// trusted (ErrUntrustedList), since the new list signs every entry it keeps.
func Withdraw(ctx context.Context, js jetstream.JetStream, names wire.Names, version, reason string, key ed25519.PrivateKey, trusted []ed25519.PublicKey) (Withdrawal, error) {
	return WithdrawSigned(ctx, js, names, version, reason, ListSigning{Key: key}, trusted)
}

// ListSigning is how a withdrawal list is signed: by Key, then by each of More (a targets
// threshold of two or more, decision 0045), valid for TTL from now (0: it never expires, for a
// fleet with hosts from before roots, which refuse a list that carries an expiry).
type ListSigning struct {
	Key  ed25519.PrivateKey
	More []ed25519.PrivateKey
	TTL  time.Duration
}

// sign signs w with every key.
func (l ListSigning) sign(w *wire.Withdrawals) error {
	if err := w.Sign(l.Key); err != nil {
		return err
	}
	for _, k := range l.More {
		if err := w.AddSignature(k); err != nil {
			return err
		}
	}
	return nil
}

// WithdrawSigned is Withdraw signing the new list as l says.
func WithdrawSigned(ctx context.Context, js jetstream.JetStream, names wire.Names, version, reason string, l ListSigning, trusted []ed25519.PublicKey) (Withdrawal, error) {
	key := l.Key
	if len(key) != ed25519.PrivateKeySize {
		return Withdrawal{}, fmt.Errorf("--key: %w", ErrNoKey)
	}
	if !wire.ValidVersion(version) {
		return Withdrawal{}, fmt.Errorf("version %q is not %s", text.Bound(version), wire.VersionRule)
	}
	kv, err := withdrawalsKV(ctx, js, names)
	if err != nil {
		return Withdrawal{}, err
	}
	keys := append([]ed25519.PublicKey{key.Public().(ed25519.PublicKey)}, trusted...)
	for range withdrawTries {
		prev, rev, err := readList(ctx, kv)
		if err != nil {
			return Withdrawal{}, fmt.Errorf("%w; a list that cannot be read cannot be added to (inspect it with `nats kv get %s %s`)", err, kv.Bucket(), wire.WithdrawalsKey)
		}
		if e, ok := prev.Has(version); ok {
			return Withdrawal{List: prev, Rev: rev, Entry: e, Already: true}, nil
		}
		if rev != 0 {
			if err := prev.Verify(wire.LegacyTrust(nil, keys), time.Now()); err != nil {
				return Withdrawal{}, fmt.Errorf("%w (%w): check its entries, then give the public key that signed it with --trust", ErrUntrustedList, err)
			}
		}
		next, err := prev.WithdrawFor(version, reason, time.Now(), l.TTL, key)
		if err == nil && len(l.More) > 0 {
			err = l.sign(&next)
		}
		if err != nil {
			return Withdrawal{}, err
		}
		b := next.Marshal()
		if len(b) > wire.MaxWithdrawalsBytes {
			return Withdrawal{}, fmt.Errorf("withdraw %s: the list would be %d bytes, over the %d it may hold", version, len(b), wire.MaxWithdrawalsBytes)
		}
		var newRev uint64
		if rev == 0 {
			newRev, err = kv.Create(ctx, wire.WithdrawalsKey, b)
		} else {
			newRev, err = kv.Update(ctx, wire.WithdrawalsKey, b, rev)
		}
		if Conflict(err) {
			continue // another withdrawal landed first: add to it
		}
		if err != nil {
			return Withdrawal{}, fmt.Errorf("write %s in %s: %w", wire.WithdrawalsKey, kv.Bucket(), err)
		}
		e, _ := next.Has(version)
		return Withdrawal{List: next, Rev: newRev, Entry: e}, nil
	}
	return Withdrawal{}, fmt.Errorf("withdraw %s: %w", version, ErrKeptChanging)
}

// ErrWithdrawn is wrapped when a version to be targeted or rolled out is withdrawn.
var ErrWithdrawn = errors.New("withdrawn")

// CheckNotWithdrawn returns an error wrapping ErrWithdrawn, saying when and why, if version is
// on the withdrawal list: hosts refuse it, and a withdrawal is never undone. A bus without the
// withdrawals bucket (set up before withdrawals) has withdrawn nothing.
func CheckNotWithdrawn(ctx context.Context, js jetstream.JetStream, names wire.Names, version string) error {
	list, _, err := ReadWithdrawals(ctx, js, names)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if e, ok := list.Has(version); ok {
		return fmt.Errorf("%s is %w (%s): hosts refuse it, and a withdrawal is never undone; publish a fixed version", version, ErrWithdrawn, Describe(e))
	}
	return nil
}

// Describe is one withdrawal for a person: `at 2026-11-29T10:42:00Z: "crashes on arm64"`.
func Describe(e wire.Withdrawn) string {
	if e.Reason == "" {
		return "at " + e.At
	}
	return fmt.Sprintf("at %s: %q", e.At, e.Reason)
}

// RenewSigned signs the withdrawal list on the bus again as l says — the same withdrawals, a
// higher seq, valid for l.TTL from now — by compare-and-set: what a new target key does after a
// rotation, so nodes keep a list signed by a key their root names. The list must verify with
// l.Key or one of trusted (ErrUntrustedList). A bus without a list has nothing to sign (Rev 0).
func RenewSigned(ctx context.Context, js jetstream.JetStream, names wire.Names, l ListSigning, trusted []ed25519.PublicKey) (Withdrawal, error) {
	if len(l.Key) != ed25519.PrivateKeySize {
		return Withdrawal{}, fmt.Errorf("--key: %w", ErrNoKey)
	}
	kv, err := withdrawalsKV(ctx, js, names)
	if err != nil {
		return Withdrawal{}, err
	}
	keys := append([]ed25519.PublicKey{l.Key.Public().(ed25519.PublicKey)}, trusted...)
	for range withdrawTries {
		prev, rev, err := readList(ctx, kv)
		if err != nil || rev == 0 {
			return Withdrawal{List: prev, Rev: rev}, err
		}
		if err := prev.Verify(wire.LegacyTrust(nil, keys), time.Now()); err != nil {
			return Withdrawal{}, fmt.Errorf("%w (%w): check its entries, then give the public key that signed it with --trust", ErrUntrustedList, err)
		}
		var next wire.Withdrawals
		if l.TTL > 0 {
			next, err = prev.Renew(time.Now(), l.TTL, l.Key)
		} else {
			next = wire.Withdrawals{Seq: max(prev.Seq+1, uint64(max(time.Now().UnixMilli(), 0))), Withdrawn: prev.Withdrawn}
			err = next.Sign(l.Key)
		}
		if err == nil && len(l.More) > 0 {
			err = l.sign(&next)
		}
		if err != nil {
			return Withdrawal{}, err
		}
		newRev, err := kv.Update(ctx, wire.WithdrawalsKey, next.Marshal(), rev)
		if Conflict(err) {
			continue
		}
		if err != nil {
			return Withdrawal{}, fmt.Errorf("write %s in %s: %w", wire.WithdrawalsKey, kv.Bucket(), err)
		}
		return Withdrawal{List: next, Rev: newRev}, nil
	}
	return Withdrawal{}, fmt.Errorf("sign the withdrawal list again: %w", ErrKeptChanging)
}
