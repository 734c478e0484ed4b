// Package bus is the control side's access to NATS: connecting to an existing server or
// cluster, serving an embedded one, and creating the mesh's buckets and stream.
package bus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/rollback"
)

// DefaultURL is where commands look for the bus when --nats is not given: `mesh-release serve`'s
// default listen address.
const DefaultURL = "nats://127.0.0.1:4222"

// Conn is one connection to the bus and its JetStream context.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// Connect dials url (comma-separated for a cluster) with an optional .creds file, giving up at
// ctx's deadline (or after 5 s without one).
func Connect(ctx context.Context, url, creds string) (*Conn, error) {
	if url == "" {
		url = DefaultURL
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	opts := []nats.Option{nats.Name("mesh-release"), nats.Timeout(timeout)}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		// The URL may carry a password, and NATS and net/url errors may quote it.
		return nil, fmt.Errorf("connect to the bus at %s: %w", rollback.Redact(url), rollback.RedactError(err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", rollback.Redact(url), rollback.RedactError(err))
	}
	return &Conn{NC: nc, JS: js}, nil
}

// Close drains nothing and closes the connection.
func (c *Conn) Close() { c.NC.Close() }
