package link

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// An unreachable or refusing bus must not be silent: every failed connection attempt is logged
// with its reason (rate-limited, since the link retries every few seconds for as long as it
// takes), and the last one is kept for the heartbeat the host sends once the link is back.

const (
	// failureLogEvery is the most often one cause of failure is logged; the attempts in between
	// are counted and the count is logged with the next line.
	failureLogEvery = time.Minute
	// maxFailureText bounds the error kept for the heartbeat.
	maxFailureText = 512
	// maxCauses bounds the rate limiter's memory; past it, it starts over.
	maxCauses = 32
)

// failures follows the link's failed attempts. Safe for the nats callbacks' goroutine and the
// host's heartbeat at once.
type failures struct {
	log   *slog.Logger
	now   func() time.Time
	every time.Duration

	mu     sync.Mutex
	streak int                   // failed attempts since the link was last up
	last   *wire.LinkFailure     // the most recent failure; nil while none
	causes map[string]*causeSeen // by error text: when it was last logged
}

type causeSeen struct {
	logged     time.Time
	suppressed int
}

func newFailures(log *slog.Logger) *failures {
	return &failures{log: log, now: time.Now, every: failureLogEvery, causes: map[string]*causeSeen{}}
}

// attemptFailed records one failed connection attempt and logs it unless the same failure was
// logged less than f.every ago.
func (f *failures) attemptFailed(err error) {
	if err == nil {
		return
	}
	reason, text := describe(err)
	f.mu.Lock()
	f.streak++
	attempts := f.streak
	f.last = &wire.LinkFailure{LastError: txt.Cut(reason+": "+text, maxFailureText), At: f.now().UTC(), Attempts: attempts}
	// On its first pass nats.go turns "connection refused" into ErrNoServers, which names no
	// cause; the next attempt, a ReconnectWait later, does, so that one is logged instead.
	quiet := attempts == 1 && errors.Is(err, nats.ErrNoServers)
	suppressed, ok := 0, false
	if !quiet {
		suppressed, ok = f.admit(reason + sameWords(text))
	}
	f.mu.Unlock()
	if !ok {
		return
	}
	args := []any{"reason", reason, "err", text, "attempts", attempts}
	if suppressed > 0 {
		args = append(args, "not_logged", suppressed)
	}
	f.log.Warn("link: cannot connect to the bus; retrying", args...)
}

// lost records that the link lost the bus. It is not logged here: the link says so itself.
func (f *failures) lost(err error) {
	if err == nil {
		return
	}
	reason, text := describe(err)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = &wire.LinkFailure{LastError: txt.Cut("lost the bus: "+reason+": "+text, maxFailureText), At: f.now().UTC(), Attempts: f.streak}
}

// asyncError logs an error the server reported outside a connection attempt (a permission
// violation, a slow consumer), rate-limited like failures but not counted as one.
func (f *failures) asyncError(err error) {
	text := txt.Redact(err.Error())
	f.mu.Lock()
	suppressed, ok := f.admit("async" + text)
	f.mu.Unlock()
	if !ok {
		return
	}
	args := []any{"err", text}
	if suppressed > 0 {
		args = append(args, "not_logged", suppressed)
	}
	f.log.Warn("link: the bus reported an error", args...)
}

// up notes that the link is up and returns how many attempts had failed in a row before it and
// the last failure. The next failure starts a new streak and is logged at once.
func (f *failures) up() (failed int, last *wire.LinkFailure) {
	f.mu.Lock()
	defer f.mu.Unlock()
	failed, f.streak = f.streak, 0
	clear(f.causes)
	return failed, f.lastLocked()
}

// lastFailure is the most recent failure, or nil.
func (f *failures) lastFailure() *wire.LinkFailure {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastLocked()
}

func (f *failures) lastLocked() *wire.LinkFailure {
	if f.last == nil {
		return nil
	}
	c := *f.last
	return &c
}

// admit decides whether a failure with this key is logged now, and how many were not logged
// since its last line. The first of a kind is logged at once. f.mu is held.
func (f *failures) admit(key string) (suppressed int, ok bool) {
	now := f.now()
	c := f.causes[key]
	if c == nil {
		if len(f.causes) >= maxCauses {
			clear(f.causes)
		}
		f.causes[key] = &causeSeen{logged: now}
		return 0, true
	}
	if now.Sub(c.logged) < f.every {
		c.suppressed++
		return 0, false
	}
	suppressed, c.logged, c.suppressed = c.suppressed, now, 0
	return suppressed, true
}

// sameWords is text with every run of digits replaced by one '#', the key under which failures
// count as the same: an expired certificate's error names the current time, which must not make
// every attempt a new cause.
func sameWords(text string) string {
	var b strings.Builder
	digit := false
	for _, r := range text {
		if r >= '0' && r <= '9' {
			if !digit {
				b.WriteByte('#')
			}
			digit = true
			continue
		}
		digit = false
		b.WriteRune(r)
	}
	return b.String()
}

// describe says which side refused and why, when that can be known, and gives the error's text
// with any credentials in URLs redacted.
func describe(err error) (reason, text string) {
	text = txt.Redact(err.Error())
	var (
		dns     *net.DNSError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
		verify  *tls.CertificateVerificationError
		record  tls.RecordHeaderError
		alert   tls.AlertError
		netErr  net.Error
		urlErr  *url.Error
	)
	// Which side refused comes first: the server refusing this node (its credentials, TLS
	// required) or this node refusing the server (its certificate); then why, in the server's
	// or the verifier's own words (text).
	lower := strings.ToLower(text)
	switch {
	// A server says "User Authentication Revoked" (or Expired) to a user it knows; nats.go's
	// sentinels lack the "user", so the server's words are matched too.
	case errors.Is(err, nats.ErrAuthRevoked), strings.Contains(lower, "authentication revoked"):
		return "the server refused this node: its user was revoked (mesh-release node revoke); enrol the node again with a new token", text
	case errors.Is(err, nats.ErrAccountAuthExpired), strings.Contains(lower, "account authentication expired"):
		return "the server refused this node: the mesh account's credentials expired; the operator must re-issue the account", text
	case errors.Is(err, nats.ErrAuthExpired), strings.Contains(lower, "authentication expired"):
		return "the server refused this node: its user credentials expired; enrol the node again with a new token", text
	case errors.Is(err, nats.ErrAuthorization):
		return "the server refused this node's credentials (check nats_creds, or the user and password in the URL; a node revoked or replaced must be enrolled again)", text
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "the server refused this node: it requires TLS (use a tls:// URL and nats_ca)", text
	case errors.Is(err, nats.ErrSecureConnWanted):
		return "this node refused the server: it asks for TLS (a tls:// URL or nats_ca) but the server does not offer it", text
	case errors.As(err, &unknown):
		return "this node refused the server: its TLS certificate is not signed by a CA this node trusts (check nats_ca: the bus's ca.pem)", text
	case errors.As(err, &host):
		return "this node refused the server: its TLS certificate is not for the host name in the URL (use a name the certificate names, or have it re-issued with that name)", text
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "this node refused the server: its TLS certificate has expired or is not valid yet (check the clocks of both machines, and the certificate's dates)", text
	case errors.As(err, &invalid), errors.As(err, &verify):
		return "this node refused the server: its TLS certificate does not verify (check nats_ca and the host name in the URL)", text
	case strings.Contains(text, "remote error: tls: "):
		return "the server refused this node during the TLS handshake", text
	case errors.As(err, &record), errors.As(err, &alert), strings.Contains(text, "tls: "):
		return "the TLS handshake with the server failed", text
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the server's machine refused the connection (is the server running, is the port right?)", text
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "there is no route from this node to the server", text
	case errors.As(err, &dns):
		return "the server's name does not resolve", text
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "the server did not answer in time", text
	case errors.Is(err, nats.ErrNoServers):
		return "no server could be reached (refused or unreachable)", text
	case errors.As(err, &urlErr):
		return "the bus URL is not valid", text
	}
	return "the connection failed", text
}
