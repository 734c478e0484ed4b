package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Enrolment (docs/decisions/0011-trust-on-the-bus.md, "Enrolment"): `mesh-release enrol-token`
// prints a token; `mesh-host enrol TOKEN` connects with the token's credentials, over TLS
// pinned to the token's CA fingerprint, and sends an EnrolRequest to Names.EnrolSubject; the
// enrolment service answers with an EnrolReply, or with a micro error (code 400, 403, 409 or 500
// and a description naming the reason).

// TokenPrefix starts every enrolment token of this format; the rest is the base64url (no
// padding) of the token's JSON.
const TokenPrefix = "mesh-enrol-1."

// MaxTokenBytes bounds an enrolment token's text. A token is about 2.5 KiB (its creds text is
// most of it); 8 KiB leaves room for several URLs and a longer JWT, and anything larger is
// refused before it is decoded.
const MaxTokenBytes = 8 << 10

// Bounds on a token's fields: each is checked on parse so that nothing built from a token
// (an error, a log line, a KV key) grows with its input.
const (
	MaxTokenURLs     = 16
	MaxTokenURLBytes = 512
	maxPrefixBytes   = 64
	maxCredsBytes    = 4 << 10
)

// tokenSecretBytes is the size of a token's one-time secret; tokenIDBytes of its id.
const (
	tokenSecretBytes = 32
	tokenIDBytes     = 16
)

// EnrolToken is what an enrolment token carries: where the bus is and how to know it (the
// SHA-256 of its CA certificate's DER, hex), the bus names' prefix, the node it is for (empty:
// any), its id and one-time secret, its expiry, and the .creds text of a user that may only
// request enrolment.
type EnrolToken struct {
	URLs     []string  `json:"urls"`
	CASHA256 string    `json:"ca_sha256"`
	Prefix   string    `json:"prefix"`
	Node     string    `json:"node"`
	ID       string    `json:"id"`
	Secret   string    `json:"secret"`
	Expires  time.Time `json:"expires"`
	Creds    string    `json:"creds"`
}

// FormatToken checks t and returns its text: TokenPrefix and the base64url of its JSON.
func FormatToken(t EnrolToken) (string, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("enrolment token: %w", err)
	}
	s := TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	if len(s) > MaxTokenBytes {
		return "", fmt.Errorf("enrolment token: %d bytes, more than the %d a token may have (too many or too long URLs?)", len(s), MaxTokenBytes)
	}
	return s, nil
}

// ParseToken reads a token's text (surrounding white space ignored): at most MaxTokenBytes,
// TokenPrefix, strict base64url without padding, a JSON object with exactly the token's keys,
// and every field well formed. A refusal names what is wrong and never quotes the secret or the
// credentials.
func ParseToken(text string) (EnrolToken, error) {
	text = strings.TrimSpace(text)
	if len(text) > MaxTokenBytes {
		return EnrolToken{}, fmt.Errorf("enrolment token: %d bytes, more than the %d a token may have; is it the whole line `mesh-release enrol-token` printed, and only that?", len(text), MaxTokenBytes)
	}
	body, ok := strings.CutPrefix(text, TokenPrefix)
	if !ok {
		if strings.HasPrefix(text, "mesh-enrol-") {
			v, _, _ := strings.Cut(strings.TrimPrefix(text, "mesh-enrol-"), ".")
			return EnrolToken{}, fmt.Errorf("enrolment token: format %s is not one this program reads (it reads %q); use a mesh-host as new as the mesh-release that made it", quote(v, 16), TokenPrefix)
		}
		return EnrolToken{}, fmt.Errorf("enrolment token: it does not start with %q; pass the whole line `mesh-release enrol-token` printed", TokenPrefix)
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(body)
	var bad base64.CorruptInputError
	if errors.As(err, &bad) && int(bad) >= len(body)-4 && base64URL(body) {
		return EnrolToken{}, cutShort(len(text), err) // a base64 quantum broken off at the end
	}
	if err != nil {
		return EnrolToken{}, fmt.Errorf("enrolment token: not base64url after %q (%v); was it cut or wrapped when copied?", TokenPrefix, err)
	}
	var t EnrolToken
	if err := DecodeStrict(raw, &t); errors.Is(err, io.ErrUnexpectedEOF) {
		return EnrolToken{}, cutShort(len(text), err)
	} else if err != nil {
		return EnrolToken{}, fmt.Errorf("enrolment token: its JSON: %w", cutError{err})
	}
	if err := t.validate(); err != nil {
		return EnrolToken{}, err
	}
	return t, nil
}

// cutShort is the refusal of a token whose text ends early: most often a copy that missed its
// end (a terminal's wrap, a selection short of the line), so it says that rather than what the
// decoder tripped on.
func cutShort(n int, err error) error {
	return fmt.Errorf("enrolment token: cut short: its %d bytes end in the middle (%w), so it was most likely truncated when copied; pass the whole line `mesh-release enrol-token` printed", n, cutError{err})
}

// base64URL reports whether s holds only base64url's alphabet: a text that does, refused at its
// end, was cut there rather than mangled.
func base64URL(s string) bool {
	for _, r := range s {
		if !('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func (t EnrolToken) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("enrolment token: "+format, args...)
	}
	if len(t.URLs) == 0 {
		return bad("urls is empty; the token must name the bus")
	}
	if len(t.URLs) > MaxTokenURLs {
		return bad("%d urls, more than %d", len(t.URLs), MaxTokenURLs)
	}
	for i, u := range t.URLs {
		if err := checkBusURL(u); err != nil {
			return bad("urls[%d]: %w", i, err)
		}
	}
	if err := checkHex(t.CASHA256, 32); err != nil {
		return bad("ca_sha256: %w", err)
	}
	if err := ValidPrefix(t.Prefix); err != nil {
		return bad("prefix: %w", err)
	}
	if t.Node != "" {
		if err := ValidNode(t.Node); err != nil {
			return bad("node: %w", err)
		}
	}
	if err := checkHex(t.ID, tokenIDBytes); err != nil {
		return bad("id: %w", err)
	}
	if s, err := base64.RawURLEncoding.Strict().DecodeString(t.Secret); err != nil || len(s) != tokenSecretBytes {
		return bad("secret is not %d bytes in base64url without padding", tokenSecretBytes)
	}
	if t.Expires.IsZero() {
		return bad("expires is missing")
	}
	if t.Creds == "" {
		return bad("creds is empty")
	}
	if len(t.Creds) > maxCredsBytes {
		return bad("creds is %d bytes, more than %d", len(t.Creds), maxCredsBytes)
	}
	if !strings.Contains(t.Creds, "-----BEGIN NATS USER JWT-----") || !strings.Contains(t.Creds, "-----BEGIN USER NKEY SEED-----") {
		return bad("creds is not a NATS .creds text (a user JWT and its seed)")
	}
	return nil
}

// NewTokenID and NewTokenSecret turn random bytes into a token id (hex) and secret (base64url);
// they are here so that the rule that checks them is beside the one that makes them.
func NewTokenID(random [tokenIDBytes]byte) string { return hex.EncodeToString(random[:]) }

// NewTokenSecret: see NewTokenID.
func NewTokenSecret(random [tokenSecretBytes]byte) string {
	return base64.RawURLEncoding.EncodeToString(random[:])
}

// TokenTTLTag starts the tag of a token user's JWT that says the lifetime the token was made
// with (a Go duration, "1m0s"): the node reads it to say why an expired token is refused, when
// the server refuses the token user before the service can. The token's JSON stays as it was,
// so that an older mesh-host still reads a newer token.
const TokenTTLTag = "mesh-enrol-ttl:"

// TokenRootTag starts the tag of a token user's JWT that names the root of trust the token
// pins: "mesh-enrol-root:4:sha256:<hex>", its version and fingerprint (Root.Fingerprint). The
// enrolled node takes that root from the bus only when its fingerprint is this one
// (PinnedTrust). It is a tag, not a field of the token's JSON, for TokenTTLTag's reason: a host
// from before roots parses a token strictly and would refuse a new field, and a token must stay
// usable by the hosts an operator still installs.
const TokenRootTag = "mesh-enrol-root:"

// TokenRoot is the root a token pins.
type TokenRoot struct {
	Version     uint64
	Fingerprint string // "sha256:<hex>"
}

func (r TokenRoot) String() string { return fmt.Sprintf("root v%d (%s)", r.Version, r.Fingerprint) }

// Tag is r as a token user's JWT tag.
func (r TokenRoot) Tag() string {
	return fmt.Sprintf("%s%d:%s", TokenRootTag, r.Version, r.Fingerprint)
}

// TokenRootOf finds the root a token user's JWT tags pin; ok is false when none does (a token
// made before roots, or before one was published). A tag of TokenRootTag's form that does not
// parse is an error, never read as no pin: a token that meant to pin a root must not enrol a
// node that trusts anything.
func TokenRootOf(tags []string) (r TokenRoot, ok bool, err error) {
	for _, tag := range tags {
		v, found := strings.CutPrefix(tag, TokenRootTag)
		if !found {
			continue
		}
		ver, fp, _ := strings.Cut(v, ":")
		n, perr := strconv.ParseUint(ver, 10, 64)
		if perr != nil || n == 0 || n > MaxRootVersion || !strings.HasPrefix(fp, "sha256:") || checkHex(strings.TrimPrefix(fp, "sha256:"), 32) != nil {
			return TokenRoot{}, false, fmt.Errorf("enrolment token: its root tag %s is not %s<version>:sha256:<64 hex digits>", quote(tag, 100), TokenRootTag)
		}
		return TokenRoot{Version: n, Fingerprint: fp}, true, nil
	}
	return TokenRoot{}, false, nil
}

// TokenExpired is the refusal of a token used after it expired at expires, made for node (""
// any node) with lifetime ttl (0: not known), worded the same whichever side decides it: the
// node, when the server refused the token user, or the enrolment service.
func TokenExpired(expires time.Time, node string, ttl time.Duration) string {
	made := "made for any node"
	if node != "" {
		made = "made for " + node
	}
	if ttl > 0 {
		made += ", ttl " + ShortDuration(ttl)
	}
	return fmt.Sprintf("this token expired at %s (%s): make a new one with mesh-release enrol-token", expires.UTC().Format(time.RFC3339), made)
}

// ShortDuration writes d as a flag is given, without zero units: 1m, 1h, 1h30m, 90s as 1m30s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// TokenKey is the enrolment bucket's key of the token id.
func TokenKey(id string) string { return "token." + id }

// NodeKey is the nodes bucket's key of a node.
func NodeKey(node string) string { return "node." + node }

// TokenInboxPrefix is the inbox prefix of a token user's connection (userPub is its nkey),
// the only subjects it may subscribe to. It cannot collide with a node's inbox
// (NodeInboxPrefix) or with a default inbox, _INBOX.<nuid>.
func TokenInboxPrefix(userPub string) string { return "_INBOX.enrol." + userPub }

// ValidPrefix checks a bus names' prefix: it starts bucket, stream and subject names, so it
// may hold only ASCII letters, digits, '-' and '_', and at most 64 of them.
func ValidPrefix(p string) error {
	if p == "" {
		return errors.New("the prefix is empty")
	}
	if len(p) > maxPrefixBytes {
		return fmt.Errorf("the prefix is %d bytes, more than %d", len(p), maxPrefixBytes)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("the prefix %s holds %q at byte %d; a prefix may hold only letters, digits, '-' and '_'", quote(p, maxPrefixBytes), string(c), i)
		}
	}
	return nil
}

// checkBusURL accepts a NATS URL a node can dial: nats, tls, ws or wss, with a host.
func checkBusURL(s string) error {
	if len(s) > MaxTokenURLBytes {
		return fmt.Errorf("%d bytes, more than %d", len(s), MaxTokenURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%s is not a URL", quote(s, 64))
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		return fmt.Errorf("%s: scheme %s is not nats, tls, ws or wss", quote(s, 64), quote(u.Scheme, 16))
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%s has no host", quote(s, 64))
	}
	if u.User != nil {
		return fmt.Errorf("%s carries a user or password; the token's creds are its identity", quote(u.Redacted(), 64))
	}
	return nil
}

// checkHex accepts exactly n bytes in lowercase hex.
func checkHex(s string, n int) error {
	if len(s) != 2*n {
		return fmt.Errorf("%d characters; it must be %d lowercase hex digits", len(s), 2*n)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return fmt.Errorf("%q at %d; it must be %d lowercase hex digits", string(c), i, 2*n)
		}
	}
	return nil
}

// quote quotes s for a message, cut to at most n bytes (and said so) so that nothing an input
// carries makes a message grow.
func quote(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}

// cutError is an error whose text, built from an input (a key, a value), is cut to
// maxErrorText bytes; errors.Is and As still see the error it wraps.
type cutError struct{ err error }

const maxErrorText = 256

func (e cutError) Error() string {
	s := e.err.Error()
	if len(s) > maxErrorText {
		return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:maxErrorText], ""), len(s))
	}
	return s
}

func (e cutError) Unwrap() error { return e.err }

// Messages of the enrolment service. Each is at most its Max…Bytes; the service's micro
// endpoint and the node check it before decoding.
const (
	MaxEnrolRequestBytes = MaxTokenBytes + 1<<10
	MaxEnrolReplyBytes   = 64 << 10
	MaxRevokeBytes       = 1 << 10
)

// EnrolRequest is what `mesh-host enrol` sends to Names.EnrolSubject: the token's text, the node
// id it enrols as, the public key of the nkey user it made (its seed stays on the node), and
// whether it replaces a node already enrolled under that id (revoking its key).
type EnrolRequest struct {
	Token     string `json:"token"`
	Node      string `json:"node"`
	PublicKey string `json:"public_key"`
	Replace   bool   `json:"replace,omitempty"`
}

// EnrolReply is the service's answer to a good request: the node user's JWT (signed by the
// account), the CA certificate(s) in PEM, the bus URLs and prefix, and the release and target
// keys the node is to trust (the standard base64 of ed25519 public keys, as release.pub holds
// them).
type EnrolReply struct {
	JWT               string   `json:"jwt"`
	CAPEM             string   `json:"ca_pem"`
	URLs              []string `json:"urls"`
	Prefix            string   `json:"prefix"`
	TrustedKeys       []string `json:"trusted_keys"`
	TrustedTargetKeys []string `json:"trusted_target_keys"`
}

// RevokeRequest asks the service (admin only: Names.RevokeSubject) to revoke a node's key.
type RevokeRequest struct {
	Node string `json:"node"`
}

// RevokeReply says what was revoked, and whether it already was (AlreadyRevoked: the revocation
// was pushed again, RevokedAt is the first one).
type RevokeReply struct {
	Node           string    `json:"node"`
	PublicKey      string    `json:"public_key"`
	RevokedAt      time.Time `json:"revoked_at"`
	AlreadyRevoked bool      `json:"already_revoked,omitempty"`
}

// ParseEnrolRequest decodes and checks a request: bounded, strict, a valid node id, a user
// public key of the right shape (the service checks it is a valid nkey), and a token text of at
// most MaxTokenBytes (the service parses it).
func ParseEnrolRequest(b []byte) (EnrolRequest, error) {
	var r EnrolRequest
	if err := decodeBounded(b, MaxEnrolRequestBytes, "enrolment request", &r); err != nil {
		return EnrolRequest{}, err
	}
	if err := ValidNode(r.Node); err != nil {
		return EnrolRequest{}, fmt.Errorf("enrolment request: node: %w", err)
	}
	if err := checkUserKey(r.PublicKey); err != nil {
		return EnrolRequest{}, fmt.Errorf("enrolment request: public_key: %w", err)
	}
	if r.Token == "" {
		return EnrolRequest{}, errors.New("enrolment request: token is empty")
	}
	if len(r.Token) > MaxTokenBytes {
		return EnrolRequest{}, fmt.Errorf("enrolment request: token is %d bytes, more than %d", len(r.Token), MaxTokenBytes)
	}
	return r, nil
}

// ParseEnrolReply decodes and checks the service's answer.
func ParseEnrolReply(b []byte) (EnrolReply, error) {
	var r EnrolReply
	if err := decodeBounded(b, MaxEnrolReplyBytes, "enrolment reply", &r); err != nil {
		return EnrolReply{}, err
	}
	if r.JWT == "" {
		return EnrolReply{}, errors.New("enrolment reply: jwt is empty")
	}
	if !strings.Contains(r.CAPEM, "-----BEGIN CERTIFICATE-----") {
		return EnrolReply{}, errors.New("enrolment reply: ca_pem holds no PEM certificate")
	}
	if len(r.URLs) == 0 || len(r.URLs) > MaxTokenURLs {
		return EnrolReply{}, fmt.Errorf("enrolment reply: %d urls; it must name 1 to %d", len(r.URLs), MaxTokenURLs)
	}
	for i, u := range r.URLs {
		if err := checkBusURL(u); err != nil {
			return EnrolReply{}, fmt.Errorf("enrolment reply: urls[%d]: %w", i, err)
		}
	}
	if err := ValidPrefix(r.Prefix); err != nil {
		return EnrolReply{}, fmt.Errorf("enrolment reply: prefix: %w", err)
	}
	for name, keys := range map[string][]string{"trusted_keys": r.TrustedKeys, "trusted_target_keys": r.TrustedTargetKeys} {
		if _, err := ParseTrustedKeys(keys); err != nil {
			return EnrolReply{}, fmt.Errorf("enrolment reply: %s: %w", name, err)
		}
	}
	return r, nil
}

// ParseRevokeRequest decodes and checks a revocation request.
func ParseRevokeRequest(b []byte) (RevokeRequest, error) {
	var r RevokeRequest
	if err := decodeBounded(b, MaxRevokeBytes, "revocation request", &r); err != nil {
		return RevokeRequest{}, err
	}
	if err := ValidNode(r.Node); err != nil {
		return RevokeRequest{}, fmt.Errorf("revocation request: node: %w", err)
	}
	return r, nil
}

// ParseRevokeReply decodes the service's answer to a revocation.
func ParseRevokeReply(b []byte) (RevokeReply, error) {
	var r RevokeReply
	if err := decodeBounded(b, MaxRevokeBytes, "revocation reply", &r); err != nil {
		return RevokeReply{}, err
	}
	return r, nil
}

func decodeBounded(b []byte, limit int, what string, v any) error {
	if len(b) > limit {
		return fmt.Errorf("%s: %d bytes, more than the %d it may have", what, len(b), limit)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return fmt.Errorf("%s: empty", what)
	}
	if err := DecodeStrict(b, v); err != nil {
		return fmt.Errorf("%s: %w", what, cutError{err})
	}
	return nil
}

// checkUserKey checks the shape of an nkey user public key: 'U' and 55 more base32 characters
// (the service checks its checksum with nkeys).
func checkUserKey(s string) error {
	if len(s) != 56 || s[0] != 'U' {
		return fmt.Errorf("%s is not an nkey user public key (56 characters starting with U)", quote(s, 60))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'A' && c <= 'Z' || c >= '2' && c <= '7') {
			return fmt.Errorf("%s holds %q at %d; an nkey is base32", quote(s, 60), string(c), i)
		}
	}
	return nil
}
