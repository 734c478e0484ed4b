// Package bus is the control side's access to NATS: connect, serve an embedded server, create the
// buckets.
//
// It connects to an existing server or cluster, serves an embedded one, and creates the mesh's
// buckets and stream.
package bus

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/novox/mesh-host/internal/text"
)

// DefaultURL is where commands look for the bus when --nats is not given: `mesh-release serve`'s
// default listen address.
const DefaultURL = "nats://127.0.0.1:4222"

// Conn is one connection to the bus and its JetStream context.
type Conn struct {
	NC *nats.Conn
	JS jetstream.JetStream
}

// A ConnectOption changes how Connect's connection behaves once made.
type ConnectOption func(*[]nats.Option)

// Lasting is for a command that runs until it is stopped (a rollout's controller, `rollout
// watch`): once connected, the connection tries again for ever when it is lost, every second or
// so (jittered, so that many clients do not return to a restarted server at once), and keeps
// up to ReconnectBuffer bytes published meanwhile. A NATS server restarting mid-rollout is then
// a pause, not the end of the command. Losing and regaining the bus are logged on log (nil:
// not logged). Without it a connection gives up after the client's default (60 tries, 2 s
// apart), which suits a command that does one thing and exits.
func Lasting(log *slog.Logger) ConnectOption {
	return func(opts *[]nats.Option) {
		*opts = append(*opts,
			nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second),
			nats.ReconnectJitter(500*time.Millisecond, time.Second),
			nats.ReconnectBufSize(ReconnectBuffer))
		if log != nil {
			*opts = append(*opts,
				nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
					if err != nil {
						log.Warn("lost the bus; reconnecting", "err", text.RedactError(err))
					}
				}),
				nats.ReconnectHandler(func(nc *nats.Conn) {
					log.Warn("back on the bus", "server", text.Redact(nc.ConnectedUrlRedacted()))
				}))
		}
	}
}

// WithCA makes the connection use TLS and trust the CA certificates in file (PEM), such as the
// ca.pem `mesh-release serve` makes; empty changes nothing (the system's roots, and TLS only if
// the URL or the server asks for it).
func WithCA(file string) ConnectOption {
	return func(opts *[]nats.Option) {
		if file != "" {
			*opts = append(*opts, nats.RootCAs(file))
		}
	}
}

// WithInboxPrefix makes the connection's reply subjects start with prefix: a user allowed to
// subscribe only below it (a node, an enrolment token) must use it.
func WithInboxPrefix(prefix string) ConnectOption {
	return func(opts *[]nats.Option) { *opts = append(*opts, nats.CustomInboxPrefix(prefix)) }
}

// ReconnectBuffer is what a Lasting connection keeps of what is published while it is
// disconnected (the client's default, said here so that it is a decision).
const ReconnectBuffer = 8 << 20

// Connect dials url (comma-separated for a cluster) with an optional .creds file, giving up at
// ctx's deadline (or after 5 s without one).
func Connect(ctx context.Context, url, creds string, options ...ConnectOption) (*Conn, error) {
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
	for _, o := range options {
		o(&opts)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		// The URL may carry a password, and NATS and net/url errors may quote it.
		return nil, fmt.Errorf("connect to the bus at %s: %w", text.Redact(url), text.RedactError(err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", text.Redact(url), text.RedactError(err))
	}
	return &Conn{NC: nc, JS: js}, nil
}

// Close drains nothing and closes the connection.
func (c *Conn) Close() { c.NC.Close() }
