// Package enrol is the node's side of enrolment: a one-time token turned into the node's own
// credentials.
//
// From a one-time token it makes the node's own nkey user (the seed never leaves the node), asks
// the mesh's enrolment service over TLS pinned to the token's CA fingerprint to sign it, and writes
// what the host then runs with: ROOT/node.creds, ROOT/ca.pem and ROOT/host.json.
// docs/decisions/0011-trust-on-the-bus.md, "Enrolment", is the design; release/enrol is the
// service.
package enrol

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/host/truststore"
	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// The files enrolment writes under the root.
const (
	CredsFile  = "node.creds"
	CAFile     = "ca.pem"
	ConfigFile = "host.json"
)

// Options are one enrolment.
type Options struct {
	Token string // the token's text
	Root  string // the host's root (required)
	// Node is the node id to enrol as (required; Node chooses it). A token for a node refuses
	// any other.
	Node string
	// Replace asks the service to revoke the key the node id is enrolled with and take its place.
	Replace bool
	// Timeout bounds connecting and the request, per URL; default DefaultTimeout.
	Timeout time.Duration
	// Name is how the connection is named on the server; default "mesh-host enrol <node>".
	Name string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Result is what an enrolment wrote.
type Result struct {
	Node      string
	PublicKey string // the node user's nkey
	URL       string // the bus URL it enrolled through (redacted)
	Creds     string // ROOT/node.creds
	CA        string // ROOT/ca.pem
	Config    string // ROOT/host.json
	// Root is the root of trust the token pinned and the node stored; zero when the token
	// pinned none (the node trusts host.json's keys until it takes root v1 from the bus).
	Root wire.TokenRoot
}

// RefusedError is the enrolment service's refusal: its code (400, 403, 404, 409, 500) and
// reason.
type RefusedError struct{ Code, Reason string }

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the enrolment service refused (%s): %s", e.Code, e.Reason)
}

// ExpiredError is a token the server refused after it expired: the token user's JWT expires
// with the token, so the server refuses the connection before the enrolment service can say
// why, and the node says it from the token.
type ExpiredError struct {
	Expires time.Time
	Node    string        // the node the token was made for ("": any)
	TTL     time.Duration // the token's lifetime (0: not known)
}

func (e *ExpiredError) Error() string { return wire.TokenExpired(e.Expires, e.Node, e.TTL) }

// PinError is a server whose TLS chain holds no certificate with the token's CA fingerprint:
// not this mesh's server, or a token from another mesh.
type PinError struct {
	URL       string
	Want      string   // the token's ca_sha256
	Presented []string // the SHA-256 of each certificate the server presented
}

func (e *PinError) Error() string {
	return fmt.Sprintf("the server at %s is not the mesh the token names: the token pins CA sha256 %s, the server presented %s",
		e.URL, e.Want, strings.Join(e.Presented, ", "))
}

// OtherNodeError is a root enrolled as another node than the one an enrolment is for, refused
// without Replace: its host.json and creds may be a running host's, which would be rewritten
// under it.
type OtherNodeError struct {
	Root     string
	Enrolled string // the node the root is enrolled as (host.json's "node")
	Node     string // the node this enrolment is for
	ByToken  bool   // the token names Node (else --node, MESH_HOST_NODE or the hostname chose it)
}

func (e *OtherNodeError) Error() string {
	this := "this enrols node " + e.Node
	if e.ByToken {
		this = "the token is for node " + e.Node
	}
	return fmt.Sprintf("enrol: the root %s is enrolled as node %s, and %s: enrolling would rewrite %s's host.json and %s under the host running as it; enrol %s with its own root (--root), or give --replace to make this root node %s",
		e.Root, e.Enrolled, this, e.Enrolled, CredsFile, e.Node, e.Node)
}

// maxChainShown bounds how many presented certificates an error lists.
const maxChainShown = 4

// ChooseNode picks the node id to enrol as: the one given (--node), else the token's, else
// MESH_HOST_NODE, else host.json's "node", else the short hostname. A token for one node refuses
// another, and so does MESH_HOST_NODE naming another (the host would run as it).
func ChooseNode(given, token, env, configured string, hostname func() (string, error)) (string, error) {
	node := given
	for _, n := range []string{token, env, configured} {
		if node == "" {
			node = n
		}
	}
	if node == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("no node id: give --node, or a token for a node; the hostname is unreadable: %w", err)
		}
		node, _, _ = strings.Cut(h, ".")
	}
	if err := wire.ValidNode(node); err != nil {
		return "", err
	}
	if token != "" && token != node {
		return "", fmt.Errorf("the token is for node %s, not %s", token, node)
	}
	if env != "" && env != node {
		return "", fmt.Errorf("MESH_HOST_NODE is %s, but this enrols %s: the host would run as %s with %s's credentials; unset it or enrol as %s", env, node, env, node, env)
	}
	return node, nil
}

// ConfiguredNode is host.json's "node" under root, or "" (no file, no key).
func ConfiguredNode(root string) (string, error) {
	m, err := readConfig(filepath.Join(root, ConfigFile))
	if err != nil {
		return "", err
	}
	var node string
	if raw, ok := m["node"]; ok {
		if err := json.Unmarshal(raw, &node); err != nil {
			return "", fmt.Errorf("%s: \"node\" is not a string", filepath.Join(root, ConfigFile))
		}
	}
	return node, nil
}

// Enrol enrols the node: it parses the token, makes the node's nkey pair, asks the service
// through the token's URLs in turn (the first that connects answers), checks the answer, and
// writes ROOT/node.creds (0600), ROOT/ca.pem and ROOT/host.json (0600, merged into what is
// there), host.json last. A token that pins a root of trust (wire.TokenRootTag) has the node,
// as itself, read that root from the bus and store it (ROOT/trust) before host.json, once its
// fingerprint is the token's and its root keys signed it: a root that does not match is refused
// by name (*RootPinError) and nothing is written. A refusal is a *RefusedError, a server that
// fails the pin a *PinError, a root enrolled as another node (without Replace) an
// *OtherNodeError.
func Enrol(ctx context.Context, o Options) (Result, error) {
	tok, err := prepare(&o)
	if err != nil {
		return Result{}, err
	}
	pin, pinned, err := tokenRoot(tok)
	if err != nil {
		return Result{}, err
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Result{}, fmt.Errorf("enrol: make the node's key: %w", err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	req, _ := json.Marshal(wire.EnrolRequest{Token: strings.TrimSpace(o.Token), Node: o.Node, PublicKey: pub, Replace: o.Replace})
	reply, used, err := askAny(ctx, tok, o, req)
	if err != nil {
		return Result{}, err
	}
	if err := checkReply(reply, tok, pub); err != nil {
		return Result{}, err
	}
	if pinned {
		r, err := fetchRoot(ctx, tok, o, reply, seed, pin)
		if err != nil {
			return Result{}, err
		}
		if err := truststore.Save(o.Root, r); err != nil {
			return Result{}, fmt.Errorf("enrol: %w", err)
		}
	}
	res, err := write(o, reply, used, pub, seed)
	if err != nil {
		return Result{}, err
	}
	res.Root = pin
	return res, nil
}

// prepare checks o and the root before anything is spent, and fills in o's defaults: the token
// parses and allows o.Node, the root is there (made if missing), its host.json is a JSON object,
// and the root is not enrolled as another node unless o.Replace.
func prepare(o *Options) (wire.EnrolToken, error) {
	tok, err := wire.ParseToken(o.Token)
	if err != nil {
		return tok, err
	}
	if o.Root == "" {
		return tok, errors.New("enrol: no root directory")
	}
	if err := wire.ValidNode(o.Node); err != nil {
		return tok, fmt.Errorf("enrol: %w", err)
	}
	if tok.Node != "" && tok.Node != o.Node {
		return tok, fmt.Errorf("enrol: the token is for node %s, not %s", tok.Node, o.Node)
	}
	*o = o.withDefaults()
	// Expiry is the server's and the service's to judge, by their clocks: a node's clock may be
	// wrong before it has ever synchronised, so an expiry past by this clock alone refuses
	// nothing; it only names why the server refused the token user.
	if err := rollback.MakeRoot(o.Root); err != nil {
		return tok, fmt.Errorf("enrol: %w", err)
	}
	cfg, err := readConfig(filepath.Join(o.Root, ConfigFile))
	if err != nil {
		return tok, err
	}
	if enrolled := enrolledAs(o.Root, cfg); enrolled != "" && enrolled != o.Node && !o.Replace {
		return tok, &OtherNodeError{Root: o.Root, Enrolled: enrolled, Node: o.Node, ByToken: tok.Node == o.Node}
	}
	return tok, nil
}

// enrolledAs is the node a root is enrolled as: host.json's "node" while the credentials it names
// (or ROOT/node.creds) are there; "" when it is not enrolled. A host.json that names a node with
// no credentials (written by hand or by a package) is a setting enrolment may change.
func enrolledAs(root string, cfg map[string]json.RawMessage) string {
	var node, creds string
	json.Unmarshal(cfg["node"], &node)
	json.Unmarshal(cfg["nats_creds"], &creds)
	if creds == "" {
		creds = filepath.Join(root, CredsFile)
	}
	if node == "" {
		return ""
	}
	if _, err := os.Stat(creds); err != nil {
		return ""
	}
	return node
}

// askAny asks through each of the token's URLs in turn until one connects and the service
// answers, and returns the answer and the URL (redacted) that gave it. A refusal by the service
// ends it: another URL reaches the same service.
func askAny(ctx context.Context, tok wire.EnrolToken, o Options, req []byte) (wire.EnrolReply, string, error) {
	tokenJWT, err := jwt.ParseDecoratedJWT([]byte(tok.Creds))
	if err != nil {
		return wire.EnrolReply{}, "", fmt.Errorf("enrol: the token's creds: %w", err)
	}
	tokenKey, err := jwt.ParseDecoratedUserNKey([]byte(tok.Creds))
	if err != nil {
		return wire.EnrolReply{}, "", fmt.Errorf("enrol: the token's creds: %w", err)
	}
	tokenPub, _ := tokenKey.PublicKey()
	tokenSeed, _ := tokenKey.Seed()
	var errs []error
	for _, u := range tok.URLs {
		reply, err := ask(ctx, u, tok, o, req, tokenJWT, string(tokenSeed), tokenPub)
		if err == nil {
			return reply, text.Redact(u), nil
		}
		var refused *RefusedError
		if errors.As(err, &refused) {
			return wire.EnrolReply{}, "", err
		}
		if authRefused(err) && !o.Now().Before(tok.Expires) {
			return wire.EnrolReply{}, "", &ExpiredError{Expires: tok.Expires, Node: tok.Node, TTL: tokenTTL(tokenJWT)}
		}
		errs = append(errs, err)
	}
	return wire.EnrolReply{}, "", fmt.Errorf("enrol: no bus URL of the token answered: %w", errors.Join(errs...))
}

// write writes what the node runs with: ROOT/node.creds (0600) and ROOT/ca.pem, then host.json
// (0600, merged into what is there) last.
func write(o Options, reply wire.EnrolReply, used, pub string, seed []byte) (Result, error) {
	creds, err := jwt.FormatUserConfig(reply.JWT, seed)
	if err != nil {
		return Result{}, fmt.Errorf("enrol: %w", err)
	}
	res := Result{Node: o.Node, PublicKey: pub, URL: used,
		Creds: filepath.Join(o.Root, CredsFile), CA: filepath.Join(o.Root, CAFile), Config: filepath.Join(o.Root, ConfigFile)}
	if err := atomicfile.WriteFile(res.Creds, creds, 0o600); err != nil {
		return Result{}, fmt.Errorf("enrol: write %s: %w", res.Creds, err)
	}
	if err := atomicfile.WriteFile(res.CA, []byte(reply.CAPEM), 0o644); err != nil {
		return Result{}, fmt.Errorf("enrol: write %s: %w", res.CA, err)
	}
	if err := writeConfig(res.Config, o.Node, reply, res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// ask sends the request through the bus at u: TLS pinned to the token's CA, as the token's user,
// its inbox under the prefix that user may receive on.
func ask(ctx context.Context, u string, tok wire.EnrolToken, o Options, req []byte, tokenJWT, tokenSeed, tokenPub string) (wire.EnrolReply, error) {
	shown := text.Redact(u)
	parsed, err := url.Parse(u)
	if err != nil {
		return wire.EnrolReply{}, fmt.Errorf("%s: %w", shown, err)
	}
	host := parsed.Hostname()
	var mu sync.Mutex
	var pinErr error
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The server's chain is checked against the pinned CA alone, below: no system root
		// decides, and the leaf must chain to the pinned CA and name the host dialled.
		InsecureSkipVerify: true, //nolint:gosec // replaced by VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			err := verifyPinned(cs.PeerCertificates, tok.CASHA256, host, shown)
			mu.Lock()
			pinErr = err
			mu.Unlock()
			return err
		},
	}
	timeout := o.Timeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	nc, err := nats.Connect(u,
		nats.Name(o.Name),
		nats.Secure(tc),
		nats.UserJWTAndSeed(tokenJWT, tokenSeed),
		nats.CustomInboxPrefix(wire.TokenInboxPrefix(tokenPub)),
		nats.Timeout(timeout),
		nats.NoReconnect(),
		nats.IgnoreDiscoveredServers(),
		nats.DontRandomize(),
	)
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		if pinErr != nil {
			return wire.EnrolReply{}, pinErr
		}
		if authRefused(err) {
			return wire.EnrolReply{}, &authError{shown: shown, err: text.RedactError(err)}
		}
		return wire.EnrolReply{}, fmt.Errorf("connect to %s: %w", shown, text.RedactError(err))
	}
	defer nc.Close()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(rctx, wire.NamesFor(tok.Prefix).EnrolSubject(), req)
	if errors.Is(err, nats.ErrNoResponders) {
		return wire.EnrolReply{}, fmt.Errorf("%s: no enrolment service answers on %s; is `mesh-release serve` or `mesh-release enrol-service` running?", shown, wire.NamesFor(tok.Prefix).EnrolSubject())
	}
	if err != nil {
		return wire.EnrolReply{}, fmt.Errorf("%s: ask the enrolment service: %w", shown, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return wire.EnrolReply{}, &RefusedError{Code: text.Cut(text.Printable(code), 8),
			Reason: text.Cut(text.Printable(m.Header.Get("Nats-Service-Error")), 1024)}
	}
	reply, err := wire.ParseEnrolReply(m.Data)
	if err != nil {
		return wire.EnrolReply{}, fmt.Errorf("%s: %w", shown, err)
	}
	return reply, nil
}

// authError is the server refusing the token user's credentials at connect.
type authError struct {
	shown string
	err   error
}

func (e *authError) Error() string { return fmt.Sprintf("connect to %s: %v", e.shown, e.err) }
func (e *authError) Unwrap() error { return e.err }

// authRefused reports whether err is the server refusing the token user (its JWT expired or
// is not one the server accepts), not a failure to reach it.
func authRefused(err error) bool {
	var ae *authError
	return errors.As(err, &ae) || errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired)
}

// tokenTTL is the lifetime the token user's JWT was made with: its wire.TokenTTLTag, else its
// expiry less its issue time (a token from a mesh-release that did not tag it), else 0.
func tokenTTL(tokenJWT string) time.Duration {
	uc, err := jwt.DecodeUserClaims(tokenJWT)
	if err != nil {
		return 0
	}
	for _, tag := range uc.Tags {
		if v, ok := strings.CutPrefix(tag, wire.TokenTTLTag); ok {
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				return d
			}
		}
	}
	if uc.Expires > uc.IssuedAt && uc.IssuedAt > 0 {
		return time.Duration(uc.Expires-uc.IssuedAt) * time.Second
	}
	return 0
}

// verifyPinned accepts a chain that holds a certificate whose DER has SHA-256 pin, and whose
// leaf chains to that certificate and names host.
func verifyPinned(certs []*x509.Certificate, pin, host, shown string) error {
	if len(certs) == 0 {
		return fmt.Errorf("the server at %s presented no certificate", shown)
	}
	var ca *x509.Certificate
	var seen []string
	for i, c := range certs {
		sum := sha256.Sum256(c.Raw)
		h := hex.EncodeToString(sum[:])
		if h == pin {
			ca = c
		}
		if i < maxChainShown {
			seen = append(seen, fmt.Sprintf("%s (%s)", h, text.Cut(text.Printable(c.Subject.CommonName), 64)))
		}
	}
	if len(certs) > maxChainShown {
		seen = append(seen, fmt.Sprintf("and %d more", len(certs)-maxChainShown))
	}
	if ca == nil {
		return &PinError{URL: shown, Want: pin, Presented: seen}
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host}); err != nil {
		return fmt.Errorf("the server at %s presented the pinned CA, but its own certificate does not hold for %s under it: %w", shown, host, err)
	}
	return nil
}

// checkReply checks that the service's answer is for this node's key and carries the pinned CA.
func checkReply(r wire.EnrolReply, tok wire.EnrolToken, pub string) error {
	claims, err := jwt.DecodeUserClaims(r.JWT)
	if err != nil {
		return fmt.Errorf("enrol: the service's JWT: %w", err)
	}
	if claims.Subject != pub {
		return fmt.Errorf("enrol: the service signed a JWT for %s, not for this node's key %s", claims.Subject, pub)
	}
	for rest := []byte(r.CAPEM); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return fmt.Errorf("enrol: the service's ca_pem does not hold the pinned CA %s", tok.CASHA256)
		}
		if sum := sha256.Sum256(block.Bytes); block.Type == "CERTIFICATE" && hex.EncodeToString(sum[:]) == tok.CASHA256 {
			return nil
		}
	}
}

// readConfig reads host.json as an object of raw values; a missing file is an empty object. A
// file that is not one JSON object is refused rather than overwritten.
func readConfig(path string) (map[string]json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]json.RawMessage{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("enrol: %w", err)
	}
	var m map[string]json.RawMessage
	if err := wire.DecodeStrict(b, &m); err != nil || m == nil {
		if err == nil {
			err = errors.New("it is null")
		}
		return nil, fmt.Errorf("enrol: %s is not a JSON object (%v); fix or remove it, enrolment keeps the settings in it", path, err)
	}
	return m, nil
}

// writeConfig sets the bus settings in host.json and keeps every other key as it was. The URLs
// are written tls:// where the service gave nats://: the node reached the bus only over TLS.
// trusted_keys and trusted_target_keys are set when the service gave some, else left alone.
func writeConfig(path, node string, r wire.EnrolReply, res Result) error {
	m, err := readConfig(path)
	if err != nil {
		return err
	}
	urls := make([]string, len(r.URLs))
	for i, u := range r.URLs {
		if rest, ok := strings.CutPrefix(u, "nats://"); ok {
			u = "tls://" + rest
		}
		urls[i] = u
	}
	set := func(k string, v any) {
		b, _ := json.Marshal(v)
		m[k] = b
	}
	set("node", node)
	set("nats_urls", urls)
	set("nats_creds", res.Creds)
	set("nats_ca", res.CA)
	set("prefix", r.Prefix)
	// A node user lives in the nodes account and reaches JetStream through its imports.
	set("js_api_prefix", wire.NodeJSAPIPrefix)
	if len(r.TrustedKeys) > 0 {
		set("trusted_keys", r.TrustedKeys)
	}
	if len(r.TrustedTargetKeys) > 0 {
		set("trusted_target_keys", r.TrustedTargetKeys)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("enrol: %w", err)
	}
	if err := atomicfile.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("enrol: write %s: %w", path, err)
	}
	return nil
}

// DefaultTimeout bounds one request to the enrolment service unless Options.Timeout says otherwise.
const DefaultTimeout = 15 * time.Second

// withDefaults returns o with every zero field at its default (decision 0041).
func (o Options) withDefaults() Options {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Name == "" {
		o.Name = "mesh-host enrol " + o.Node
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
