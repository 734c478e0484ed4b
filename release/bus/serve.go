package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/trust"
)

// DefaultListen is where `mesh-release serve` listens unless told otherwise: loopback only.
const DefaultListen = "127.0.0.1:4222"

// ServeOptions configure an embedded bus server.
type ServeOptions struct {
	// DataDir holds the JetStream store (DataDir/jetstream). Required.
	DataDir string
	// Listen is host:port for clients; port 0 or -1 picks a free port. Default DefaultListen.
	Listen string
	// Logger receives the server's log (its notices at Info, so a Warn-level logger keeps
	// only what an operator must see); nil discards it.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients. Default DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// MaxPayload is the largest message the server accepts, in bytes; 0 is the server's
	// default, 1 MiB.
	MaxPayload int32
	// Auth, when set, runs the server in operator mode with these identities: it trusts their
	// operator, admits only users their accounts signed (and not revoked), keeps account JWTs in
	// a directory resolver (Auth.ResolverDir()) that $SYS.REQ.CLAIMS.UPDATE updates, and runs
	// JetStream in the mesh account. Nil serves without authentication, for in-process tests and
	// `serve --insecure-no-auth`.
	Auth *trust.Store
	// TLSCert and TLSKey are the server's certificate and key (PEM files, both or neither);
	// with them every client must use TLS.
	TLSCert, TLSKey string
	// OwnTLS, without TLSCert, makes the server use TLS with its own CA and certificate under
	// DataDir/tls (trust.EnsureTLS), made or renewed once the data directory is locked: for the
	// listen host (or, listening on every address, this machine's host name), localhost,
	// 127.0.0.1, ::1 and TLSNames.
	OwnTLS   bool
	TLSNames []string
}

// Server is a running embedded NATS server with JetStream.
type Server struct {
	ns   *server.Server
	lock *dataLock
	tls  bool
	// caFile and tlsNames are the CA clients must trust and the names the certificate was
	// made for, when the server keeps its own (OwnTLS).
	caFile   string
	tlsNames []string
}

// ErrListen is returned when the listen address cannot be bound (in use, or not this machine's).
var ErrListen = errors.New("cannot listen")

// Serve starts an embedded NATS server with JetStream storing under opts.DataDir and returns
// once it accepts clients. The caller stops it with Shutdown; ctx bounds only the start. The data
// directory is locked (DataDir/serve.lock) for as long as the server runs, and a listen address
// that cannot be bound fails at once, naming it.
func Serve(ctx context.Context, opts ServeOptions) (*Server, error) {
	if opts.DataDir == "" {
		return nil, errors.New("serve: no data directory; pass --data DIR")
	}
	opts = opts.withDefaults()
	host, port, err := listenAddress(opts.Listen)
	if err != nil {
		return nil, err
	}
	storeDir := filepath.Join(opts.DataDir, "jetstream")
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return nil, fmt.Errorf("serve: data directory %s: %w", opts.DataDir, err)
	}
	lock, err := lockData(opts.DataDir)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			lock.unlock()
		}
	}()
	if err := checkFree(opts.Listen, port); err != nil {
		return nil, err
	}
	sopts, caFile, err := serverOptions(&opts, host, port, storeDir)
	if err != nil {
		return nil, err
	}
	fatal := make(chan string, 1)
	ns, err := newServer(sopts, opts, fatal)
	if err != nil {
		return nil, err
	}
	ns.Start()
	if err := waitReady(ctx, ns, fatal, opts, storeDir); err != nil {
		return nil, err
	}
	ok = true
	srv := &Server{ns: ns, lock: lock, tls: sopts.TLSConfig != nil, caFile: caFile}
	if caFile != "" {
		srv.tlsNames = opts.TLSNames
	}
	return srv, nil
}

// listenAddress splits listen into its host and port; port 0 is the server's RANDOM_PORT.
func listenAddress(listen string) (host string, port int, err error) {
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("serve: listen address %q is not host:port (like 127.0.0.1:4222): %w", listen, err)
	}
	port, err = strconv.Atoi(portText)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("serve: listen port %q is not a port number (0 or -1 picks a free one)", portText)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}

// checkFree binds listen and lets it go. The server reports a port in use only in its log, and
// then never becomes ready: binding it here first lets the operator hear at once which address
// is taken.
func checkFree(listen string, port int) error {
	if port <= 0 {
		return nil // a free port is picked
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("serve: %w on %s (is another server using it? pick another with --listen): %w", ErrListen, listen, err)
	}
	return l.Close()
}

// serverOptions is the server's configuration for opts: JetStream under storeDir, TLS (its own
// CA's certificate made or renewed here when opts.OwnTLS, opts.TLSNames then set to the names
// it holds) and authentication. caFile is the CA clients trust when the server keeps its own.
func serverOptions(opts *ServeOptions, host string, port int, storeDir string) (sopts *server.Options, caFile string, err error) {
	sopts = &server.Options{
		ServerName: "mesh-release",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		// A server on a laptop or in the lab must not also listen for monitoring or clustering.
		HTTPPort:   0,
		MaxPayload: opts.MaxPayload,
		// Every host holds a watch (a consumer) on the declarations and the targets buckets:
		// the server's default of 1,000 consumers per stream would refuse the 1,001st node.
		JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: -1},
	}
	if opts.OwnTLS && opts.TLSCert == "" {
		names := append([]string{host}, opts.TLSNames...)
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			// Every address: the name other machines most likely use.
			if h, err := os.Hostname(); err == nil {
				names = append(names, h)
			}
		}
		opts.TLSNames = names
		if opts.TLSCert, opts.TLSKey, caFile, err = trust.EnsureTLS(opts.DataDir, names); err != nil {
			return nil, "", fmt.Errorf("serve: %w", err)
		}
	}
	if err := secure(sopts, *opts); err != nil {
		return nil, "", err
	}
	return sopts, caFile, nil
}

// newServer makes the server of sopts, logging to opts.Logger (a fatal message also sent on
// fatal), with the mesh's accounts loaded before it accepts anyone.
func newServer(sopts *server.Options, opts ServeOptions, fatal chan string) (*server.Server, error) {
	ns, err := server.NewServer(sopts)
	if err != nil {
		if sopts.AccountResolver != nil {
			sopts.AccountResolver.Close()
		}
		return nil, fmt.Errorf("serve: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ns.SetLoggerV2(slogAdapter{l: logger, fatal: fatal}, false, false, false)
	if opts.Auth != nil {
		// The server loads an account when its first user connects. Loading the nodes account
		// then races the first nodes: the server shows the account to concurrent connections
		// before it has set up the subscriptions of its service imports, and a node's first
		// request through one meets no responders (seen with 1,000 nodes joining a fresh
		// server). So both accounts are loaded here, before the server accepts anyone.
		for _, pub := range []string{opts.Auth.AccountPublicKey(), opts.Auth.NodesAccountPublicKey()} {
			if _, err := ns.LookupAccount(pub); err != nil {
				sopts.AccountResolver.Close()
				return nil, fmt.Errorf("serve: load account %s: %w", pub, err)
			}
		}
	}
	return ns, nil
}

// waitReady waits for the started ns to accept clients, for at most opts.ReadyTimeout; a fatal
// message from the server or the end of ctx ends the wait at once. ns is shut down on an error.
func waitReady(ctx context.Context, ns *server.Server, fatal <-chan string, opts ServeOptions, storeDir string) error {
	deadline := time.Now().Add(opts.ReadyTimeout)
	for !ns.ReadyForConnections(100 * time.Millisecond) {
		select {
		case msg := <-fatal:
			// The server gave up (a listen address taken since the check, a store it cannot
			// open): say so now rather than after the ready timeout.
			ns.Shutdown()
			return fmt.Errorf("serve: the server on %s could not start: %s", opts.Listen, msg)
		default:
		}
		if err := ctx.Err(); err != nil {
			ns.Shutdown()
			return fmt.Errorf("serve: %w", err)
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			return fmt.Errorf("serve: the server on %s was not ready within %s; is the port in use or %s unwritable?", opts.Listen, opts.ReadyTimeout, storeDir)
		}
	}
	return nil
}

// secure sets the server options for opts.Auth and opts.TLSCert/TLSKey.
func secure(sopts *server.Options, opts ServeOptions) error {
	if (opts.TLSCert == "") != (opts.TLSKey == "") {
		return errors.New("serve: a TLS certificate needs its key and a key its certificate (--tls-cert and --tls-key go together)")
	}
	if opts.TLSCert != "" {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: opts.TLSCert, KeyFile: opts.TLSKey, Timeout: tlsTimeout.Seconds()})
		if err != nil {
			return fmt.Errorf("serve: TLS certificate %s and key %s: %w", opts.TLSCert, opts.TLSKey, err)
		}
		// The certificate is read again whenever its files change (a CA switch, a renewal),
		// for the next handshake; connections made keep theirs (decision 0046). Without
		// Certificates, crypto/tls asks GetCertificate for every client, SNI or none.
		r := &certReloader{certFile: opts.TLSCert, keyFile: opts.TLSKey, logger: opts.Logger}
		if _, err := r.get(nil); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		tc.Certificates, tc.GetCertificate = nil, r.get
		sopts.TLS, sopts.TLSConfig, sopts.TLSTimeout = true, tc, tlsTimeout.Seconds()
	}
	if opts.Auth == nil {
		return nil
	}
	dir := opts.Auth.ResolverDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("serve: account resolver directory: %w", err)
	}
	// A full directory resolver: it keeps every account JWT pushed to it, and takes updates on
	// $SYS.REQ.CLAIMS.UPDATE from the system account. Deleting accounts is not allowed.
	res, err := server.NewDirAccResolver(dir, 0, 2*time.Minute, server.NoDelete)
	if err != nil {
		return fmt.Errorf("serve: account resolver in %s: %w", dir, err)
	}
	jwts, err := opts.Auth.AccountJWTs()
	if err != nil {
		res.Close()
		return fmt.Errorf("serve: %w", err)
	}
	// DATA/trust/account.jwt is the record: a revocation stored there that the resolver missed
	// (the server was down) takes effect now. The resolver keeps whichever is newer.
	for pub, text := range jwts {
		if err := res.Store(pub, text); err != nil {
			res.Close()
			return fmt.Errorf("serve: load account %s into the resolver: %w", pub, err)
		}
	}
	sopts.TrustedOperators = []*jwt.OperatorClaims{opts.Auth.OperatorClaims()}
	sopts.SystemAccount = opts.Auth.SystemAccountPublicKey()
	sopts.AccountResolver = res
	return nil
}

// tlsTimeout bounds a client's TLS handshake (the server's default is 2 s, too short for a
// loaded machine's first connection).
const tlsTimeout = 5 * time.Second

// ClientURL is the URL clients connect to: nats://host:port, or tls://host:port when the server
// requires TLS.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// TLS reports whether the server requires TLS from its clients.
func (s *Server) TLS() bool { return s.tls }

// CAFile is the CA certificate clients must trust when the server keeps its own (OwnTLS), and
// TLSNames the names its certificate was asked for (besides trust.DefaultTLSNames); empty
// otherwise.
func (s *Server) CAFile() string     { return s.caFile }
func (s *Server) TLSNames() []string { return s.tlsNames }

// InProcess is a ConnectOption that connects to s inside this process, without a socket or TLS
// (credentials are still required in operator mode): for the process that runs the server. The
// URL given to Connect must not ask for TLS (tls://); Server.Connect takes care of it.
func InProcess(s *Server) ConnectOption {
	return func(opts *[]nats.Option) { *opts = append(*opts, nats.InProcessServer(s.ns)) }
}

// Connect connects to s inside this process (InProcess) with the .creds file creds (empty for
// none).
func (s *Server) Connect(ctx context.Context, creds string, options ...ConnectOption) (*Conn, error) {
	return Connect(ctx, "nats://in-process", creds, append([]ConnectOption{InProcess(s)}, options...)...)
}

// Varz is the server's own view of itself (connections, CPU, memory), for measurements.
func (s *Server) Varz() (*server.Varz, error) { return s.ns.Varz(nil) }

// Addr is the address the server accepts clients on.
func (s *Server) Addr() net.Addr { return s.ns.Addr() }

// Shutdown stops the server, waits until it has stopped and unlocks the data directory;
// JetStream data stays in DataDir.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.lock.unlock()
}

// slogAdapter routes the server's log to slog, and its fatal errors to Serve too: the embedded
// server only logs them and carries on not serving.
type slogAdapter struct {
	l     *slog.Logger
	fatal chan<- string
}

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Info(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Fatalf(f string, v ...any) {
	msg := fmt.Sprintf(f, v...)
	a.l.Error(msg, "from", "nats")
	select {
	case a.fatal <- msg:
	default:
	}
}
func (a slogAdapter) Errorf(f string, v ...any) { a.l.Error(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Debugf(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Tracef(f string, v ...any) { a.l.Debug(fmt.Sprintf(f, v...), "from", "nats") }

// DefaultReadyTimeout bounds how long Serve waits for the server to accept clients.
const DefaultReadyTimeout = 10 * time.Second

// withDefaults returns o with every zero field at its default (decision 0041).
func (o ServeOptions) withDefaults() ServeOptions {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return o
}
