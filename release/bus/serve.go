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

	"github.com/nats-io/nats-server/v2/server"
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
	// ReadyTimeout bounds the wait for the server to accept clients. Default 10s.
	ReadyTimeout time.Duration
	// MaxPayload is the largest message the server accepts, in bytes; 0 is the server's
	// default, 1 MiB.
	MaxPayload int32
}

// Server is a running embedded NATS server with JetStream.
type Server struct {
	ns   *server.Server
	lock *dataLock
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
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	host, portText, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("serve: listen address %q is not host:port (like 127.0.0.1:4222): %w", opts.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("serve: listen port %q is not a port number (0 or -1 picks a free one)", portText)
	}
	if port == 0 {
		port = server.RANDOM_PORT
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
	// The server reports a port in use only in its log, and then never becomes ready: bind it
	// here first so the operator hears at once which address is taken.
	if port > 0 {
		l, err := net.Listen("tcp", opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("serve: %w on %s (is another server using it? pick another with --listen): %w", ErrListen, opts.Listen, err)
		}
		l.Close()
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	fatal := make(chan string, 1)
	sopts := &server.Options{
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
	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	ns.SetLoggerV2(slogAdapter{l: logger, fatal: fatal}, false, false, false)
	ns.Start()
	deadline := time.Now().Add(opts.ReadyTimeout)
	for !ns.ReadyForConnections(100 * time.Millisecond) {
		select {
		case msg := <-fatal:
			// The server gave up (a listen address taken since the check, a store it cannot
			// open): say so now rather than after the ready timeout.
			ns.Shutdown()
			return nil, fmt.Errorf("serve: the server on %s could not start: %s", opts.Listen, msg)
		default:
		}
		if err := ctx.Err(); err != nil {
			ns.Shutdown()
			return nil, fmt.Errorf("serve: %w", err)
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			return nil, fmt.Errorf("serve: the server on %s was not ready within %s; is the port in use or %s unwritable?", opts.Listen, opts.ReadyTimeout, storeDir)
		}
	}
	ok = true
	return &Server{ns: ns, lock: lock}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

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
