package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// LastHeard returns when the server stored node's last heartbeat; ok is false when the stream
// holds none: the node never heartbeated on this bus, or not within the stream's max age. It
// reads one message, so commands can ask it before acting on a node id.
func LastHeard(ctx context.Context, js jetstream.JetStream, n wire.Names, node string) (heard time.Time, ok bool, err error) {
	st, err := heartbeatStream(ctx, js, n)
	if err != nil {
		return time.Time{}, false, err
	}
	m, err := st.GetLastMsgForSubject(ctx, n.Heartbeat(node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("fleet: read %s's last heartbeat in %s: %w", node, n.HeartbeatStream(), err)
	}
	return m.Time, true, nil
}

// Heard returns the id of every node the stream holds a heartbeat for, sorted. The ids come
// from subjects anyone allowed to publish could have made: print them with text.Printable.
func Heard(ctx context.Context, js jetstream.JetStream, n wire.Names) ([]string, error) {
	st, err := heartbeatStream(ctx, js, n)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(n.HeartbeatWildcard()))
	if err != nil {
		return nil, fmt.Errorf("fleet: list the nodes in %s: %w", n.HeartbeatStream(), err)
	}
	nodes := make([]string, 0, len(info.State.Subjects))
	for subject := range info.State.Subjects {
		nodes = append(nodes, nodeOf(n, subject))
	}
	sort.Strings(nodes)
	return nodes, nil
}

func heartbeatStream(ctx context.Context, js jetstream.JetStream, n wire.Names) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, n.HeartbeatStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("fleet: stream %s does not exist; run `mesh-release init` (or serve): %w", n.HeartbeatStream(), err)
		}
		return nil, fmt.Errorf("fleet: stream %s: %w", n.HeartbeatStream(), err)
	}
	return st, nil
}

// nodeOf is the node id in a heartbeat subject.
func nodeOf(n wire.Names, subject string) string {
	return strings.TrimSuffix(strings.TrimPrefix(subject, n.Prefix+".node."), ".heartbeat")
}
