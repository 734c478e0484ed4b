// Package enrol turns a one-time token into a node's own identity on the bus.
//
// IssueToken makes the token (and records it, never its secret), and Service answers a node that
// presents it with a user JWT for the nkey the node made, and revokes a node's key when the
// operator asks. docs/decisions/0011-trust-on-the-bus.md, "Enrolment", is the design.
package enrol

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trustroot"
	"github.com/novox/mesh-host/wire"
)

// Store is what enrolment needs of the trust store (release/trust's *Store): users signed by
// the mesh account's signing key, and revocation pushed to the server.
type Store interface {
	// NodeUser signs the JWT of node's user, whose nkey public key is userPub, with exactly the
	// permissions a node has.
	NodeUser(names wire.Names, node, userPub string) (jwt string, err error)
	// TokenUser makes a user, expiring at expires, that may only request names.EnrolSubject()
	// and receive on its inbox wire.TokenInboxPrefix(userPub); creds is its .creds text. Its JWT
	// is tagged wire.TokenTTLTag with ttl, the token's lifetime, and with tags.
	TokenUser(names wire.Names, expires time.Time, ttl time.Duration, tags ...string) (creds string, userPub string, err error)
	// Revoke adds userPub to the account's revocations as of at and pushes the account JWT
	// through nc, a system account connection.
	Revoke(ctx context.Context, nc *nats.Conn, userPub string, at time.Time) error
	// NodesSigningPublicKey is the key NodeUser signs with, recorded in each NodeRecord.
	NodesSigningPublicKey() string
	// PushIfNewer pushes the accounts through nc (a system user's connection) when the
	// servers hold older ones, and says whether it did.
	PushIfNewer(ctx context.Context, nc *nats.Conn) (bool, error)
	// InTransition reports whether users signed before decision 0022 are still accepted, and
	// nodes may ask for theirs signed again (decision 0024).
	InTransition() bool
}

// Token lifetimes: DefaultTTL when none is given; MaxTTL the longest a token may live (a stolen
// token is good until it expires, for the node it names).
const (
	DefaultTTL = time.Hour
	MaxTTL     = 30 * 24 * time.Hour
)

// Bucket limits. A record is a few hundred bytes; the buckets keep the latest value of each key
// and no byte cap (a full bucket would refuse enrolments), and nothing in them expires by itself:
// the service purges token records ExpiredTokenKept after their expiry.
const (
	MaxRecordBytes   = 4 << 10
	ExpiredTokenKept = 7 * 24 * time.Hour
	nodeHistory      = 5
)

// TokenRecord is the enrolment bucket's value under wire.TokenKey(id). It holds hashes only: the
// secret is stored nowhere, and a token whose text differs in any byte from the one issued is
// refused.
type TokenRecord struct {
	SecretSHA256 string     `json:"secret_sha256"`
	TokenSHA256  string     `json:"token_sha256"`
	Node         string     `json:"node,omitempty"`
	IssuedAt     time.Time  `json:"issued_at"`
	Expires      time.Time  `json:"expires"`
	UsedAt       *time.Time `json:"used_at,omitempty"`
	UsedBy       string     `json:"used_by,omitempty"` // the node that enrolled with it
}

// NodeRecord is the nodes bucket's value under wire.NodeKey(node): the key the node enrolled,
// when and with which token, and when it was revoked. A record is never deleted: a revoked node
// stays visible as revoked.
type NodeRecord struct {
	PublicKey  string     `json:"public_key"`
	EnrolledAt time.Time  `json:"enrolled_at"`
	TokenID    string     `json:"token_id"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	// Replaced are the keys this node had before, each revoked when it was replaced (newest
	// last, at most maxReplaced).
	Replaced []string `json:"replaced,omitempty"`
	// SignedBy is the nodes account's signing key that signed the node's current user; absent
	// in records from before decision 0024, whose users were signed by the first one.
	SignedBy string `json:"signed_by,omitempty"`
	// RenewedAt is when the node's user was last signed again at its asking (decision 0024).
	RenewedAt *time.Time `json:"renewed_at,omitempty"`
}

const maxReplaced = 16

// TokenOptions are what IssueToken needs besides the bus and the store.
type TokenOptions struct {
	// Node is the node the token is for; empty: any node id (the first to use it).
	Node string
	// TTL is how long the token is good for; 0 is DefaultTTL, at most MaxTTL.
	TTL time.Duration
	// URLs are the bus URLs nodes dial (required).
	URLs []string
	// CAFile is the PEM file of the bus's CA (release/trust's CAFile); the token pins the SHA-256
	// of its first certificate's DER.
	CAFile string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Issued is a token IssueToken made.
type Issued struct {
	Token   string // the text to hand to `mesh-host enrol`
	ID      string
	Node    string
	Expires time.Time
	// Root is the root of trust the token pins, the newest on the bus; nil when the bus holds
	// none (the node then trusts the keys the enrolment reply names, as before roots).
	Root *wire.TokenRoot
}

// withDefaults returns o with every zero field at its default (decision 0041).
func (o TokenOptions) withDefaults() TokenOptions {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// IssueToken makes a one-time enrolment token: a token user from store, a random id and secret,
// and records it in names.Enrolment() (creating the bucket if it is missing).
func IssueToken(ctx context.Context, js jetstream.JetStream, store Store, names wire.Names, o TokenOptions) (Issued, error) {
	if o.Node != "" {
		if err := wire.ValidNode(o.Node); err != nil {
			return Issued{}, fmt.Errorf("enrolment token: %w", err)
		}
	}
	o = o.withDefaults()
	if o.TTL < time.Minute || o.TTL > MaxTTL {
		return Issued{}, fmt.Errorf("enrolment token: a lifetime of %s is not between 1m and %s", o.TTL, MaxTTL)
	}
	if len(o.URLs) == 0 {
		return Issued{}, errors.New("enrolment token: no bus URL for nodes to dial; pass --url")
	}
	_, pin, err := ReadCA(o.CAFile)
	if err != nil {
		return Issued{}, fmt.Errorf("enrolment token: %w", err)
	}
	root, err := newestRoot(ctx, js, names)
	if err != nil {
		return Issued{}, fmt.Errorf("enrolment token: %w", err)
	}
	var tags []string
	if root != nil {
		tags = append(tags, root.Tag())
	}
	now := o.Now().UTC().Truncate(time.Second)
	expires := now.Add(o.TTL)
	creds, _, err := store.TokenUser(names, expires, o.TTL, tags...)
	if err != nil {
		return Issued{}, fmt.Errorf("enrolment token: make its user: %w", err)
	}
	var id [16]byte
	var secret [32]byte
	rand.Read(id[:])
	rand.Read(secret[:])
	t := wire.EnrolToken{URLs: o.URLs, CASHA256: pin, Prefix: names.Prefix, Node: o.Node,
		ID: wire.NewTokenID(id), Secret: wire.NewTokenSecret(secret), Expires: expires, Creds: creds}
	text, err := wire.FormatToken(t)
	if err != nil {
		return Issued{}, err
	}
	rec := TokenRecord{SecretSHA256: hashHex([]byte(t.Secret)), TokenSHA256: hashHex([]byte(text)),
		Node: o.Node, IssuedAt: now, Expires: expires}
	kv, err := bucket(ctx, js, names, enrolmentBucket(names))
	if err != nil {
		return Issued{}, fmt.Errorf("enrolment token: %w", err)
	}
	b, _ := json.Marshal(rec)
	if _, err := kv.Create(ctx, wire.TokenKey(t.ID), b); err != nil {
		return Issued{}, fmt.Errorf("enrolment token: record it in %s: %w", names.Enrolment(), err)
	}
	return Issued{Token: text, ID: t.ID, Node: o.Node, Expires: expires, Root: root}, nil
}

// newestRoot is the root a new token pins: the newest of the chain on the bus walked as a node
// walks it (trustroot.History: a root after it that does not verify is left out, as a node leaves
// it), nil when the bus holds no root.
func newestRoot(ctx context.Context, js jetstream.JetStream, names wire.Names) (*wire.TokenRoot, error) {
	kv, err := js.KeyValue(ctx, names.Releases())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the roots in %s: %w", names.Releases(), err)
	}
	roots, err := trustroot.History(ctx, kv)
	if err != nil || len(roots) == 0 {
		return nil, err
	}
	r := roots[len(roots)-1]
	return &wire.TokenRoot{Version: r.Version, Fingerprint: r.Fingerprint()}, nil
}

// ReadCA reads a CA PEM file and returns it and the hex SHA-256 of its first certificate's DER,
// the fingerprint a token pins.
func ReadCA(path string) (pemText []byte, sha string, err error) {
	if path == "" {
		return nil, "", errors.New("no CA file: the token pins the bus's CA certificate")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("read the bus's CA: %w", err)
	}
	if len(b) > 1<<20 {
		return nil, "", fmt.Errorf("CA file %s is %d bytes; a CA certificate is a few KiB", path, len(b))
	}
	var block *pem.Block
	for rest := b; ; {
		if block, rest = pem.Decode(rest); block == nil || block.Type == "CERTIFICATE" {
			break
		}
	}
	if block == nil {
		return nil, "", fmt.Errorf("CA file %s holds no PEM CERTIFICATE", path)
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return nil, "", fmt.Errorf("CA file %s: %w", path, err)
	}
	sum := sha256.Sum256(block.Bytes)
	return b, hex.EncodeToString(sum[:]), nil
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func enrolmentBucket(n wire.Names) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: n.Enrolment(), Description: "mesh: enrolment tokens, key token.<id>; hashes only",
		History: 1, MaxValueSize: MaxRecordBytes, MaxBytes: -1, Storage: jetstream.FileStorage}
}

func nodesBucket(n wire.Names) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: n.Nodes(), Description: "mesh: enrolled nodes, key node.<id>: public key, enrolled, revoked",
		History: nodeHistory, MaxValueSize: MaxRecordBytes, MaxBytes: -1, Storage: jetstream.FileStorage}
}

// bucket opens the KV bucket cfg names, creating it when it is missing; one an operator made
// is used as it is. It is kept on as many servers as the mesh's other streams (on a cluster, not
// on one server whose loss would stop enrolment).
func bucket(ctx context.Context, js jetstream.JetStream, names wire.Names, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open KV bucket %s: %w", cfg.Bucket, err)
	}
	if cfg.Replicas, err = bus.Replicas(ctx, js, names); err != nil {
		return nil, err
	}
	kv, err = js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("create KV bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}
