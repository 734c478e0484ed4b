package targets

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// Bounds of a window's validity (`window set --ttl`). A window is a standing rule, so it lasts
// longer than a target by default; the keeper of its key signs it again before it expires
// (Keep, decision 0045).
const (
	DefaultWindowTTL = 365 * 24 * time.Hour
)

// WindowKeys are the targets keys of the windows for nodes, or the fleet key when fleet.
func WindowKeys(nodes []string, fleet bool) ([]string, error) {
	switch {
	case fleet && len(nodes) > 0:
		return nil, errors.New("give node ids or --fleet, not both")
	case fleet:
		return []string{wire.FleetWindowKey}, nil
	case len(nodes) == 0:
		return nil, errors.New("no node ids given; name nodes, or use --fleet for every node")
	case len(nodes) > wire.MaxWindowNodes:
		return nil, fmt.Errorf("%d nodes: a window names at most %d; give the rest their own", len(nodes), wire.MaxWindowNodes)
	}
	keys := make([]string, 0, len(nodes))
	for i, n := range nodes {
		if err := wire.ValidNode(n); err != nil {
			return nil, err
		}
		if slices.Contains(nodes[:i], n) {
			return nil, fmt.Errorf("node %s is named twice", n)
		}
		keys = append(keys, wire.NodeWindowKey(n))
	}
	return keys, nil
}

// WindowSet is one window key written: its revision and the window.
type WindowSet struct {
	Key      string
	Revision uint64
	Window   wire.Window
}

// SetWindow writes spec as the window of nodes (each under its own key, the document naming
// them all: a group) or of the fleet, signed with key (and each of more after it: a targets
// threshold of two or more) and valid for ttl, each by compare-and-set numbered after the value
// it replaces. It returns what it wrote, in order; on an error, what it wrote before.
func SetWindow(ctx context.Context, kv jetstream.KeyValue, nodes []string, fleet bool, spec wire.WindowSpec, key ed25519.PrivateKey, ttl time.Duration, now func() time.Time, more ...ed25519.PrivateKey) ([]WindowSet, error) {
	keys, err := WindowKeys(nodes, fleet)
	if err != nil {
		return nil, err
	}
	if err := ValidTTL(ttl); err != nil {
		return nil, fmt.Errorf("%s", strings.Replace(err.Error(), "--target-ttl", "--ttl", 1))
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("--key: %w", ErrNoKey)
	}
	if now == nil {
		now = time.Now
	}
	var out []WindowSet
	for _, k := range keys {
		var set WindowSet
		for try := 0; ; try++ {
			if try == DefaultTries {
				return out, fmt.Errorf("set %s in %s: %w", k, kv.Bucket(), ErrKeptChanging)
			}
			rev, prev, err := readSeq(ctx, kv, k)
			if err != nil {
				return out, err
			}
			w, err := wire.NewWindow(k, nodes, spec, prev, now(), ttl, key)
			if err != nil {
				return out, err
			}
			for _, m := range more {
				if err := w.AddSignature(k, m); err != nil {
					return out, err
				}
			}
			if rev != 0 {
				rev, err = kv.Update(ctx, k, w.Marshal(), rev)
			} else {
				rev, err = kv.Create(ctx, k, w.Marshal())
			}
			if Conflict(err) {
				continue
			}
			if err != nil {
				return out, fmt.Errorf("set %s in %s: %w", k, kv.Bucket(), err)
			}
			set = WindowSet{Key: k, Revision: rev, Window: w}
			break
		}
		out = append(out, set)
	}
	return out, nil
}

// readSeq is key's revision (0 when absent) and the seq its value carries, so the next value
// is numbered after it even when it does not parse.
func readSeq(ctx context.Context, kv jetstream.KeyValue, key string) (rev, seq uint64, err error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read %s in %s: %w", key, kv.Bucket(), err)
	}
	var v struct {
		Seq uint64 `json:"seq"`
	}
	_ = json.Unmarshal(e.Value(), &v)
	return e.Revision(), v.Seq, nil
}

// ClearWindow deletes the window keys of nodes, or the fleet's. It returns the windows that were
// there (the zero Window for a key that held none or an unreadable one, Key set).
func ClearWindow(ctx context.Context, kv jetstream.KeyValue, nodes []string, fleet bool) ([]WindowSet, error) {
	keys, err := WindowKeys(nodes, fleet)
	if err != nil {
		return nil, err
	}
	var out []WindowSet
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			out = append(out, WindowSet{Key: k})
			continue
		}
		if err != nil {
			return out, fmt.Errorf("read %s in %s: %w", k, kv.Bucket(), err)
		}
		w, _ := wire.ParseWindow(e.Value())
		if err := kv.Delete(ctx, k, jetstream.LastRevision(e.Revision())); err != nil {
			return out, fmt.Errorf("clear %s in %s: %w", k, kv.Bucket(), err)
		}
		out = append(out, WindowSet{Key: k, Revision: e.Revision(), Window: w})
	}
	return out, nil
}

// ShownWindow is one window key as `window show` lists it: the window when it parses, else why
// not.
type ShownWindow struct {
	Key      string
	Revision uint64
	Window   wire.Window
	Err      error
}

// Windows lists every window key of the targets bucket, in key order (the fleet's last).
func Windows(ctx context.Context, kv jetstream.KeyValue) ([]ShownWindow, error) {
	lister, err := kv.ListKeysFiltered(ctx, "window.>")
	if err != nil {
		return nil, fmt.Errorf("list the windows in %s: %w", kv.Bucket(), err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if (a == wire.FleetWindowKey) != (b == wire.FleetWindowKey) {
			if a == wire.FleetWindowKey {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	out := make([]ShownWindow, 0, len(keys))
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("read %s in %s: %w", k, kv.Bucket(), err)
		}
		w, perr := wire.ParseWindow(e.Value())
		out = append(out, ShownWindow{Key: k, Revision: e.Revision(), Window: w, Err: perr})
	}
	return out, nil
}
