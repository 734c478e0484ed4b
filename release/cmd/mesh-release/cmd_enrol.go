package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/enrol"
	"github.com/novox/mesh-host/release/trust"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

const enrolTokenAbout = `Prints one line, the token, on stdout (what it is for and until when on stderr). Hand it to
the node: ` + "`mesh-host enrol TOKEN`" + `, or MESH_ENROL_TOKEN when installing the package. The token is
good once, until it expires, for the node it names (any node without --node). It carries the
bus URLs nodes dial (--url), the fingerprint of the bus's CA, and a user that may only ask for
enrolment; the bus keeps only hashes of it. Needs the trust store ` + "`serve`" + ` made (--data) and an
enrolment service on the bus (` + "`serve`" + ` runs one, or ` + "`mesh-release enrol-service`" + `).`

const enrolServiceAbout = `Runs the mesh-enrol service in the foreground until interrupted: it answers ` + "`mesh-host enrol`" + `
(signing each node's own key with the trust store in --data) and ` + "`mesh-release node revoke`" + `.
` + "`serve`" + ` runs one itself; run this one beside a NATS you run yourself, or for a second instance
(they share the requests; a token is still good once). Nodes are given the --key-pub and
--target-key-pub keys for host.json, and the bus URLs of --url (default: those of their token).`

const nodeAbout = `revoke ID revokes the key node ID enrolled with: the server closes its connections and refuses
it from then on; its record is kept, marked revoked. Re-enrol the node with a new token.
Prints what was revoked.

cut-over ends the transition of a trust store made before nodes stopped creating consumers
(decision 0024): nodes enrolled before keep their old users, and renew them when they run a
host that asks. It lists the nodes not renewed yet and, when there are none (or with --force,
which cuts them off: each must enrol again with ` + "`mesh-host enrol --replace TOKEN`" + `), drops the
old signing key and the sharing old users needed, on every server. --dry-run only lists.`

// trustFlags are the flags of a command that uses the trust store serve keeps.
type trustFlags struct {
	busFlags
	data string
}

func (t *trustFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	t.busFlags.register(fs, getenv)
	fs.StringVar(&t.data, "data", "", "`DIR` of `mesh-release serve` (its trust/ and tls/: the admin's credentials, the bus's CA unless --ca) (default $"+envReleaseData+", else "+defaultDataDir+")")
}

// dataDir is --data, else $MESH_RELEASE_DATA, else serve's default, and where it came from
// ("" for the default).
func (t *trustFlags) dataDir() (dir, from string) {
	if t.data != "" {
		return t.data, "--data"
	}
	if dir, from = t.envFrom("", "", envReleaseData); dir != "" {
		return dir, from
	}
	return defaultDataDir, ""
}

// open opens the trust store under --data. It must exist: serve makes it, and one made here
// would be identities no server trusts.
func (t *trustFlags) open() (*trust.Store, error) {
	dir, from := t.dataDir()
	if _, err := os.Stat(filepath.Join(dir, trust.Dir, trust.AccountJWTFile)); err != nil {
		if from != "" {
			from = " (from " + from + ")"
		}
		return nil, fmt.Errorf("no trust store in %s%s: %w; --data (or $%s) must be the directory `mesh-release serve` runs with", dir, from, err, envReleaseData)
	}
	return trust.Ensure(dir)
}

// busURL is the bus URL the flags or the environment name.
func (t *trustFlags) busURL() string {
	if u := t.env(t.url, envNATSURL); u != "" {
		return u
	}
	return bus.DefaultURL
}

// caFile is the bus's CA: --ca, else $MESH_NATS_CA, else the one serve keeps in --data.
func (t *trustFlags) caFile(store *trust.Store) string {
	ca, _ := t.caFileFrom(store)
	return ca
}

func (t *trustFlags) caFileFrom(store *trust.Store) (ca, from string) {
	if ca, from = t.envFrom(t.ca, "--ca", envNATSCA); ca != "" {
		return ca, from
	}
	return store.CAFile(), fromData
}

// connectAs dials the bus with creds from the trust store (--creds or the environment win),
// trusting caFile.
func (t *trustFlags) connectAs(ctx context.Context, store *trust.Store, creds string, opts ...bus.ConnectOption) (*bus.Conn, error) {
	d := dial{url: t.busURL(), credsFrom: fromData}
	d.data, d.dataGiven = t.dataDir()
	if d.creds, d.credsFrom = t.envFrom(t.creds, "--creds", envNATSCreds); d.creds == "" {
		d.creds, d.credsFrom = creds, fromData
	}
	d.ca, d.caFrom = t.caFileFrom(store)
	return d.connect(ctx, opts...)
}

// connectAsSystem dials the bus as the trust store's system user: --creds names the admin,
// never it.
func (t *trustFlags) connectAsSystem(ctx context.Context, store *trust.Store, opts ...bus.ConnectOption) (*bus.Conn, error) {
	d := dial{url: t.busURL(), creds: store.SystemCreds(), credsFrom: fromData}
	d.data, d.dataGiven = t.dataDir()
	d.ca, d.caFrom = t.caFileFrom(store)
	return d.connect(ctx, opts...)
}

func enrolTokenCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	node := fs.String("node", "", "the node `ID` the token is for (default: any node, the first to use it)")
	ttl := fs.Duration("ttl", enrol.DefaultTTL, "how long the token is good for (at most "+enrol.MaxTTL.String()+")")
	var urls namesFlag
	fs.Var(&urls, "url", "a bus `URL` nodes dial, repeatable or comma-separated (default the --nats URL)")
	var t trustFlags
	t.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *node != "" {
		if err := wire.ValidNode(*node); err != nil {
			return usagef("--node: %v", err)
		}
	}
	if *ttl < time.Minute || *ttl > enrol.MaxTTL {
		return usagef("--ttl %s is not between 1m and %s", *ttl, enrol.MaxTTL)
	}
	if len(urls) == 0 {
		urls = namesFlag(strings.Split(t.busURL(), ","))
	}
	store, err := t.open()
	if err != nil {
		return err
	}
	c, err := t.connectAs(ctx, store, store.AdminCreds())
	if err != nil {
		return err
	}
	defer c.Close()
	iss, err := enrol.IssueToken(ctx, c.JS, store, t.names(), enrol.TokenOptions{Node: *node, TTL: *ttl, URLs: urls, CAFile: t.caFile(store)})
	if err != nil {
		return err
	}
	s.println(iss.Token)
	who := "any one node"
	if iss.Node != "" {
		who = "node " + iss.Node
	}
	fmt.Fprintf(s.err, "token %s: good once, for %s, until %s; nodes dial %s\n", iss.ID, who, iss.Expires.Format(time.RFC3339), text.Redact(strings.Join(urls, ",")))
	if iss.Root != nil {
		fmt.Fprintf(s.err, "token %s pins %s: the node takes that root from the bus and follows the chain from it\n", iss.ID, iss.Root)
	}
	if allLoopback(urls) {
		fmt.Fprintf(s.err, "note: %s is this machine only; a node elsewhere needs --url tls://HOST:PORT with an address it reaches (and in the server's certificate: serve --tls-name)\n", text.Redact(strings.Join(urls, ",")))
	}
	return nil
}

// allLoopback reports whether every URL names a loopback address or localhost.
func allLoopback(urls []string) bool {
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil {
			return false
		}
		h := p.Hostname()
		if ip := net.ParseIP(h); h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return len(urls) > 0
}

// readKeyFiles reads release.pub files: each the standard base64 of an ed25519 public key.
func readKeyFiles(flagName string, files []string) ([]string, error) {
	var keys []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flagName, err)
		}
		k := strings.TrimSpace(string(b))
		if _, err := wire.ParseTrustedKey(k); err != nil {
			return nil, fmt.Errorf("--%s %s: %w", flagName, f, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func enrolServiceCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var keyPubs, targetPubs, urls namesFlag
	fs.Var(&keyPubs, "key-pub", "a release.pub `FILE` whose key nodes trust for releases (trusted_keys), repeatable")
	fs.Var(&targetPubs, "target-key-pub", "a public key `FILE` whose key nodes trust for targets and withdrawals (trusted_target_keys), repeatable")
	fs.Var(&urls, "url", "the bus `URL` given to nodes for host.json, repeatable (default: the URLs of each node's token)")
	var t trustFlags
	t.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	keys, err := readKeyFiles("key-pub", keyPubs)
	if err != nil {
		return err
	}
	targetKeys, err := readKeyFiles("target-key-pub", targetPubs)
	if err != nil {
		return err
	}
	store, err := t.open()
	if err != nil {
		return err
	}
	log := logkey.Text(s.err, nil)
	admin, err := t.connectAs(ctx, store, store.AdminCreds(), bus.Lasting(log))
	if err != nil {
		return err
	}
	defer admin.Close()
	system, err := t.connectAsSystem(ctx, store, bus.Lasting(log))
	if err != nil {
		return fmt.Errorf("the system user (revocations): %w", err)
	}
	defer system.Close()
	svc, err := startEnrolService(ctx, admin.NC, system.NC, store, t.caFile(store), t.names(), urls, keys, targetKeys, log)
	if err != nil {
		return err
	}
	defer svc.Stop()
	s.printf("enrolment service %s answering on %s and %s (trust store %s)\n", enrol.ServiceName, t.names().EnrolSubject(), t.names().RevokeSubject(), store.Dir())
	<-ctx.Done()
	s.printf("stopping the enrolment service\n")
	return nil
}

// startEnrolService starts the enrolment service on admin (and system, for revocations) with
// the trust store: the one `enrol-service` runs, and the one `serve` runs in operator mode.
func startEnrolService(ctx context.Context, admin, system *nats.Conn, store *trust.Store, caFile string, names wire.Names, urls, keys, targetKeys []string, log *slog.Logger) (*enrol.Service, error) {
	return enrol.Start(ctx, enrol.Config{Admin: admin, System: system, Store: store, Names: names, CAFile: caFile,
		URLs: urls, TrustedKeys: keys, TrustedTargetKeys: targetKeys, Logger: log})
}

func nodeCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var t trustFlags
	t.register(fs, s.getenv)
	dryRun := fs.Bool("dry-run", false, "cut-over: list the nodes not renewed yet, change nothing")
	force := fs.Bool("force", false, "cut-over: cut over even though some nodes have not renewed (they must enrol again)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("want revoke ID, or cut-over")
	case pos[0] == "cut-over":
		if len(pos) != 1 {
			return usagef("cut-over takes no arguments")
		}
		return cutOver(ctx, s, &t, *dryRun, *force)
	case pos[0] != "revoke":
		return usagef("unknown node command %q; there are: revoke ID, cut-over%s", text.Bound(pos[0]), suggest(pos[0], []string{"revoke", "cut-over"}))
	case *dryRun || *force:
		return usagef("--dry-run and --force go with cut-over")
	case len(pos) != 2:
		return usagef("want revoke ID, one node id")
	}
	id := pos[1]
	if err := wire.ValidNode(id); err != nil {
		return usagef("%v", err)
	}
	store, err := t.open()
	if err != nil {
		return err
	}
	c, err := t.connectAs(ctx, store, store.AdminCreds())
	if err != nil {
		return err
	}
	defer c.Close()
	req, _ := json.Marshal(wire.RevokeRequest{Node: id})
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := c.NC.RequestWithContext(rctx, t.names().RevokeSubject(), req)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no enrolment service answers on %s; is `mesh-release serve` (with auth) or `mesh-release enrol-service` running?", t.names().RevokeSubject())
	}
	if err != nil {
		return fmt.Errorf("ask the enrolment service to revoke %s: %w", id, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return fmt.Errorf("the enrolment service refused (%s): %s", text.Cut(text.Printable(code), 8), text.Cut(text.Printable(m.Header.Get(micro.ErrorHeader)), 1024))
	}
	r, err := wire.ParseRevokeReply(m.Data)
	if err != nil {
		return err
	}
	if r.AlreadyRevoked {
		s.printf("node %s (key %s) was already revoked at %s; the revocation was pushed again\n", r.Node, r.PublicKey, r.RevokedAt.Format(time.RFC3339))
		return nil
	}
	s.printf("revoked node %s (key %s) at %s; the bus closes its connections and refuses it from now on\n", r.Node, r.PublicKey, r.RevokedAt.Format(time.RFC3339))
	return nil
}

// serveEnrolFlags are serve's flags for the enrolment service it runs in operator mode.
type serveEnrolFlags struct{ keyPubs, targetPubs namesFlag }

func (f *serveEnrolFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.keyPubs, "key-pub", "a release.pub `FILE` enrolled nodes are given to trust for releases (trusted_keys), repeatable")
	fs.Var(&f.targetPubs, "target-key-pub", "a public key `FILE` enrolled nodes are given to trust for targets and withdrawals (trusted_target_keys), repeatable")
}

// keys reads the key files; serve calls it before it starts anything.
func (f *serveEnrolFlags) keys() (keys, targetKeys []string, err error) {
	if keys, err = readKeyFiles("key-pub", f.keyPubs); err != nil {
		return nil, nil, err
	}
	if targetKeys, err = readKeyFiles("target-key-pub", f.targetPubs); err != nil {
		return nil, nil, err
	}
	return keys, targetKeys, nil
}

// serveEnrolment runs the enrolment service inside serve's process, on in-process connections
// as the admin and the system user; caFile is the bus's CA, given to nodes. The returned stop
// ends it and closes them.
func serveEnrolment(ctx context.Context, srv *bus.Server, store *trust.Store, caFile string, names wire.Names, keys, targetKeys []string, log *slog.Logger) (stop func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	admin, err := srv.Connect(ctx, store.AdminCreds())
	if err != nil {
		return nil, fmt.Errorf("enrolment service: %w", err)
	}
	system, err := srv.Connect(ctx, store.SystemCreds())
	if err != nil {
		admin.Close()
		return nil, fmt.Errorf("enrolment service: the system user: %w", err)
	}
	svc, err := startEnrolService(ctx, admin.NC, system.NC, store, caFile, names, nil, keys, targetKeys, log)
	if err != nil {
		system.Close()
		admin.Close()
		return nil, err
	}
	return func() {
		svc.Stop()
		system.Close()
		admin.Close()
	}, nil
}

// enrolInServe runs the enrolment service in serve, in operator mode (serveExtras, cmd_serve.go).
func enrolInServe(fs *flag.FlagSet) func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
	var f serveEnrolFlags
	f.register(fs)
	return func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
		if store == nil {
			return nil // --insecure-no-auth: no identities to enrol nodes into
		}
		log := logkey.Text(s.err, nil).With("component", "enrol")
		stop, err := serveEnrolmentFor(ctx, s, srv, store, n, &f, log)
		if err != nil {
			return err
		}
		go func() {
			<-ctx.Done()
			stop()
		}()
		return nil
	}
}

// serveEnrolmentFor runs the enrolment service in serve with the keys f names, or says why it
// does not (a --tls-cert whose CA serve does not know).
func serveEnrolmentFor(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, names wire.Names, f *serveEnrolFlags, log *slog.Logger) (stop func(), err error) {
	if srv.CAFile() == "" {
		s.printf("enrolment: not served here, as serve does not know the CA of --tls-cert; run `mesh-release enrol-service --ca FILE` beside it\n")
		return func() {}, nil
	}
	keys, targetKeys, err := f.keys()
	if err != nil {
		return nil, err
	}
	stop, err = serveEnrolment(ctx, srv, store, srv.CAFile(), names, keys, targetKeys, log)
	if err != nil {
		return nil, err
	}
	s.printf("enrolment: answering `mesh-host enrol` on %s; make a token with `mesh-release enrol-token --data DIR --url tls://HOST:PORT`\n", names.EnrolSubject())
	return stop, nil
}
