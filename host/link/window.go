package link

import (
	"context"
	"fmt"

	"github.com/novox/mesh-host/wire"
)

// WindowChanged: the maintenance window in force changed (decision 0029). Key is
// wire.NodeWindowKey(node) or wire.FleetWindowKey, whichever is in force (the node's key wins
// while present), or "" when neither is set; Window is then nil. Err is set, and Window nil,
// when the value in force is not a valid window. The window is parsed, not verified: the host
// checks it with its trusted target keys (wire.Window.Verify) and that it names this node.
type WindowChanged struct {
	Window   *wire.Window
	Key      string
	Revision uint64
	Err      error
}

func (WindowChanged) event() {}

// windowFold folds the node's and the fleet's window keys into the window in force (keyFold),
// remembering what it reported last across sessions: a reconnect reports only a change.
type windowFold struct {
	keyFold
	l        *Link
	seen     bool
	key      string
	revision uint64
}

func (l *Link) windowWatches(f *windowFold) watchedKeys {
	return f.watches(l.opts.Names.Targets(), [2]string{wire.NodeWindowKey(l.opts.Node), wire.FleetWindowKey},
		func(ctx context.Context, _, _ *keyEntry) bool { return f.report(ctx) })
}

// report sends the window in force if it changed; called with the fold's lock held.
func (f *windowFold) report(ctx context.Context) bool {
	eff := f.entry[0]
	if eff == nil {
		eff = f.entry[1]
	}
	var ev WindowChanged
	if eff != nil {
		ev.Key, ev.Revision = eff.Key, eff.Revision
	}
	if f.seen && ev.Key == f.key && ev.Revision == f.revision {
		return true
	}
	if eff != nil {
		w, err := wire.ParseWindow(eff.Value)
		if err != nil {
			ev.Err = fmt.Errorf("%s key %s revision %d: %w", f.l.opts.Names.Targets(), ev.Key, ev.Revision, err)
		} else {
			ev.Window = &w
		}
	}
	if !f.l.send(ctx, ev) {
		return false
	}
	f.seen, f.key, f.revision = true, ev.Key, ev.Revision
	return true
}
