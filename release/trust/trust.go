// Package trust keeps the mesh's NATS identities: operator, accounts and users, with their signing
// keys.
//
// It creates, once, under DATA/trust/ the operator, the system account and its user, the mesh
// account (the streams, the release side's admin user) and the nodes account (node and enrolment
// token users, importing from the mesh account only what nodes need), each with its signing key,
// and from then on signs the users the bus admits (a node, an enrolment token) and revokes them.
// Its other half, EnsureTLS, keeps the bus's own CA and server certificate under DATA/tls/. It
// writes no cryptography of its own: identities are NATS decentralized auth
// (github.com/nats-io/jwt/v2, github.com/nats-io/nkeys), certificates crypto/x509
// (docs/decisions/0011-trust-on-the-bus.md).
package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/internal/atomicfile"
)

// The files of DATA/trust/. Seeds and .creds files are 0600, the directory 0700; every file is
// written once and never overwritten, except nodes.jwt, which a revocation replaces (atomically)
// with a newer one signed by the same operator.
const (
	OperatorSeedFile = "operator.nk"
	OperatorJWTFile  = "operator.jwt"
	SystemSeedFile   = "system.nk"
	SystemJWTFile    = "system.jwt"
	SystemCredsFile  = "system.creds"
	// The mesh account: the streams, and the release side's user.
	AccountSeedFile        = "account.nk"
	AccountJWTFile         = "account.jwt"
	AccountSigningSeedFile = "account-signing.nk"
	AdminCredsFile         = "admin.creds"
	// The nodes account: node and enrolment token users; its JWT holds their revocations.
	NodesSeedFile        = "nodes.nk"
	NodesJWTFile         = "nodes.jwt"
	NodesSigningSeedFile = "nodes-signing.nk"
	// ResolverDir is the server's directory account resolver (DATA/trust/accounts/): the
	// account JWTs the server holds, updated by $SYS.REQ.CLAIMS.UPDATE.
	ResolverDir = "accounts"
	// lockFile serialises changes to nodes.jwt between processes (serve and a separate
	// enrolment service may both revoke).
	lockFile = "nodes.lock"
)

// Dir and TLSDir are where Ensure and EnsureTLS keep their files under a data directory.
const (
	Dir    = "trust"
	TLSDir = "tls"
)

// Names the identities carry: what an operator sees in `nats server report connections` or in
// a decoded JWT.
const (
	OperatorName      = "mesh"
	SystemAccountName = "SYS"
	AccountName       = "mesh"
	NodesAccountName  = "mesh-nodes"
	SystemUserName    = "mesh-release system"
	AdminUserName     = "mesh-release admin"
	// NodeTag marks every node user; NodeTagPrefix+id names which node it is.
	NodeTag       = "mesh-node"
	NodeTagPrefix = "node:"
	// TokenTag marks an enrolment token's user.
	TokenTag = "mesh-enrol-token"
	// AdminTag marks the release side's user.
	AdminTag = "mesh-admin"
)

// Store is the mesh's identities under one data directory, loaded by Ensure. Its methods are safe
// for concurrent use.
type Store struct {
	dataDir, dir string

	operator, system, account, signing, nodes, nodesSigning nkeys.KeyPair
	operatorPub, systemPub, accountPub, signingPub          string
	nodesPub, nodesSigningPub                               string
	// legacySigningPub is the nodes account's first signing key while it is in transition
	// (transition.go); guarded by mu.
	legacySigningPub                   string
	operatorJWT, systemJWT, accountJWT string

	mu sync.Mutex // held while nodes.jwt is read, changed and written
}

// Ensure loads the identities under dataDir/trust, creating them first if the directory does not
// exist yet. Creation is all or nothing: every file is written into a temporary directory beside
// it, which is then renamed into place, so a crash leaves either no trust directory or a whole
// one, and two processes racing end up using the same identities. An existing directory is never
// written over: a file missing from it, or one that does not belong with the others, is an error
// naming it, and so is a directory made with a single account for nodes and the release side
// (an earlier development build).
func Ensure(dataDir string) (*Store, error) {
	if dataDir == "" {
		return nil, errors.New("trust: no data directory; pass --data DIR")
	}
	dir := filepath.Join(dataDir, Dir)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("trust: data directory %s: %w", dataDir, err)
	}
	if !complete(dir) {
		if err := create(dataDir, dir); err != nil {
			return nil, err
		}
	}
	return load(dataDir, dir)
}

// complete reports whether dir exists and is not empty (an empty directory an operator made
// beforehand is taken over by create's rename).
func complete(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// create makes a whole set of identities in a temporary directory and renames it to dir. If
// another process got there first (dir now holds files) the set made here is discarded.
func create(dataDir, dir string) error {
	tmp, err := os.MkdirTemp(dataDir, ".trust-new-*")
	if err != nil {
		return fmt.Errorf("trust: make the identities in %s: %w", dataDir, err)
	}
	defer os.RemoveAll(tmp) // gone after a successful rename; the leftovers after a failure
	if err := os.Chmod(tmp, 0o700); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	files, err := newIdentities()
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := atomicfile.WriteFile(filepath.Join(tmp, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("trust: write %s: %w", f.name, err)
		}
	}
	if err := atomicfile.Rename(tmp, dir); err != nil {
		if complete(dir) {
			return nil // made meanwhile by another process: use that one
		}
		return fmt.Errorf("trust: put the new identities in place at %s: %w", dir, err)
	}
	return nil
}

type file struct {
	name string
	data []byte
}

// newIdentities makes the operator, the system account and user, the mesh account and its
// signing key and the admin user, the nodes account and its signing key, as the files of
// DATA/trust.
func newIdentities() ([]file, error) {
	k, err := newKeys()
	if err != nil {
		return nil, err
	}
	jwts, err := k.signAccounts()
	if err != nil {
		return nil, err
	}
	// The system user is signed by the system account's own key: nothing else signs in it.
	systemCreds, err := newUserCreds(k.system, "", SystemUserName, nil, jwt.Permissions{}, 0)
	if err != nil {
		return nil, fmt.Errorf("trust: system user: %w", err)
	}
	adminCreds, err := newUserCreds(k.signing, k.pub(k.account), AdminUserName, []string{AdminTag}, jwt.Permissions{}, 0)
	if err != nil {
		return nil, fmt.Errorf("trust: admin user: %w", err)
	}
	seed := func(kp nkeys.KeyPair) []byte {
		s, _ := kp.Seed()
		return append(s, '\n')
	}
	return []file{
		{OperatorSeedFile, seed(k.operator)},
		{OperatorJWTFile, []byte(jwts.operator + "\n")},
		{SystemSeedFile, seed(k.system)},
		{SystemJWTFile, []byte(jwts.system + "\n")},
		{SystemCredsFile, systemCreds},
		{AccountSeedFile, seed(k.account)},
		{AccountJWTFile, []byte(jwts.account + "\n")},
		{AccountSigningSeedFile, seed(k.signing)},
		{AdminCredsFile, adminCreds},
		{NodesSeedFile, seed(k.nodes)},
		{NodesJWTFile, []byte(jwts.nodes + "\n")},
		{NodesSigningSeedFile, seed(k.nodesSigning)},
	}, nil
}

// identityKeys are the key pairs of a new trust store.
type identityKeys struct {
	operator, system, account, signing, nodes, nodesSigning nkeys.KeyPair
}

// newKeys makes the operator's key and the accounts' and their signing keys.
func newKeys() (identityKeys, error) {
	var k identityKeys
	var err error
	if k.operator, err = nkeys.CreateOperator(); err != nil {
		return k, fmt.Errorf("trust: operator key: %w", err)
	}
	for _, a := range []struct {
		kp   *nkeys.KeyPair
		what string
	}{
		{&k.system, "system account key"},
		{&k.account, "account key"},
		{&k.signing, "account signing key"},
		{&k.nodes, "nodes account key"},
		{&k.nodesSigning, "nodes account signing key"},
	} {
		if *a.kp, err = nkeys.CreateAccount(); err != nil {
			return k, fmt.Errorf("trust: %s: %w", a.what, err)
		}
	}
	return k, nil
}

// pub is kp's public key; a key pair made here always has one.
func (identityKeys) pub(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// accountJWTs are the operator's and the accounts' JWTs of a new trust store.
type accountJWTs struct{ operator, system, account, nodes string }

// signAccounts signs the operator and, with its key, the system account, the mesh account
// (JetStream without limits, its exports, its signing key) and the nodes account.
func (k identityKeys) signAccounts() (accountJWTs, error) {
	var out accountJWTs
	var err error
	oc := jwt.NewOperatorClaims(k.pub(k.operator))
	oc.Name = OperatorName
	oc.SystemAccount = k.pub(k.system)
	if out.operator, err = oc.Encode(k.operator); err != nil {
		return out, fmt.Errorf("trust: sign the operator: %w", err)
	}

	sc := jwt.NewAccountClaims(k.pub(k.system))
	sc.Name = SystemAccountName
	if out.system, err = sc.Encode(k.operator); err != nil {
		return out, fmt.Errorf("trust: sign the system account: %w", err)
	}

	ac := jwt.NewAccountClaims(k.pub(k.account))
	ac.Name = AccountName
	ac.SigningKeys.Add(k.pub(k.signing))
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit, Streams: jwt.NoLimit, Consumer: jwt.NoLimit,
	}
	ac.Exports = meshExports()
	if out.account, err = encodeAccount(ac, k.operator); err != nil {
		return out, fmt.Errorf("trust: sign the mesh account: %w", err)
	}

	// No JetStream (the zero limits), and a user signed without permissions may do nothing.
	nc := jwt.NewAccountClaims(k.pub(k.nodes))
	nc.Name = NodesAccountName
	nc.SigningKeys.Add(k.pub(k.nodesSigning))
	nc.DefaultPermissions.Pub.Deny.Add(">")
	nc.DefaultPermissions.Sub.Deny.Add(">")
	if nc.Imports, err = nodesImports(k.account, k.pub(k.nodes)); err != nil {
		return out, fmt.Errorf("trust: the nodes account's imports: %w", err)
	}
	if out.nodes, err = encodeAccount(nc, k.operator); err != nil {
		return out, fmt.Errorf("trust: sign the nodes account: %w", err)
	}
	return out, nil
}

// encodeAccount validates an account's claims and signs them with the operator's key.
func encodeAccount(ac *jwt.AccountClaims, operator nkeys.KeyPair) (string, error) {
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return ac.Encode(operator)
}

// load reads and cross-checks the identities in dir.
func load(dataDir, dir string) (*Store, error) {
	s := &Store{dataDir: dataDir, dir: dir}
	if err := singleAccount(dir); err != nil {
		return nil, err
	}
	var err error
	if s.operator, s.operatorPub, err = readSeed(dir, OperatorSeedFile, nkeys.PrefixByteOperator); err != nil {
		return nil, err
	}
	if s.system, s.systemPub, err = readSeed(dir, SystemSeedFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if s.account, s.accountPub, err = readSeed(dir, AccountSeedFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if s.signing, s.signingPub, err = readSeed(dir, AccountSigningSeedFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if s.nodes, s.nodesPub, err = readSeed(dir, NodesSeedFile, nkeys.PrefixByteAccount); err != nil {
		return nil, err
	}
	if s.operatorJWT, err = readJWT(dir, OperatorJWTFile); err != nil {
		return nil, err
	}
	oc, err := jwt.DecodeOperatorClaims(s.operatorJWT)
	if err != nil {
		return nil, broken(dir, OperatorJWTFile, err)
	}
	if oc.Subject != s.operatorPub || oc.SystemAccount != s.systemPub {
		return nil, broken(dir, OperatorJWTFile, errors.New("it is not the operator of operator.nk with the account of system.nk as its system account"))
	}
	if s.systemJWT, err = readJWT(dir, SystemJWTFile); err != nil {
		return nil, err
	}
	if err := s.checkAccount(SystemJWTFile, s.systemJWT, s.systemPub); err != nil {
		return nil, err
	}
	if s.accountJWT, err = readJWT(dir, AccountJWTFile); err != nil {
		return nil, err
	}
	if err := s.checkAccount(AccountJWTFile, s.accountJWT, s.accountPub); err != nil {
		return nil, err
	}
	ac, _ := jwt.DecodeAccountClaims(s.accountJWT)
	if !ac.SigningKeys.Contains(s.signingPub) {
		return nil, broken(dir, AccountJWTFile, fmt.Errorf("the key in %s is not one of its signing keys", AccountSigningSeedFile))
	}
	if err := s.recoverTransition(); err != nil {
		return nil, err
	}
	if err := s.reload(); err != nil {
		return nil, err
	}
	for _, name := range []string{SystemCredsFile, AdminCredsFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return nil, missing(dir, name, err)
		}
	}
	return s, nil
}

// checkAccount checks that text is an account JWT for pub, signed by the operator.
func (s *Store) checkAccount(name, text, pub string) error {
	ac, err := jwt.DecodeAccountClaims(text)
	if err != nil {
		return broken(s.dir, name, err)
	}
	if ac.Subject != pub || ac.Issuer != s.operatorPub {
		return broken(s.dir, name, fmt.Errorf("it is account %s signed by %s, not the account of its seed signed by the operator %s", ac.Subject, ac.Issuer, s.operatorPub))
	}
	return nil
}

// singleAccount refuses a trust directory made by an earlier development build, which kept node
// and token users in the mesh account itself (where a node could write any key through a reply
// subject; see accounts.go): its node users cannot be moved, so the way out is new identities.
func singleAccount(dir string) error {
	for _, name := range []string{NodesSeedFile, NodesJWTFile, NodesSigningSeedFile} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	if _, err := os.Stat(filepath.Join(dir, AccountSeedFile)); err != nil {
		return nil
	}
	return fmt.Errorf("trust: %s was made by an earlier development build, with node users in the mesh account; this build keeps them in an account of their own (%s, %s, %s). Move the directory aside to make new identities; every node must then enrol again", dir, NodesSeedFile, NodesJWTFile, NodesSigningSeedFile)
}

func readSeed(dir, name string, prefix nkeys.PrefixByte) (nkeys.KeyPair, string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil, "", missing(dir, name, err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, "", broken(dir, name, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, "", broken(dir, name, err)
	}
	if !nkeys.IsValidPublicKey(pub) || nkeys.Prefix(pub) != prefix {
		return nil, "", broken(dir, name, fmt.Errorf("it holds a %s seed", nkeys.Prefix(pub)))
	}
	return kp, pub, nil
}

func readJWT(dir, name string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return "", missing(dir, name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func missing(dir, name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("trust: %s is incomplete: %s is missing; restore the directory from a backup, or move it aside to make new identities (every node must then enrol again): %w", dir, name, err)
	}
	return fmt.Errorf("trust: read %s: %w", filepath.Join(dir, name), err)
}

func broken(dir, name string, err error) error {
	return fmt.Errorf("trust: %s does not belong with the other identities in %s (restore the directory from a backup, or move it aside to make new ones, after which every node must enrol again): %w", name, dir, err)
}

// newUserCreds makes a user key pair and a JWT for it signed by signer (issuerAccount set when
// signer is a signing key, not the account itself), expiring at expires (Unix seconds; 0: never),
// and returns them as a .creds text.
func newUserCreds(signer nkeys.KeyPair, issuerAccount, name string, tags []string, perms jwt.Permissions, expires int64) ([]byte, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := user.PublicKey()
	text, err := signUser(signer, issuerAccount, pub, name, tags, perms, expires)
	if err != nil {
		return nil, err
	}
	seed, _ := user.Seed()
	return formatCreds(text, seed)
}

// formatCreds is a user JWT and its seed as a .creds text, as nats.UserCredentials reads it.
func formatCreds(text string, seed []byte) ([]byte, error) {
	b, err := jwt.FormatUserConfig(text, seed)
	if err != nil {
		return nil, fmt.Errorf("trust: format a .creds text: %w", err)
	}
	return b, nil
}

func signUser(signer nkeys.KeyPair, issuerAccount, userPub, name string, tags []string, perms jwt.Permissions, expires int64) (string, error) {
	uc := jwt.NewUserClaims(userPub)
	uc.Name = name
	uc.IssuerAccount = issuerAccount
	uc.Tags.Add(tags...)
	uc.Permissions = perms
	uc.Expires = expires
	vr := jwt.CreateValidationResults()
	uc.Validate(vr)
	if errs := vr.Errors(); len(errs) > 0 {
		return "", fmt.Errorf("user %s: %w", name, errors.Join(errs...))
	}
	return uc.Encode(signer)
}

// DataDir is the data directory Ensure was given.
func (s *Store) DataDir() string { return s.dataDir }

// Dir is DATA/trust.
func (s *Store) Dir() string { return s.dir }

// ResolverDir is the server's account resolver directory, DATA/trust/accounts.
func (s *Store) ResolverDir() string { return filepath.Join(s.dir, ResolverDir) }

// SystemCreds is the path of the system user's .creds: the user that pushes account updates
// ($SYS.REQ.CLAIMS.UPDATE), for Revoke.
func (s *Store) SystemCreds() string { return filepath.Join(s.dir, SystemCredsFile) }

// AdminCreds is the path of the release side's .creds: every permission in the mesh account.
// Node and token users are in the nodes account (NodeUser, TokenUser).
func (s *Store) AdminCreds() string { return filepath.Join(s.dir, AdminCredsFile) }

// CAFile is where EnsureTLS keeps the bus's CA certificate (DATA/tls/ca.pem), the file clients
// pass as --ca / MESH_NATS_CA. It exists once EnsureTLS has run on the same data directory.
func (s *Store) CAFile() string { return filepath.Join(s.dataDir, TLSDir, CAFile) }

// OperatorPublicKey, SystemAccountPublicKey, AccountPublicKey (the mesh account) and
// NodesAccountPublicKey are the identities' public keys; SigningPublicKey is the mesh account's
// signing key, the admin user's issuer, and NodesSigningPublicKey the nodes account's, the issuer
// of every node and token user.
func (s *Store) OperatorPublicKey() string      { return s.operatorPub }
func (s *Store) SystemAccountPublicKey() string { return s.systemPub }
func (s *Store) AccountPublicKey() string       { return s.accountPub }
func (s *Store) SigningPublicKey() string       { return s.signingPub }
func (s *Store) NodesAccountPublicKey() string  { return s.nodesPub }
func (s *Store) NodesSigningPublicKey() string  { return s.nodesSigningPub }

// OperatorJWT is the operator's JWT, the one a server trusts.
func (s *Store) OperatorJWT() string { return s.operatorJWT }

// OperatorClaims are the operator JWT decoded, as server options take them.
func (s *Store) OperatorClaims() *jwt.OperatorClaims {
	oc, _ := jwt.DecodeOperatorClaims(s.operatorJWT) // checked by load
	return oc
}

// AccountJWTs returns the current JWTs of the system account, the mesh account and the nodes
// account, by public key: what a server's account resolver must hold. The nodes account's is
// read afresh, since a revocation replaces it.
func (s *Store) AccountJWTs() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text, err := s.readNodesJWT()
	if err != nil {
		return nil, err
	}
	return map[string]string{s.systemPub: s.systemJWT, s.accountPub: s.accountJWT, s.nodesPub: text}, nil
}

// Revoked reports whether userPub is in the nodes account's revocations.
func (s *Store) Revoked(userPub string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nc, err := s.readNodes()
	if err != nil {
		return false, err
	}
	_, ok := nc.Revocations[userPub]
	return ok, nil
}

// readNodesJWT reads nodes.jwt and checks it is the nodes account's, signed by the operator.
func (s *Store) readNodesJWT() (string, error) {
	text, err := readJWT(s.dir, NodesJWTFile)
	if err != nil {
		return "", err
	}
	if err := s.checkAccount(NodesJWTFile, text, s.nodesPub); err != nil {
		return "", err
	}
	return text, nil
}

func (s *Store) readNodes() (*jwt.AccountClaims, error) {
	text, err := s.readNodesJWT()
	if err != nil {
		return nil, err
	}
	return jwt.DecodeAccountClaims(text)
}
