package link

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// The bus configuration (decision 0046): the link follows the releases bucket's key wire.BusKey
// like its others and reports each value as BusArrived; the host verifies and applies it. The
// CA file it writes is read again at every connection attempt (natsOptions: nats.RootCAs reads
// its files each time), so a bundle written now is the one the next reconnect verifies the
// server with, without a restart.

// BusArrived: the bus configuration key has a value, at the start of each session (after
// every reconnect: one refused for a reason of the moment, such as the server this node is
// connected to, is judged again) and at each new revision. Value is raw, unparsed and
// unverified (wire.ParseBus). Deleted means the key was deleted or purged on the bus.
type BusArrived struct {
	Value    []byte
	Revision uint64
	Deleted  bool
}

func (BusArrived) event() {}

// busUserVersion is the first version of a node user's permissions that may subscribe to the
// bus configuration's notices (wire.NodeUserVersion 4).
const busUserVersion = 4

// followsBus reports whether this link's user may follow the bus configuration: no user JWT
// (an nkey seed, no credentials: no permissions to know of), or one of version 4 or later. A
// user of an older version is asked for renewed (askRenewal); the reconnect that follows
// starts a session that follows the key.
func (l *Link) followsBus() bool {
	return !l.legacy.Load() && (l.user == nil || l.version.Load() >= busUserVersion)
}

// busWatch follows the bus configuration key, reporting its value once per session and each
// new revision after.
func (l *Link) busWatch() watchedKeys {
	return l.revisionWatcher(l.opts.Names.Releases(), wire.BusKey, &revSeen{}, func(e *keyEntry) Event {
		return BusArrived{Value: e.Value, Revision: e.Revision, Deleted: e.Deleted}
	})
}

// ErrNotTLS is CheckServerCAs' answer when the link is up without TLS: no CA to lose.
var ErrNotTLS = errors.New("the link to the bus does not use TLS")

// notePeer keeps the chain a TLS handshake verified (tls.Config.VerifyConnection). nats.go's
// TLSConnectionState reads the connection's status without its lock, so the link keeps its own.
func (l *Link) notePeer(cs tls.ConnectionState) error {
	certs := slices.Clone(cs.PeerCertificates)
	l.peer.Store(&certs)
	return nil
}

// CheckServerCAs checks that the certificate of the server the link is connected to now
// verifies against pool: a bundle it does not would cut this node off at its next reconnect.
// ErrNotTLS when the link verifies no server certificate with a CA file, ErrNotConnected while
// the link is down.
func (l *Link) CheckServerCAs(pool *x509.CertPool) error {
	if !l.nc.IsConnected() {
		return ErrNotConnected
	}
	p := l.peer.Load()
	if p == nil || len(*p) == 0 {
		return ErrNotTLS
	}
	peer := *p
	inter := x509.NewCertPool()
	for _, c := range peer[1:] {
		inter.AddCert(c)
	}
	leaf := peer[0]
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: time.Now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	if err != nil {
		return fmt.Errorf("the certificate of the server this node is connected to (%s, %q, issued by %q) does not verify against these CAs: %w",
			text.Redact(l.nc.ConnectedUrl()), text.Bound(leaf.Subject.CommonName), text.Bound(leaf.Issuer.CommonName), err)
	}
	return nil
}

// probeTimeout bounds ProbeServerCAs: one dial and handshake to a server the link reached.
const probeTimeout = 15 * time.Second

// ProbeServerCAs dials the server the link is connected to now with a fresh connection that
// verifies it with pool only, and this link's credentials. CheckServerCAs judges the session's
// own handshake, which may predate the server's switch to a certificate of a new CA (`serve`
// presents a new certificate from its next handshake, keeping connections made): the probe
// sees what the next reconnect will meet. The connection is closed at once. ErrNotConnected
// while the link is down.
func (l *Link) ProbeServerCAs(ctx context.Context, pool *x509.CertPool) error {
	if !l.nc.IsConnected() {
		return ErrNotConnected
	}
	url := l.nc.ConnectedUrl()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// The link's Close ends a probe under way too.
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	deadline, _ := ctx.Deadline()
	opts := []nats.Option{
		nats.Name(l.opts.Name + " (CA probe)"),
		nats.NoReconnect(),
		nats.Timeout(time.Until(deadline)),
		nats.SetCustomDialer(ctxDialer{ctx}),
		nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}),
		nats.NoCallbacksAfterClientClose(),
	}
	if l.held != nil {
		opt, err := l.held.option()
		if err != nil {
			return fmt.Errorf("the probe of %s: credentials: %w", text.Redact(url), err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("a new connection to the server this node is connected to (%s), verifying it with these CAs only, failed: %w",
			text.Redact(url), text.RedactError(err))
	}
	nc.Close()
	return nil
}

// ctxDialer dials as nats.go would, and closes the connection when ctx ends: the TLS handshake
// and the exchange after it end with the probe's context.
type ctxDialer struct{ ctx context.Context }

func (d ctxDialer) Dial(network, address string) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(d.ctx, network, address)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(d.ctx, func() { c.Close() })
	return c, nil
}
