package enrol

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// RootPinError is the refusal of the root on the bus that the token pins: it is not there, or
// its fingerprint is not the token's, or its root keys did not sign it. Nothing was written:
// the bus is not the one the token was made for, or its root was tampered with.
type RootPinError struct {
	Pin wire.TokenRoot
	Err error
}

func (e *RootPinError) Error() string {
	return fmt.Sprintf("enrol: the token pins %s, and the bus's does not match: %v; nothing was written — make a new token with mesh-release enrol-token on the release machine of this bus", e.Pin, e.Err)
}

func (e *RootPinError) Unwrap() error { return e.Err }

// tokenRoot is the root the token pins, read from its user's JWT tags (wire.TokenRootTag); ok
// is false for a token that pins none (made before roots, or before one was published).
func tokenRoot(tok wire.EnrolToken) (pin wire.TokenRoot, ok bool, err error) {
	tokenJWT, err := jwt.ParseDecoratedJWT([]byte(tok.Creds))
	if err != nil {
		return pin, false, fmt.Errorf("enrol: the token's creds: %w", err)
	}
	uc, err := jwt.DecodeUserClaims(tokenJWT)
	if err != nil {
		return pin, false, fmt.Errorf("enrol: the token's creds: %w", err)
	}
	return wire.TokenRootOf(uc.Tags)
}

// fetchRoot reads the pinned root from the bus as the node just enrolled (its new user, over TLS
// pinned to the token's CA) and checks it against the pin (wire.PinnedTrust). Each of the
// token's URLs is tried in turn.
func fetchRoot(ctx context.Context, tok wire.EnrolToken, o Options, reply wire.EnrolReply, seed []byte, pin wire.TokenRoot) (wire.Root, error) {
	var errs []error
	for _, u := range tok.URLs {
		b, err := readRoot(ctx, u, tok, o, reply, seed, pin.Version)
		var missing *missingRootError
		if errors.As(err, &missing) {
			return wire.Root{}, &RootPinError{Pin: pin, Err: err}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r, err := wire.ParseRoot(b)
		if err == nil {
			_, err = wire.PinnedTrust(r, pin.Fingerprint)
		}
		if err == nil && r.Version != pin.Version {
			err = fmt.Errorf("%s holds root v%d", wire.RootKey(pin.Version), r.Version)
		}
		if err != nil {
			return wire.Root{}, &RootPinError{Pin: pin, Err: err}
		}
		return r, nil
	}
	return wire.Root{}, fmt.Errorf("enrol: read the token's %s from the bus: %w", pin, errors.Join(errs...))
}

// missingRootError is a bus that answers but holds no such root.
type missingRootError struct{ key, bucket string }

func (e *missingRootError) Error() string {
	return fmt.Sprintf("the bus holds no %s in %s", e.key, e.bucket)
}

// readRoot connects to u as the node and reads the releases bucket's key root.<version>.
func readRoot(ctx context.Context, u string, tok wire.EnrolToken, o Options, reply wire.EnrolReply, seed []byte, version uint64) ([]byte, error) {
	shown := text.Redact(u)
	parsed, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shown, err)
	}
	host := parsed.Hostname()
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection, as in ask
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs.PeerCertificates, tok.CASHA256, host, shown)
		},
	}
	timeout := o.Timeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	nc, err := nats.Connect(u, nats.Name(o.Name), nats.Secure(tc), nats.UserJWTAndSeed(reply.JWT, string(seed)),
		nats.CustomInboxPrefix(wire.NodeInboxPrefix(o.Node)), nats.Timeout(timeout), nats.NoReconnect(),
		nats.IgnoreDiscoveredServers(), nats.DontRandomize())
	if err != nil {
		return nil, fmt.Errorf("connect to %s as %s: %w", shown, o.Node, text.RedactError(err))
	}
	defer nc.Close()
	// A node user reaches JetStream through the nodes account's imports (host.json's
	// js_api_prefix, which writeConfig sets).
	js, err := jetstream.NewWithAPIPrefix(nc, wire.NodeJSAPIPrefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", shown, err)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	bucket := wire.NamesFor(reply.Prefix).Releases()
	kv, err := js.KeyValue(rctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("%s: open %s: %w", shown, bucket, err)
	}
	e, err := kv.Get(rctx, wire.RootKey(version))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, &missingRootError{key: wire.RootKey(version), bucket: bucket}
	}
	if err != nil {
		return nil, fmt.Errorf("%s: read %s in %s: %w", shown, wire.RootKey(version), bucket, err)
	}
	return e.Value(), nil
}
