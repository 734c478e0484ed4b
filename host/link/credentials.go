package link

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Credentials from before decision 0022 (decision 0024). A node enrolled while nodes followed
// their keys with consumers holds a user JWT that may create consumers filtered to its keys but
// may neither subscribe to them nor get them directly. Such a link keeps working the old way
// (consumerwatch.go; the deliverer and the blob source ask LegacyCredentials and fetch with
// nats.go's obs.Get), asks for renewed credentials with every heartbeat
// (wire.RenewCredentialsHeader), and takes the JWT the enrolment service sends it on
// wire.NodeCredentialsSubject: the creds file is written again with it and the node's own seed,
// and the connection reconnects, so the next session follows the keys by direct get.

// userCreds is what the link knows of the user JWT in its creds file, read at Open: whom it was
// issued to and by, what a renewed JWT must match.
type userCreds struct {
	path                  string
	subject               string // the user's public key
	issuer, issuerAccount string
	version               int // of its permissions when read at Open: userVersion
}

// userVersion is the version of a node user's permissions (wire.NodeUserVersion): its tag, 1
// for the permissions from before decision 0022, which carry none, and 2 for a user without the
// tag otherwise.
func userVersion(uc *jwt.UserClaims) int {
	if legacyPermissions(uc) {
		return 1
	}
	for _, tag := range uc.Tags {
		if v, ok := strings.CutPrefix(tag, wire.NodeUserTagPrefix); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n
			}
		}
	}
	return 2
}

// readUserCreds reads the user JWT of a .creds file. An error means the file holds none the link
// can read; the connection will say why it is refused.
func readUserCreds(path string, b []byte) (*userCreds, *jwt.UserClaims, error) {
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, nil, err
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, nil, err
	}
	return &userCreds{path: path, subject: uc.Subject, issuer: uc.Issuer, issuerAccount: uc.IssuerAccount, version: userVersion(uc)}, uc, nil
}

// legacyPermissions reports whether a node user's permissions are those from before decision
// 0022: it may publish a consumer create (a watch on one key, an object's chunks).
func legacyPermissions(uc *jwt.UserClaims) bool {
	for _, s := range uc.Pub.Allow {
		if strings.Contains(s, ".CONSUMER.CREATE.") {
			return true
		}
	}
	return false
}

// LegacyCredentials reports whether this node's user JWT predates decision 0022: it follows its
// keys with consumers and fetches objects with nats.go's obs.Get (a consumer), until renewed
// credentials arrive. The deliverer and the blob source ask it before each fetch.
func (l *Link) LegacyCredentials() bool { return l.legacy.Load() }

// listenForCredentials subscribes to the node's credentials subject. A core subscription:
// nats.go makes it again on every reconnect.
func (l *Link) listenForCredentials() error {
	subject := wire.NodeCredentialsSubject(l.opts.Node)
	sub, err := l.nc.Subscribe(subject, l.renewCredentials)
	if err != nil {
		return fmt.Errorf("link: subscribe to %s for renewed credentials: %w", subject, err)
	}
	l.renewSub = sub
	return nil
}

// renewCredentials takes a user JWT sent on the credentials subject to a node whose user is from
// before decision 0022; refused, the next heartbeat asks again.
func (l *Link) renewCredentials(m *nats.Msg) {
	if !l.legacy.Load() {
		return // renewed already; a late second answer changes nothing
	}
	if !l.takeCredentials(m.Data, m.Subject, "the next heartbeat asks again") {
		return
	}
	if err := m.Sub.Unsubscribe(); err != nil {
		l.log.Debug("link: unsubscribe from the credentials subject", "err", err)
	}
}

// renewEvery is the least time between two requests for renewed credentials on the renew
// subject (a release side older than the host answers with the same version again).
const renewEvery = 10 * time.Minute

// askRenewal asks the enrolment service, on this node's renew subject, for its user signed with
// today's permissions: for a user of an older version than this host needs (Options.UserVersion).
func (l *Link) askRenewal(ctx context.Context) {
	if !l.stale.Load() {
		return
	}
	now := time.Now()
	if last := l.lastRenewAsk.Load(); last != 0 && now.Sub(time.Unix(0, last)) < renewEvery {
		return
	}
	l.lastRenewAsk.Store(now.UnixNano())
	subject := l.opts.Names.RenewSubject(l.opts.Node)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := l.nc.RequestWithContext(rctx, subject, nil)
	if err != nil {
		l.log.Warn("link: asked for this node's user with today's permissions and got no answer; asking again later", "subject", subject, "err", err, "in", renewEvery)
		return
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		l.log.Warn("link: the enrolment service refused to renew this node's user; asking again later", "code", text.Cut(text.Printable(code), 8),
			"why", text.Cut(text.Printable(m.Header.Get(micro.ErrorHeader)), 512), "in", renewEvery)
		return
	}
	l.takeCredentials(m.Data, subject, "asking again in "+renewEvery.String())
}

// takeCredentials checks a renewed user JWT, tries it, stores it in the creds file and has the
// link reconnect with it; refused, it logs why and what happens next (then), and reports false.
func (l *Link) takeCredentials(data []byte, from, then string) bool {
	token, err := l.acceptCredentials(data, time.Now())
	if err != nil {
		l.log.Warn("link: refused the credentials sent on "+from+"; "+then, "err", err)
		return false
	}
	// Stored only once the bus has taken it: a JWT signed by a key the account does not name
	// would lock the node out at its next reconnect.
	if err := l.tryCredentials(token); err != nil {
		l.log.Warn("link: refused the credentials sent on "+from+"; "+then, "err", fmt.Errorf("the bus refused them, the current ones are kept: %w", err))
		return false
	}
	if err := l.storeCredentials(token); err != nil {
		l.log.Error("link: could not store the renewed credentials; "+then, "err", err)
		return false
	}
	uc, _ := jwt.DecodeUserClaims(token)
	l.version.Store(int64(userVersion(uc)))
	l.legacy.Store(false)
	l.stale.Store(userVersion(uc) < l.opts.UserVersion)
	l.held.renewed(token)
	l.log.Info("link: credentials renewed with today's permissions (decision 0024); reconnecting with them",
		"creds", l.user.path, "version", userVersion(uc))
	// The next connect presents the held JWT: the next session is the renewed user's.
	if err := l.nc.ForceReconnect(); err != nil {
		l.log.Warn("link: could not reconnect with the renewed credentials; the next reconnect uses them", "err", err)
	}
	return true
}

// accountOf is the account a user JWT belongs to: its issuer account, or its issuer when the
// account signed it with its own key.
func accountOf(issuer, issuerAccount string) string {
	if issuerAccount != "" {
		return issuerAccount
	}
	return issuer
}

// acceptCredentials checks a JWT sent as this node's renewed credentials and returns it: a user
// JWT, valid and unexpired at now, for this node's key and the same account as the current one
// (signed by any key: the server checks it is one of the account's), and without the permissions
// from before decision 0022.
func (l *Link) acceptCredentials(data []byte, now time.Time) (string, error) {
	if len(data) > wire.MaxCredentialsBytes {
		return "", fmt.Errorf("%d bytes, more than the %d a user JWT may have", len(data), wire.MaxCredentialsBytes)
	}
	token := string(bytes.TrimSpace(data))
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return "", fmt.Errorf("not a user JWT (%s): %s", quoted(token), quoted(err.Error()))
	}
	cur := l.user
	switch {
	case uc.Subject != cur.subject:
		return "", fmt.Errorf("the JWT is for user %s, not this node's key %s", quoted(uc.Subject), cur.subject)
	case accountOf(uc.Issuer, uc.IssuerAccount) != accountOf(cur.issuer, cur.issuerAccount):
		// The signing key may differ (the transition signs with a second one): the account may
		// not. Whether the key is one of the account's, the server says (tryCredentials).
		return "", fmt.Errorf("the JWT is for account %s, not %s as this node's credentials are",
			quoted(accountOf(uc.Issuer, uc.IssuerAccount)), accountOf(cur.issuer, cur.issuerAccount))
	case uc.Expires != 0 && uc.Expires <= now.Unix():
		return "", fmt.Errorf("the JWT expired at %s", time.Unix(uc.Expires, 0).UTC().Format(time.RFC3339))
	case legacyPermissions(uc):
		return "", errors.New("the JWT still lets the node create consumers (the permissions from before decision 0022); the release side must issue it with today's")
	case int64(userVersion(uc)) <= l.version.Load():
		return "", fmt.Errorf("the JWT's permissions are of version %d, and this node's are of %d already (the release side is older than this host)", userVersion(uc), l.version.Load())
	}
	vr := jwt.CreateValidationResults()
	uc.Validate(vr)
	if vr.IsBlocking(true) {
		return "", fmt.Errorf("the JWT is not valid: %s", quoted(errors.Join(vr.Errors()...).Error()))
	}
	return token, nil
}

// quoted is text from the bus as a refusal names it: bounded, and nothing that could drive a
// terminal.
func quoted(s string) string { return text.Printable(text.Bound(s)) }

// storeCredentials writes the creds file again with token and the link's own seed, atomically
// (temporary file, fsync, rename, directory fsync) and with the file's mode — unless the file
// now holds another user's seed: another enrolment wrote it, and it is not the link's to undo.
func (l *Link) storeCredentials(token string) error {
	path := l.user.path
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("credentials %s: %w", path, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("credentials %s: %w", path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("credentials %s: the user seed: %w", path, err)
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil {
		return fmt.Errorf("credentials %s: the user seed: %w", path, err)
	}
	if pub != l.user.subject {
		return fmt.Errorf("credentials %s: its seed is now of user %s, not %s: the file was replaced meanwhile", path, pub, l.user.subject)
	}
	out, err := jwt.FormatUserConfig(token, l.held.seed)
	if err != nil {
		return fmt.Errorf("credentials %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, out, fi.Mode().Perm()); err != nil {
		return fmt.Errorf("write credentials %s: %w", path, err)
	}
	return nil
}

// renewHeader is what a heartbeat carries while the credentials are legacy; a new one each
// time, as a publish may add to a message's header.
func renewHeader() nats.Header {
	return nats.Header{wire.RenewCredentialsHeader: []string{wire.RenewCredentialsLegacy}}
}

// renewHeaderBytes is what the header adds to a heartbeat on the wire, counted against the
// server's and the stream's largest message.
var renewHeaderBytes = len("NATS/1.0\r\n") + len(wire.RenewCredentialsHeader) + len(": ") + len(wire.RenewCredentialsLegacy) + len("\r\n\r\n")

// tryCredentials connects once, with token and this node's seed, to the server the link is on,
// and reports whether the server took them.
func (l *Link) tryCredentials(token string) error {
	seed := string(l.held.seed)
	opts := []nats.Option{
		nats.Name(l.opts.Name + " (renewed credentials check)"),
		nats.UserJWTAndSeed(token, seed),
		nats.CustomInboxPrefix(wire.NodeInboxPrefix(l.opts.Node)),
		nats.Timeout(10 * time.Second),
		nats.NoReconnect(),
	}
	if l.opts.CA != "" {
		opts = append(opts, nats.RootCAs(l.opts.CA))
	}
	url := l.nc.ConnectedUrl()
	if url == "" {
		return errors.New("the link is not connected")
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s with them: %w", text.Redact(url), text.RedactError(err))
	}
	nc.Close()
	return nil
}
