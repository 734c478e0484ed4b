// Package link is the host's one outbound connection to the bus. It follows the node's
// declaration, its target and the fleet's, and the withdrawal list (pushed by the server, never
// polled, with no JetStream consumer: watch.go; with credentials from before decision 0022, with
// consumers until renewed ones arrive: credentials.go), reports what arrives as events, and
// publishes the host's heartbeats. It opens no listening socket; it keeps reconnecting for
// as long as it is open, including when the server is down at start.
package link

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Options configure a link. URLs and Node are required; the rest have defaults filled in by Open.
type Options struct {
	URLs  []string   // the bus, one URL per server
	Creds string     // a .creds file or an nkey seed file; empty for none
	CA    string     // a PEM file of CAs to trust for TLS; empty for the system's
	Node  string     // this node's id
	Names wire.Names // the bus names; zero means the default prefix
	// Name is how the connection is named on the server; default "mesh-host <node>".
	Name   string
	Logger *slog.Logger // nil discards
	// ReconnectWait is the pause between reconnect attempts (plus jitter); default DefaultReconnectWait.
	ReconnectWait time.Duration
	// RetryMin and RetryMax bound the backoff while a bucket is missing or a watch fails;
	// defaults DefaultRetryMin and DefaultRetryMax.
	RetryMin, RetryMax time.Duration
	// PublishTimeout bounds a heartbeat publish when its context has no deadline; default DefaultPublishTimeout.
	PublishTimeout time.Duration
	// InsecurePlaintext allows nats:// and ws:// URLs to a machine that is not this one
	// (host.json insecure_plaintext); without it Open refuses them (CheckPlaintext).
	InsecurePlaintext bool
	// JSAPIPrefix is the JetStream API prefix (host.json js_api_prefix): wire.NodeJSAPIPrefix for
	// a node user in the nodes account, empty for $JS.API.
	JSAPIPrefix string
	// UserVersion is the version of a node user's permissions this host needs
	// (wire.NodeUserVersion when zero): a user of an older one is asked for renewed (decision
	// 0024).
	UserVersion int
}

// newJetStream is the link's JetStream context, under prefix when one is configured.
func newJetStream(nc *nats.Conn, prefix string) (jetstream.JetStream, error) {
	if prefix == "" {
		return jetstream.New(nc)
	}
	return jetstream.NewWithAPIPrefix(nc, prefix)
}

// Event is something the link reports: Connected, Reconnected, Disconnected,
// DeclarationArrived, TargetChanged, WithdrawalsArrived, WindowChanged, RootNoticed or
// BusArrived.
type Event interface{ event() }

// Connected: the link reached the bus for the first time. Watches start after it.
type Connected struct{ URL string }

// Reconnected: the link reached the bus again after losing it (a reconcile trigger). Watches
// are re-established after it, and anything that changed meanwhile arrives as further events.
type Reconnected struct{ URL string }

// Disconnected: the link lost the bus; it keeps trying. Err may be nil.
type Disconnected struct{ Err error }

// DeclarationArrived: the node's declaration key has a new revision. Value is raw and
// unvalidated (wire.ParseDeclaration checks it). Deleted means the key was deleted or purged on
// the bus; Value is then empty. The same revision is never reported twice.
type DeclarationArrived struct {
	Value    []byte
	Revision uint64
	Deleted  bool
}

// TargetChanged: the effective target changed. Key is wire.NodeTargetKey(node) or
// wire.FleetTargetKey, whichever is in force (the node key wins while present), or "" when
// neither is set; Target is then nil. Err is set, and Target nil, when the value in force is not
// a valid target. The target is parsed, not verified: its signature covers Key, and the host
// checks it with its trusted target keys (wire.Target.Verify).
type TargetChanged struct {
	Target   *wire.Target
	Key      string
	Revision uint64
	Err      error
}

// WithdrawalsArrived: the withdrawal list has a new revision. Value is raw, unparsed and
// unverified (wire.ParseWithdrawals, then Withdrawals.Verify). Deleted means the key was deleted
// or purged on the bus. The same revision is never reported twice.
type WithdrawalsArrived struct {
	Value    []byte
	Revision uint64
	Deleted  bool
}

func (Connected) event()          {}
func (Reconnected) event()        {}
func (Disconnected) event()       {}
func (DeclarationArrived) event() {}
func (TargetChanged) event()      {}
func (WithdrawalsArrived) event() {}

// ErrNotConnected is returned by PublishHeartbeat while the link is down; the heartbeat is
// dropped rather than queued, because a stale heartbeat would lie about when it was sent.
var ErrNotConnected = errors.New("link: not connected to the bus")

// Link is the host's connection to the bus.
type Link struct {
	opts   Options
	log    *slog.Logger
	nc     *nats.Conn
	js     jetstream.JetStream
	events chan Event

	kick       chan struct{} // connection status may have changed
	truncated  atomic.Bool   // the last heartbeat published was cut to fit
	reconnects atomic.Uint64 // reconnects seen by the nats callback
	// unanswered: a heartbeat went unanswered while connected, so the stream behind the server
	// may be out of its reach (a leaf server cut off from its hub). catchUps counts the times a
	// heartbeat was answered again after that: each starts the watches again (run).
	unanswered atomic.Bool
	catchUps   atomic.Uint64
	lastErr    atomic.Value // error, the last disconnect's cause
	fail       *failures    // failed connection attempts: logged, the last one kept
	// conn is nc for the nats callbacks, which may run before Open has set l.nc.
	conn atomic.Pointer[nats.Conn]
	// user is the creds file's user JWT (nil for an nkey seed or no credentials); legacy says
	// it predates decision 0022 until renewed credentials replace it (credentials.go).
	user     *userCreds
	held     *heldCreds // what it connects with (heldcreds.go)
	legacy   atomic.Bool
	renewSub *nats.Subscription
	// version is the user's permissions' version (userVersion); stale says it is older than
	// this host needs and the link asks for it renewed (askRenewal), at most one ask at a time
	// (asking), every renewEvery (lastRenewAsk, Unix nanoseconds).
	version      atomic.Int64
	stale        atomic.Bool
	asking       atomic.Bool
	lastRenewAsk atomic.Int64

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// Owned by the session goroutines: each session is stopped and waited for before the next
	// starts; within one, each key's watch owns its revSeen, and the target fold's watch (its
	// lock) the target's.
	declSeen, withdrawalsSeen revSeen
	// floors is the newest revision the link has seen of each key it follows (by subject), in
	// any session: an answer behind it came from a replica that is behind (watch.go).
	floorsMu   sync.Mutex
	floors     map[string]uint64
	targetSeen bool
	targetKey  string
	targetRev  uint64
	windows    windowFold // the maintenance window's keys (window.go)
	// rootNoticesSaid: the refusal of the root notices' subscription was logged (roots.go).
	rootNoticesSaid atomic.Bool
	// peer is the certificate chain the last TLS handshake verified (with a CA file only): the
	// server the link is connected to while it is up (bus.go).
	peer atomic.Pointer[[]*x509.Certificate]
}

// Open starts the link: it dials the bus in the background and returns at once, even when the
// server is unreachable. Read Events until Close.
func Open(ctx context.Context, o Options) (*Link, error) {
	o, err := o.checked()
	if err != nil {
		return nil, err
	}
	servers := strings.Join(o.URLs, ",")
	l := &Link{
		opts: o,
		// The URLs may carry a password or a token: they are logged and put in errors
		// redacted, always (text.Redact).
		log:    o.Logger.With("bus", text.Redact(servers)),
		events: make(chan Event, 16),
		kick:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	l.fail = newFailures(l.log)
	l.windows.l = l
	if plain := plaintextRemote(o.URLs, o.CA != ""); len(plain) > 0 {
		l.log.Warn("link: the bus URL is plaintext to a machine that is not this one, allowed by insecure_plaintext: the node's credentials, declarations and heartbeats cross the network unencrypted unless the server demands TLS; use tls:// URLs (and nats_ca)",
			"plaintext", text.Redact(strings.Join(plain, ",")))
	}
	if err := l.connect(ctx, servers); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	l.poke()
	go l.run(runCtx)
	return l, nil
}

// checked checks o and returns it with its defaults filled (withDefaults) and its URLs given a scheme.
func (o Options) checked() (Options, error) {
	if len(o.URLs) == 0 {
		return o, errors.New("link: no NATS URL; set nats_urls in host.json or MESH_HOST_NATS_URL, or run without a link")
	}
	if err := wire.ValidNode(o.Node); err != nil {
		return o, fmt.Errorf("link: %w", err)
	}
	o = o.withDefaults()
	o.URLs = withScheme(o.URLs)
	if err := CheckPlaintext(o.URLs, o.CA, o.InsecurePlaintext); err != nil {
		return o, err
	}
	return o, nil
}

// connect makes the connection (which dials in the background until it reaches a server) and
// its JetStream context, and with legacy credentials listens for renewed ones.
func (l *Link) connect(ctx context.Context, servers string) error {
	nopts, err := l.natsOptions()
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	nc, err := nats.Connect(servers, nopts...)
	if err != nil {
		return fmt.Errorf("link: connect to %s: %w", text.Redact(servers), text.RedactError(err))
	}
	js, err := newJetStream(nc, l.opts.JSAPIPrefix)
	if err != nil {
		nc.Close()
		return fmt.Errorf("link: jetstream: %w", err)
	}
	l.nc, l.js = nc, js
	l.conn.Store(nc)
	if l.legacy.Load() {
		l.log.Warn("link: this node's credentials were issued before decision 0022: it follows its keys with consumers and asks for renewed credentials with every heartbeat",
			"creds", l.opts.Creds)
		if err := l.listenForCredentials(); err != nil {
			nc.Close()
			return err
		}
	}
	return nil
}

func (l *Link) natsOptions() ([]nats.Option, error) {
	o := l.opts
	opts := []nats.Option{
		nats.Name(o.Name),
		// A node's user may receive only below its own inbox prefix (decision 0011).
		nats.CustomInboxPrefix(wire.NodeInboxPrefix(o.Node)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(l.reconnectDelay),
		nats.ReconnectBufSize(-1), // fail publishes while down instead of queueing stale heartbeats
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.ConnectHandler(func(*nats.Conn) { l.poke() }),
		nats.ReconnectHandler(func(*nats.Conn) { l.reconnects.Add(1); l.poke() }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				err = text.RedactError(err)
				l.lastErr.Store(err)
				l.fail.lost(err)
			}
			l.poke()
		}),
		nats.ClosedHandler(func(*nats.Conn) { l.poke() }),
		// The first failed attempt (with RetryOnFailedConnect) and every attempt that could not
		// dial; attempts that dialled but were refused afterwards are found in reconnectDelay.
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) { l.fail.attemptFailed(err) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if isRevoked(err) {
				// The server says why it closes a revoked user's connection only here: the
				// disconnect that follows reads EOF, and later attempts "Authorization Violation".
				l.fail.attemptFailed(err)
				return
			}
			if isAuthError(err) {
				return // a refused attempt: reconnectDelay counts it, with the others
			}
			if l.rootNoticesRefused(err) {
				return
			}
			if refusedConsumerDelete(err) {
				// With legacy credentials nats.go deletes the consumer of an object fetch when
				// it ends; such a node may not, and the server removes the consumer itself.
				l.log.Debug("link: the server refused to delete a consumer, as a node's permissions say; it removes it itself", "err", err)
				return
			}
			l.fail.asyncError(err)
		}),
	}
	if o.Creds != "" {
		opt, err := l.credentialsOption()
		if err != nil {
			return nil, err
		}
		opts = append(opts, opt)
	}
	if o.CA != "" {
		if _, err := os.Stat(o.CA); err != nil {
			return nil, fmt.Errorf("link: CA file: %w", err)
		}
		// The CA file is read at every connection attempt (nats.RootCAs' callback), so a bundle
		// a bus configuration wrote is the next reconnect's (decision 0046); notePeer keeps the
		// chain each handshake verified, for CheckServerCAs.
		opts = append(opts, nats.Secure(&tls.Config{MinVersion: tls.VersionTLS12, VerifyConnection: l.notePeer}), nats.RootCAs(o.CA))
	}
	return opts, nil
}

// credentialsOption reads the creds file (or nkey seed file) once and holds what it says
// (heldcreds.go); a .creds file's user JWT also says whether the credentials are legacy or
// stale (credentials.go).
func (l *Link) credentialsOption() (nats.Option, error) {
	o := l.opts
	b, err := os.ReadFile(o.Creds)
	if err != nil {
		return nil, fmt.Errorf("link: credentials %s: %w", o.Creds, err)
	}
	isJWT := bytes.Contains(b, []byte("BEGIN NATS USER JWT"))
	if !isJWT && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("SU")) {
		return nil, fmt.Errorf("link: credentials %s is neither a .creds file nor an nkey user seed (SU…)", o.Creds)
	}
	held, err := readHeldCreds(o.Creds, b)
	if err != nil {
		return nil, err
	}
	opt, err := held.option()
	if err != nil {
		return nil, fmt.Errorf("link: credentials %s: %w", o.Creds, err)
	}
	l.held = held
	if isJWT {
		if user, claims, err := readUserCreds(o.Creds, b); err == nil {
			l.user = user
			l.legacy.Store(legacyPermissions(claims))
			l.version.Store(int64(user.version))
			l.stale.Store(user.version > 1 && user.version < o.UserVersion)
		}
	}
	return opt, nil
}

// reconnectDelay is the pause before the next pass over the servers: ReconnectWait plus jitter,
// as nats.go would wait. It is also the one place that sees an attempt that reached a server and
// was refused there (credentials, TLS): nats.go reports those to no callback while it has never
// been connected, and leaves them as the connection's last error until the next attempt.
func (l *Link) reconnectDelay(int) time.Duration {
	if nc := l.conn.Load(); nc != nil {
		if err := nc.LastError(); err != nil {
			l.fail.attemptFailed(err)
		}
	}
	jitter := 100 * time.Millisecond
	if l.opts.CA != "" || strings.Contains(strings.Join(l.opts.URLs, ","), "tls://") {
		jitter = time.Second // nats.go's default for TLS
	}
	return l.opts.ReconnectWait + rand.N(jitter)
}

// withScheme returns urls with nats:// put before any without a scheme: nats.go reads them so
// too, and saying so makes them URLs Redact and CheckPlaintext know.
func withScheme(urls []string) []string {
	out := append([]string(nil), urls...)
	for i, u := range out {
		if !strings.Contains(u, "://") {
			out[i] = "nats://" + u
		}
	}
	return out
}

// CheckPlaintext refuses bus URLs that would carry the link unencrypted to another machine
// (nats:// or ws:// to a host that is not loopback, while no CA forces TLS) unless insecure is
// set (insecure_plaintext): the node's credentials, declarations and heartbeats would cross the
// network readable by anyone on the way. Open calls it; so may a preflight, which reads the same
// settings, so that a version that would refuse is never staged.
func CheckPlaintext(urls []string, ca string, insecure bool) error {
	plain := plaintextRemote(withScheme(urls), ca != "")
	if len(plain) == 0 || insecure {
		return nil
	}
	return fmt.Errorf("link: this node refuses the plaintext bus URL %s: it is not TLS and not on this machine, so the node's credentials, declarations and heartbeats would cross the network unencrypted; use a tls:// URL (with nats_ca), or allow it with \"insecure_plaintext\": true in host.json (MESH_HOST_INSECURE_PLAINTEXT=1)",
		text.Redact(strings.Join(plain, ",")))
}

// refusedConsumerDelete reports whether err is the server refusing this node a consumer delete.
func refusedConsumerDelete(err error) bool {
	// "$JS.API.CONSUMER.DELETE." in one account, "$JS.mesh.API.CONSUMER.DELETE." through the nodes
	// account's import (wire.NodeJSAPIPrefix).
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `.API.CONSUMER.DELETE.`)
}

// isRevoked reports whether err is the server saying this node's user was revoked.
func isRevoked(err error) bool {
	return errors.Is(err, nats.ErrAuthRevoked) || strings.Contains(strings.ToLower(err.Error()), "authentication revoked")
}

func isAuthError(err error) bool {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
		return true
	}
	// A server says "User Authentication Revoked" (or Expired), which nats.go's sentinels do
	// not match.
	lower := strings.ToLower(err.Error())
	return strings.Contains(lower, "authentication revoked") || strings.Contains(lower, "authentication expired")
}

// plaintextRemote returns the URLs that would carry the link unencrypted to another machine:
// nats:// or ws:// to a host that is not loopback, while TLS is not forced by a CA.
func plaintextRemote(urls []string, tlsForced bool) []string {
	if tlsForced {
		return nil
	}
	var out []string
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "nats" && u.Scheme != "ws") {
			continue // tls://, wss://; a malformed URL fails at connect, and says so
		}
		h := u.Hostname()
		if strings.EqualFold(h, "localhost") {
			continue
		}
		if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
			continue
		}
		out = append(out, s)
	}
	return out
}

// LastFailure is the last time the link could not reach the bus since Open, for the heartbeat;
// nil if it never failed.
func (l *Link) LastFailure() *wire.LinkFailure { return l.fail.lastFailure() }

func (l *Link) poke() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Events is the stream of what the link sees. The host must keep reading it; it is closed by
// Close.
func (l *Link) Events() <-chan Event { return l.events }

// JetStream is the link's JetStream context, for fetching what the bus announces (manifests by
// direct get, archives and blobs by direct gets of their chunks: internal/objfetch; with
// LegacyCredentials, by nats.go's obs.Get).
func (l *Link) JetStream() jetstream.JetStream { return l.js }

// Connected reports whether the link is up now.
func (l *Link) Connected() bool { return l.nc.IsConnected() }

// Close stops the watches, closes the connection and the Events channel. Safe to call twice.
func (l *Link) Close() error {
	l.once.Do(func() {
		l.cancel()
		<-l.done
		l.nc.Close()
	})
	return nil
}

// PublishHeartbeat publishes hb on this node's heartbeat subject and waits for the stream to
// store it. Node and SentAt are filled in when empty. A heartbeat over the server's max payload
// (or wire.MaxHeartbeatBytes) is cut to fit by FitHeartbeat. While the link is down it returns
// ErrNotConnected at once.
func (l *Link) PublishHeartbeat(ctx context.Context, hb wire.Heartbeat) error {
	if hb.Node == "" {
		hb.Node = l.opts.Node
	}
	if hb.Node != l.opts.Node {
		return fmt.Errorf("link: heartbeat names node %q but this link is node %q", hb.Node, l.opts.Node)
	}
	if hb.SentAt.IsZero() {
		hb.SentAt = time.Now().UTC()
	}
	if !l.nc.IsConnected() {
		return ErrNotConnected
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.opts.PublishTimeout)
		defer cancel()
	}
	subject := l.opts.Names.Heartbeat(l.opts.Node)
	// Never over what the server or the stream accepts: cut by the documented rules instead, so
	// the node is never silenced by what it has to say.
	max := int(min(l.nc.MaxPayload(), wire.MaxHeartbeatBytes))
	legacy := l.legacy.Load()
	if legacy {
		max -= renewHeaderBytes
	}
	data, truncated, err := FitHeartbeat(hb, max)
	if err != nil {
		return fmt.Errorf("link: heartbeat on %s: %w", subject, err)
	}
	if truncated != l.truncated.Swap(truncated) {
		if truncated {
			l.log.Warn("link: heartbeats are cut to fit the largest message the server accepts; they say \"truncated\": true", "max_bytes", max, "full_bytes", len(hb.Marshal()))
		} else {
			l.log.Info("link: heartbeats fit again without cutting")
		}
	}
	msg := &nats.Msg{Subject: subject, Data: data}
	if legacy {
		// Asks the enrolment service for credentials with today's permissions (decision 0024).
		msg.Header = renewHeader()
	}
	if _, err := l.js.PublishMsg(ctx, msg); err != nil {
		l.unanswered.Store(true)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			return fmt.Errorf("link: heartbeat on %s: no stream answered: the bus has no %s (`mesh-release init` creates it), or the server this node is connected to cannot reach it (a leaf server cut off from its hub): %w", subject, l.opts.Names.HeartbeatStream(), err)
		}
		return fmt.Errorf("link: heartbeat on %s: %w", subject, err)
	}
	if l.unanswered.Swap(false) {
		// The stream answers again after it did not. The connection may never have dropped (a
		// leaf server's line to its hub came back), so no reconnect catches up on the writes
		// made meanwhile, which the subscriptions never saw: the watches start again instead.
		l.catchUps.Add(1)
		l.poke()
	}
	return nil
}

// run follows the connection's state and keeps one watch session per connected period.
func (l *Link) run(ctx context.Context) {
	defer close(l.done)
	defer close(l.events)
	var (
		up       bool
		ever     bool
		seenRC   uint64
		seenCU   uint64
		stopSess = func() {}
	)
	defer func() { stopSess() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		}
		connected := l.nc.IsConnected()
		rc := l.reconnects.Load()
		cu := l.catchUps.Load()
		switch {
		case connected && (!up || rc != seenRC):
			stopSess()
			stopSess = func() {}
			seenRC, seenCU = rc, cu
			// Not ConnectedUrlRedacted: it leaves a token (nats://token@host) in place.
			server := text.Redact(l.nc.ConnectedUrl())
			var ev Event = Connected{URL: server}
			msg := "link: connected"
			if ever {
				ev, msg = Reconnected{URL: server}, "link: reconnected"
			}
			if failed, last := l.fail.up(); failed > 0 && last != nil {
				l.log.Info(msg, "url", server, "after_failed_attempts", failed, "last_error", last.LastError)
			} else {
				l.log.Info(msg, "url", server)
			}
			up, ever = true, true
			if !l.send(ctx, ev) {
				return
			}
			stopSess = l.startSession(ctx)
			if l.stale.Load() && l.asking.CompareAndSwap(false, true) {
				go func() { defer l.asking.Store(false); l.askRenewal(ctx) }()
			}
		case connected && cu != seenCU:
			// A heartbeat is answered again after it was not: catch up on every key, as after a
			// reconnect.
			seenCU = cu
			stopSess()
			l.log.Info("link: heartbeats are answered again; catching up on every key", "url", text.Redact(l.nc.ConnectedUrl()))
			stopSess = l.startSession(ctx)
		case !connected && up:
			up = false
			stopSess()
			stopSess = func() {}
			err, _ := l.lastErr.Load().(error)
			l.log.Warn("link: lost the bus; reconnecting", "err", err)
			if !l.send(ctx, Disconnected{Err: err}) {
				return
			}
		}
		if l.nc.IsClosed() {
			l.log.Error("link: the connection was closed")
			return
		}
	}
}

func (l *Link) send(ctx context.Context, ev Event) bool {
	select {
	case l.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// startSession starts the watches for one connected period — the declaration, the withdrawal
// list, the target's fold (the node's key and the fleet's), the window's, the bus
// configuration (bus.go), the rollout plan (plan.go) and the notices of new roots (roots.go) — and returns a
// function that stops them and waits until they have stopped.
func (l *Link) startSession(parent context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(parent)
	n := l.opts.Names
	keys := []watchedKeys{
		l.revisionWatcher(n.Declarations(), l.opts.Node, &l.declSeen, func(e *keyEntry) Event {
			return DeclarationArrived{Value: e.Value, Revision: e.Revision, Deleted: e.Deleted}
		}),
		l.revisionWatcher(n.Withdrawals(), wire.WithdrawalsKey, &l.withdrawalsSeen, func(e *keyEntry) Event {
			return WithdrawalsArrived{Value: e.Value, Revision: e.Revision, Deleted: e.Deleted}
		}),
	}
	keys = append(keys, l.targetWatches(&keyFold{}))
	// A user signed before decision 0022 predates maintenance windows too: it may create no
	// consumer on the two window keys, so its link does not try (it keeps no window until its
	// credentials are renewed; the reconnect that follows starts a session with them).
	if !l.legacy.Load() {
		keys = append(keys, l.windowWatches(&l.windows))
	}
	if l.followsBus() {
		keys = append(keys, l.busWatch())
	}
	if l.FollowsPlan() {
		keys = append(keys, l.planWatch())
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.followRootNotices(ctx) }()
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.watch(ctx, k)
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// The defaults of what Options leave zero.
const (
	DefaultReconnectWait  = 2 * time.Second
	DefaultRetryMin       = 500 * time.Millisecond
	DefaultRetryMax       = 30 * time.Second
	DefaultPublishTimeout = 5 * time.Second
)

// withDefaults returns o with every zero field at its default (decision 0041).
func (o Options) withDefaults() Options {
	if o.Names.Prefix == "" {
		o.Names = wire.NamesFor("")
	}
	if o.Name == "" {
		o.Name = "mesh-host " + o.Node
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ReconnectWait == 0 {
		o.ReconnectWait = DefaultReconnectWait
	}
	if o.RetryMin == 0 {
		o.RetryMin = DefaultRetryMin
	}
	if o.RetryMax == 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.PublishTimeout == 0 {
		o.PublishTimeout = DefaultPublishTimeout
	}
	if o.UserVersion == 0 {
		o.UserVersion = wire.NodeUserVersion
	}
	return o
}
