package meshtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/buslayout"
)

// OperatorBus is an embedded server in operator mode laid out as `mesh-release serve` lays it
// out (release/trust): a mesh account with JetStream and the mesh's buckets, and a nodes account
// without JetStream whose users are signed by its signing key and which imports from the mesh
// account what nodes use, under wire.NodeJSAPIPrefix. It imports both what nodes used before
// decision 0022 (consumer create, flow control) and what they use since (direct gets, the KV
// writes), as a bus in transition does (decision 0024), so that a node user with either set of
// permissions works. release/trust proves its own store; this is for host tests, which may not
// link the release side's code into meshtest.
type OperatorBus struct {
	Names wire.Names
	// Admin is a user of the mesh account allowed everything.
	Admin *Conn
	// NodesAccount is the nodes account's public key, the IssuerAccount of its users.
	NodesAccount string

	port        int
	nodesSigner nkeys.KeyPair
}

// operatorSharing is what the nodes account imports: service imports of the JetStream API
// (renamed under wire.NodeJSAPIPrefix) and of the heartbeats and flow control, stream imports of
// the KV writes and of what the mesh account sends to node inboxes.
func operatorSharing(names wire.Names) []*jwt.Import {
	api := func(call string) *jwt.Import {
		return &jwt.Import{Name: call, Subject: jwt.Subject("$JS.API." + call), LocalSubject: jwt.RenamingSubject(wire.NodeJSAPIPrefix + "." + call), Type: jwt.Service}
	}
	return []*jwt.Import{
		api("STREAM.INFO.*"),
		api("DIRECT.GET.>"),
		api("CONSUMER.CREATE.>"), // before decision 0022
		{Name: "flow control", Subject: "$JS.FC.>", Type: jwt.Service}, // before decision 0022
		{Name: "key writes", Subject: "$KV.>", Type: jwt.Stream},
		{Name: "heartbeats", Subject: jwt.Subject(names.HeartbeatWildcard()), Type: jwt.Service},
		{Name: "renewal", Subject: jwt.Subject(names.RenewWildcard()), Type: jwt.Service},
		{Name: "node inboxes", Subject: jwt.Subject(wire.NodeInboxPrefix(">")), Type: jwt.Stream},
	}
}

// StartOperatorBus runs an OperatorBus on a free loopback port until the test ends, with the
// mesh's buckets and heartbeat stream made as `mesh-release init` makes them.
func StartOperatorBus(tb testing.TB) *OperatorBus {
	tb.Helper()
	b := &OperatorBus{Names: wire.NamesFor("")}
	tr := newOperatorTrust(tb, b.Names)
	b.NodesAccount, b.nodesSigner = tr.nodesPub, tr.nodesSigner

	ns := serve(tb, &server.Options{
		Port: server.RANDOM_PORT, JetStream: true, StoreDir: filepath.Join(tb.TempDir(), "jetstream"),
		TrustedOperators: []*jwt.OperatorClaims{tr.operator}, SystemAccount: tr.sysPub, AccountResolver: tr.resolver,
	})
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	b.port = ns.Addr().(*net.TCPAddr).Port

	b.Admin = connectAdmin(tb, b.URL(), tr.mesh)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := buslayout.Create(ctx, b.Admin.JS, b.Names); err != nil {
		tb.Fatal(err)
	}
	return b
}

// operatorTrust is what an operator-mode server is given to trust, as release/trust makes it:
// the operator, its system account, the mesh account (JetStream, exporting what nodes use) and
// the nodes account (importing it, with a signing key for node users), held in a resolver.
type operatorTrust struct {
	operator    *jwt.OperatorClaims // as the server reads it, issuer and ID filled in
	resolver    *server.MemAccResolver
	sysPub      string
	mesh        nkeys.KeyPair
	nodesPub    string
	nodesSigner nkeys.KeyPair
}

func newOperatorTrust(tb testing.TB, names wire.Names) operatorTrust {
	tb.Helper()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	operatorPub, _ := operator.PublicKey()
	account := func() (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		pub, _ := kp.PublicKey()
		return kp, pub
	}
	tr := operatorTrust{resolver: &server.MemAccResolver{}}
	_, tr.sysPub = account()
	var meshPub string
	tr.mesh, meshPub = account()
	_, tr.nodesPub = account()
	tr.nodesSigner, _ = account()
	nodesSigningPub, _ := tr.nodesSigner.PublicKey()

	oc := jwt.NewOperatorClaims(operatorPub)
	oc.SystemAccount = tr.sysPub
	otext, err := oc.Encode(operator)
	must(err)
	tr.operator, err = jwt.DecodeOperatorClaims(otext)
	must(err)
	store := func(ac *jwt.AccountClaims) {
		text, err := ac.Encode(operator)
		must(err)
		must(tr.resolver.Store(ac.Subject, text))
	}
	store(jwt.NewAccountClaims(tr.sysPub))
	mc := jwt.NewAccountClaims(meshPub)
	mc.Name = "mesh"
	mc.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	nc := jwt.NewAccountClaims(tr.nodesPub)
	nc.Name = "nodes"
	nc.SigningKeys.Add(nodesSigningPub)
	for _, im := range operatorSharing(names) {
		e := &jwt.Export{Name: im.Name, Subject: im.Subject, Type: im.Type}
		if im.Type == jwt.Service {
			e.ResponseType = jwt.ResponseTypeSingleton
		}
		mc.Exports.Add(e)
		im.Account = meshPub
		nc.Imports.Add(im)
	}
	store(mc)
	store(nc)
	return tr
}

// connectAdmin connects to url as a new user of the mesh account (the release side's admin),
// closed when the test ends.
func connectAdmin(tb testing.TB, url string, mesh nkeys.KeyPair) *Conn {
	tb.Helper()
	adminJWT, adminSeed := signUser(tb, mesh, "", nil, jwt.Permissions{}, time.Time{})
	anc, err := nats.Connect(url, nats.Name("meshtest admin"), nats.Timeout(30*time.Second), nats.UserJWTAndSeed(adminJWT, adminSeed))
	if err != nil {
		tb.Fatal(err)
	}
	js, err := jetstream.New(anc)
	if err != nil {
		anc.Close()
		tb.Fatal(err)
	}
	c := &Conn{NC: anc, JS: js}
	tb.Cleanup(c.Close)
	return c
}

// URL is the bus's client URL.
func (b *OperatorBus) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", b.port) }

// NodeJWT is a user JWT for userPub in the nodes account with perms, signed by the nodes
// account's signing key as `mesh-release` signs a node's; expires zero: never.
func (b *OperatorBus) NodeJWT(tb testing.TB, userPub string, perms jwt.Permissions, expires time.Time, tags ...string) string {
	tb.Helper()
	text, _ := signUser(tb, b.nodesSigner, b.NodesAccount, &userPub, perms, expires, tags...)
	return text
}

// NodeCreds writes a .creds file (mode 0600) in dir for a new key pair of node's, whose JWT has
// perms, as `mesh-host enrol` leaves it, and returns its path and the user's public key.
func (b *OperatorBus) NodeCreds(tb testing.TB, dir, node string, perms jwt.Permissions, tags ...string) (path, userPub string) {
	tb.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		tb.Fatal(err)
	}
	userPub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	creds, err := jwt.FormatUserConfig(b.NodeJWT(tb, userPub, perms, time.Time{}, tags...), seed)
	if err != nil {
		tb.Fatal(err)
	}
	path = filepath.Join(dir, node+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path, userPub
}

// signUser signs a user JWT with signer (for issuerAccount when signer is a signing key), for
// *userPub or, when nil, a new user whose seed it returns.
func signUser(tb testing.TB, signer nkeys.KeyPair, issuerAccount string, userPub *string, perms jwt.Permissions, expires time.Time, tags ...string) (text, seed string) {
	tb.Helper()
	var pub string
	if userPub != nil {
		pub = *userPub
	} else {
		kp, err := nkeys.CreateUser()
		if err != nil {
			tb.Fatal(err)
		}
		pub, _ = kp.PublicKey()
		s, _ := kp.Seed()
		seed = string(s)
	}
	uc := jwt.NewUserClaims(pub)
	uc.IssuerAccount = issuerAccount
	uc.Permissions = perms
	uc.Tags.Add(tags...)
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	text, err := uc.Encode(signer)
	if err != nil {
		tb.Fatal(err)
	}
	return text, seed
}

// LegacyNodePermissions are a node user's permissions as release/trust.NodePermissions gave them
// before decision 0022 (commit d112008): a consumer filtered to each of its keys and to an
// object's chunks, and flow control replies, instead of direct gets and subscriptions on its
// keys. Hosts enrolled then hold them until they renew their credentials (decision 0024).
func LegacyNodePermissions(names wire.Names, node string) jwt.Permissions {
	const (
		jsStreamInfo  = wire.NodeJSAPIPrefix + ".STREAM.INFO."
		jsConsumerNew = wire.NodeJSAPIPrefix + ".CONSUMER.CREATE."
		jsDirectGet   = wire.NodeJSAPIPrefix + ".DIRECT.GET."
	)
	kvStream := func(bucket string) string { return "KV_" + bucket }
	kvSubject := func(bucket, key string) string { return "$KV." + bucket + "." + key }
	objStream := func(bucket string) string { return "OBJ_" + bucket }
	watchKey := func(bucket, key string) string {
		return jsConsumerNew + kvStream(bucket) + ".*." + kvSubject(bucket, key)
	}
	flowControl := func(stream string) []string {
		return []string{"$JS.FC." + stream + ".*.*", "$JS.FC.*.*." + stream + ".*.*"}
	}
	var p jwt.Permissions
	p.Pub.Allow.Add(names.Heartbeat(node))
	objs := []string{names.Archives(), names.Blobs()}
	for _, s := range []string{
		kvStream(names.Declarations()), kvStream(names.Targets()), kvStream(names.Releases()),
		kvStream(names.Withdrawals()),
	} {
		p.Pub.Allow.Add(jsStreamInfo + s)
	}
	for _, o := range objs {
		p.Pub.Allow.Add(jsStreamInfo + objStream(o))
	}
	p.Pub.Allow.Add(
		watchKey(names.Declarations(), node),
		watchKey(names.Targets(), wire.NodeTargetKey(node)),
		watchKey(names.Targets(), wire.FleetTargetKey),
		watchKey(names.Withdrawals(), wire.WithdrawalsKey),
		jsDirectGet+kvStream(names.Releases())+"."+kvSubject(names.Releases(), ">"),
	)
	for _, o := range objs {
		p.Pub.Allow.Add(
			jsConsumerNew+objStream(o)+".*.$O."+o+".C.*",
			jsDirectGet+objStream(o)+".$O."+o+".M.*",
		)
	}
	for _, s := range []string{kvStream(names.Declarations()), kvStream(names.Targets()), kvStream(names.Withdrawals())} {
		p.Pub.Allow.Add(flowControl(s)...)
	}
	for _, o := range objs {
		p.Pub.Allow.Add(flowControl(objStream(o))...)
	}
	p.Sub.Allow.Add(wire.NodeInboxPrefix(node) + ".>")
	return p
}

// NodeConn is a connection as a node's user (creds, a .creds file for node), the JetStream
// context a host uses (under wire.NodeJSAPIPrefix), and what the server refused it.
type NodeConn struct {
	NC *nats.Conn
	JS jetstream.JetStream

	mu      sync.Mutex
	refused []string
}

// ConnectNode connects to b as node with creds; the connection is closed when the test ends.
func (b *OperatorBus) ConnectNode(tb testing.TB, creds, node string) *NodeConn {
	tb.Helper()
	c := &NodeConn{}
	nc, err := nats.Connect(b.URL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(wire.NodeInboxPrefix(node)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.refused = append(c.refused, err.Error())
			c.mu.Unlock()
		}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	if c.JS, err = jetstream.NewWithAPIPrefix(nc, wire.NodeJSAPIPrefix); err != nil {
		tb.Fatal(err)
	}
	c.NC = nc
	return c
}

// Refused is every asynchronous error the server sent the connection so far (permission
// violations among them), once a flush has come back after them.
func (c *NodeConn) Refused(tb testing.TB) []string {
	tb.Helper()
	if err := c.NC.Flush(); err != nil { // a refusal comes back before the flush does
		tb.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.refused...)
}
