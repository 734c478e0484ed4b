package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// Last returns node's last heartbeat as the stream holds it; ok is false when it holds none. It
// reads one message: a watcher that finds a node silent can ask the stream itself before
// acting on it.
func Last(ctx context.Context, js jetstream.JetStream, n wire.Names, node string) (e Entry, ok bool, err error) {
	st, err := heartbeatStream(ctx, js, n)
	if err != nil {
		return Entry{}, false, err
	}
	m, err := st.GetLastMsgForSubject(ctx, n.Heartbeat(node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("fleet: read %s's last heartbeat in %s: %w", node, n.HeartbeatStream(), err)
	}
	return entryOf(n, m.Subject, m.Time, m.Data), true, nil
}
