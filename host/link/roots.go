package link

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/wire"
)

// Roots of trust live in the releases bucket under root.<n> (decision 0045), which a node may
// already get directly. The link gets a version when the host asks (Root) and, where the node's
// user may subscribe to `$KV.<releases>.root.>`, reports that one was written (RootNoticed). A
// user signed before that permission gets a permission error once per session: logged once, and
// the host follows by its polls.

// RootNoticed: a root was written to the releases bucket, or a session began: the host asks
// for the next root (Link.Root).
type RootNoticed struct{}

func (RootNoticed) event() {}

// rootNotices is the subject of every root's writes.
func (l *Link) rootNotices() string { return kvSubject(l.opts.Names.Releases(), "root.>") }

// Root reads root version n from the releases bucket by a direct get: its bytes (unparsed and
// unverified: wire.ParseRoot, then wire.Trust.Advance) and KV revision; found is false when the
// bus holds none (or a delete marker).
func (l *Link) Root(ctx context.Context, n uint64) (raw []byte, revision uint64, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*l.opts.PublishTimeout)
	defer cancel()
	bucket := l.opts.Names.Releases()
	st, err := l.directStream(ctx, bucket)
	if err != nil {
		return nil, 0, false, err
	}
	e, err := l.lastEntry(ctx, st, keyRef{bucket, wire.RootKey(n)})
	if err != nil || e == nil || e.Deleted {
		return nil, 0, false, err
	}
	return e.Value, e.Revision, true, nil
}

// followRootNotices reports RootNoticed at the session's start and after every write of a
// root, until ctx ends; notices that arrive together are reported once.
func (l *Link) followRootNotices(ctx context.Context) {
	ch := make(chan *nats.Msg, maxNotices)
	sub, err := l.nc.ChanSubscribe(l.rootNotices(), ch)
	if err != nil {
		l.log.Warn("link: cannot subscribe to notices of new roots; following the root by polls", "subject", l.rootNotices(), "err", err)
	} else {
		defer sub.Unsubscribe()
	}
	for {
		if !l.send(ctx, RootNoticed{}) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		for len(ch) > 0 {
			<-ch
		}
	}
}

// rootNoticesRefused reports whether err is the server refusing the root notices' subscription,
// and logs it the first time: a user signed before the permission follows the root by polls.
func (l *Link) rootNoticesRefused(err error) bool {
	if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `Subscription to "`+l.rootNotices()+`"`) {
		return false
	}
	if l.rootNoticesSaid.CompareAndSwap(false, true) {
		l.log.Warn("link: this node's user may not subscribe to notices of new roots; it follows the root by polls until its user is signed again with today's permissions",
			"subject", l.rootNotices())
	}
	return true
}
