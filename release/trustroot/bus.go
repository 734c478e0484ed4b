package trustroot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

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

// History reads every root on the bus (kv is the releases bucket), oldest first, and checks that
// they form a chain: version 1, 2, … with no gap, each link verified as a node verifies it
// (wire.TrustFromRoots). A bus holding no root gives none and no error.
func History(ctx context.Context, kv jetstream.KeyValue) ([]wire.Root, error) {
	lister, err := kv.ListKeysFiltered(ctx, "root.>")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the roots in %s: %w", kv.Bucket(), err)
	}
	defer lister.Stop()
	var versions []uint64
	for k := range lister.Keys() {
		if n, ok := IsRootKey(k); ok {
			versions = append(versions, n)
		}
	}
	slices.Sort(versions)
	roots := make([]wire.Root, 0, len(versions))
	for i, v := range versions {
		if v != uint64(i+1) {
			return nil, fmt.Errorf("the roots in %s are not a chain: %s is missing", kv.Bucket(), wire.RootKey(uint64(i+1)))
		}
		e, err := kv.Get(ctx, wire.RootKey(v))
		if err != nil {
			return nil, fmt.Errorf("read %s in %s: %w", wire.RootKey(v), kv.Bucket(), err)
		}
		r, err := wire.ParseRoot(e.Value())
		if err != nil {
			return nil, fmt.Errorf("%s in %s: %w", wire.RootKey(v), kv.Bucket(), err)
		}
		if r.Version != v {
			return nil, fmt.Errorf("%s in %s holds root v%d", wire.RootKey(v), kv.Bucket(), r.Version)
		}
		roots = append(roots, r)
	}
	if len(roots) > 0 {
		if _, err := wire.TrustFromRoots(roots); err != nil {
			return nil, fmt.Errorf("the roots in %s do not verify as a chain: %w", kv.Bucket(), err)
		}
	}
	return roots, nil
}

// Published is what Publish did.
type Published struct {
	Root    wire.Root
	Key     string // root.5
	Bucket  string
	Already bool // the same bytes were there: nothing written
}

// Publish puts r in the releases bucket kv under wire.RootKey(r.Version) when it is the next
// version after the newest on the bus and verifies as a node verifies it: a threshold of the
// previous root's root keys and of its own (version 1: its own). Going back, a gap and a version
// on the bus with other bytes are refused; the same bytes again are a no-op (Already). The key is
// created, never overwritten, so two operators publishing at once cannot both win.
func Publish(ctx context.Context, kv jetstream.KeyValue, r wire.Root) (Published, error) {
	if err := r.Validate(); err != nil {
		return Published{}, err
	}
	res := Published{Root: r, Key: wire.RootKey(r.Version), Bucket: kv.Bucket()}
	b := r.Marshal()
	if e, err := kv.Get(ctx, res.Key); err == nil {
		if bytes.Equal(e.Value(), b) {
			res.Already = true
			return res, nil
		}
		return res, fmt.Errorf("root v%d is on the bus already (%s in %s) with other content or signatures; a published root is never replaced: make v%d", r.Version, res.Key, kv.Bucket(), r.Version+1)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return res, fmt.Errorf("read %s in %s: %w", res.Key, kv.Bucket(), err)
	}
	roots, err := History(ctx, kv)
	if err != nil {
		return res, err
	}
	if err := Check(roots, r); err != nil {
		return res, err
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
