package trustroot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// IsRootKey reports whether key is a releases bucket key holding a root (root.<n>), and n.
func IsRootKey(key string) (uint64, bool) {
	s, ok := strings.CutPrefix(key, "root.")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || wire.RootKey(n) != key {
		return 0, false
	}
	return n, true
}

// Chain is the roots on the bus as a node walks them: root.1, root.2, … each verified as the
// next (wire.Trust.Advance; root v1 by a threshold of its own root keys), oldest first, and the
// root.<n> the walk stopped at because it did not verify, if one did.
type Chain struct {
	Roots   []wire.Root
	Refused *Refused
	raw     [][]byte // the bytes on the bus of each of Roots
}

// Refused is a root.<n> on the bus that does not verify as the next root: anyone able to write
// the releases bucket can put one there, so it is named, not fatal, and publish may replace it.
type Refused struct {
	Key      string // root.5
	Bucket   string
	Version  uint64 // n of the key
	Revision uint64 // the KV revision publish replaces it at (compare-and-set)
	Err      error
}

func (r *Refused) String() string {
	return fmt.Sprintf("%s in %s is refused: %s", r.Key, r.Bucket, text.Bound(r.Err.Error()))
}

// maxChain bounds one walk: far more rotations than a fleet ever makes.
const maxChain = 100000

// ReadChain walks the roots on the bus (kv is the releases bucket) by direct get, as a node does,
// and stops at the first key missing or holding a root that does not verify as the next one. A
// bus holding no root gives an empty chain and no error; err says the bucket could not be read.
func ReadChain(ctx context.Context, kv jetstream.KeyValue) (Chain, error) {
	var c Chain
	var t wire.Trust
	for v := uint64(1); v <= maxChain; v++ {
		key := wire.RootKey(v)
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return c, nil
		}
		if err != nil {
			return c, fmt.Errorf("read %s in %s: %w", key, kv.Bucket(), err)
		}
		next, err := nextTrust(t, v, e.Value())
		if err != nil {
			c.Refused = &Refused{Key: key, Bucket: kv.Bucket(), Version: v, Revision: e.Revision(), Err: err}
			return c, nil
		}
		r, _ := next.Root()
		c.Roots, c.raw, t = append(c.Roots, r), append(c.raw, e.Value()), next
	}
	return c, nil
}

// nextTrust is t with root v, whose bytes are b, taken as the next root.
func nextTrust(t wire.Trust, v uint64, b []byte) (wire.Trust, error) {
	r, err := wire.ParseRoot(b)
	if err != nil {
		return t, err
	}
	if r.Version != v {
		return t, fmt.Errorf("it holds root v%d", r.Version)
	}
	if v == 1 {
		return wire.TrustFromRoots([]wire.Root{r})
	}
	return t.Advance(r)
}

// History is the verified roots on the bus, oldest first (ReadChain's Roots): a root that does
// not verify, and every key after it, is left out, as a node leaves it.
func History(ctx context.Context, kv jetstream.KeyValue) ([]wire.Root, error) {
	c, err := ReadChain(ctx, kv)
	return c.Roots, err
}

// Published is what Publish did.
type Published struct {
	Root     wire.Root
	Key      string // root.5
	Bucket   string
	Already  bool     // the same bytes were there: nothing written
	Replaced *Refused // the root.<v> that did not verify and was replaced, if one was
}

// Publish puts r in the releases bucket kv under wire.RootKey(r.Version) when it is the next
// version after the newest verified root on the bus and verifies as a node verifies it: a
// threshold of the previous root's root keys and of its own (version 1: its own). Going back, a
// gap and a verified version on the bus with other bytes are refused; the same bytes again are a
// no-op (Already). A root.<v> that does not verify as the next root (junk, too few signatures,
// an old root put there by anyone able to write the bucket) would block every later rotation, so
// it is replaced; a verified one never is. The write is a KV create, or an update at the bad
// entry's revision, so two operators publishing at once cannot both win.
func Publish(ctx context.Context, kv jetstream.KeyValue, r wire.Root) (Published, error) {
	if err := r.Validate(); err != nil {
		return Published{}, err
	}
	res := Published{Root: r, Key: wire.RootKey(r.Version), Bucket: kv.Bucket()}
	b := r.Marshal()
	chain, err := ReadChain(ctx, kv)
	if err != nil {
		return res, err
	}
	if r.Version >= 1 && r.Version <= uint64(len(chain.Roots)) {
		if bytes.Equal(chain.raw[r.Version-1], b) {
			res.Already = true
			return res, nil
		}
		return res, fmt.Errorf("root v%d is on the bus already (%s in %s) with other content or signatures; a published root is never replaced: make v%d", r.Version, res.Key, kv.Bucket(), r.Version+1)
	}
	if err := Check(chain.Roots, r); err != nil {
		return res, err
	}
	if bad := chain.Refused; bad != nil && bad.Version == r.Version {
		if _, err := kv.Update(ctx, res.Key, b, bad.Revision); err != nil {
			return res, fmt.Errorf("replace %s in %s, which did not verify: %w", res.Key, kv.Bucket(), err)
		}
		res.Replaced = bad
		return res, nil
	}
	if _, err := kv.Create(ctx, res.Key, b); err != nil {
		return res, fmt.Errorf("publish %s in %s: %w", res.Key, kv.Bucket(), err)
	}
	return res, nil
}

// Check verifies that r follows the chain roots (oldest first) as a node holding the newest
// would accept it. Version 1 on an empty chain needs a threshold of its own root keys.
func Check(roots []wire.Root, r wire.Root) error {
	newest := uint64(len(roots))
	switch {
	case r.Version <= newest:
		return fmt.Errorf("root v%d refused: the bus holds root v%d already, and a root never goes back a version", r.Version, newest)
	case r.Version > newest+1:
		return fmt.Errorf("root v%d refused: the newest root on the bus is v%d, so the next is v%d (nodes walk the chain one version at a time)", r.Version, newest, newest+1)
	}
	if len(roots) == 0 {
		if _, err := wire.TrustFromRoots([]wire.Root{r}); err != nil {
			return fmt.Errorf("root v1 refused: %w", err)
		}
		return nil
	}
	t, err := wire.TrustFromRoots(roots)
	if err != nil {
		return err
	}
	if _, err := t.Advance(r); err != nil {
		return err
	}
	return nil
}
