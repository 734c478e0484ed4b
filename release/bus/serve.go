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
	// Logger receives the server's log; nil discards it.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients. Default 10s.
	ReadyTimeout time.Duration
	// MaxPayload is the largest message the server accepts, in bytes; 0 is the server's
	// default, 1 MiB.
	MaxPayload int32
}

// Server is a running embedded NATS server with JetStream.
type Server struct {
	ns *server.Server
}

// Serve starts an embedded NATS server with JetStream storing under opts.DataDir and returns
// once it accepts clients. The caller stops it with Shutdown; ctx bounds only the start.
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
	sopts := &server.Options{
		ServerName: "mesh-release",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoSigs:     true,
		NoLog:      opts.Logger == nil,
		// A server on a laptop or in the lab must not also listen for monitoring or clustering.
		HTTPPort:   0,
		MaxPayload: opts.MaxPayload,
	}
	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if opts.Logger != nil {
		ns.SetLoggerV2(slogAdapter{opts.Logger}, false, false, false)
	}
	ns.Start()
	deadline := time.Now().Add(opts.ReadyTimeout)
	for !ns.ReadyForConnections(100 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			ns.Shutdown()
			return nil, fmt.Errorf("serve: %w", err)
		}
		if time.Now().After(deadline) {
			ns.Shutdown()
			return nil, fmt.Errorf("serve: the server on %s was not ready within %s; is the port in use or %s unwritable?", opts.Listen, opts.ReadyTimeout, storeDir)
		}
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Addr is the address the server accepts clients on.
func (s *Server) Addr() net.Addr { return s.ns.Addr() }

// Shutdown stops the server and waits until it has stopped; JetStream data stays in DataDir.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// slogAdapter routes the server's log to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Info(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...), "from", "nats") }
func (a slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...), "from", "nats") }
