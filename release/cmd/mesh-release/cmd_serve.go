package main

import (
	"context"
	"flag"
	"log/slog"
	"net"
	"strings"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// defaultDataDir is where `serve` keeps the bus's JetStream data unless --data says otherwise.
const defaultDataDir = "/var/lib/mesh-release"

const serveAbout = `It serves until interrupted, and creates the mesh's buckets and stream as init does. By
default it listens on loopback only, for this machine; nodes on other machines need --listen
on an address they can reach. One serve per --data directory: it is locked (DIR/serve.lock),
and a listen address in use fails at once.

Clients must authenticate and use TLS. On its first start serve makes the bus's identities in
DIR/trust (an operator, its system account, the mesh account, the nodes account that node
and token users live in, and admin.creds, the release side's credentials) and a CA in DIR/tls (ca.pem, which every client trusts) with a server
certificate for the listen address, localhost, 127.0.0.1, ::1 and each --tls-name; later starts
use the same ones, and issue the certificate again when it nears expiry or lacks a name. Keep
DIR/trust and DIR/tls secret and backed up: whoever holds them controls the fleet.
--insecure-no-auth serves as before this existed, with neither (a throwaway loopback bus only).`

// serveDataDir is $MESH_RELEASE_DATA, else defaultDataDir: serve's directory when --data is not
// given.
func serveDataDir(getenv func(string) string) string {
	if getenv != nil {
		if v := getenv(envReleaseData); v != "" {
			return v
		}
	}
	return defaultDataDir
}

// namesFlag is a repeatable, comma-separated list flag.
type namesFlag []string

func (f *namesFlag) String() string { return strings.Join(*f, ",") }
func (f *namesFlag) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			*f = append(*f, n)
		}
	}
	return nil
}

// A serveExtra is something another command's file adds to serve (the enrolment service, the
// targets' re-signer): it registers its flags on serve's flag set before they are parsed, and
// returns what serve runs once the bus is ready. start gets the server (Server.Connect reaches it
// in-process), its identities (nil with --insecure-no-auth) and the names; it returns at once,
// leaving anything it runs to stop when ctx ends, and an error stops serve.
type serveExtra func(fs *flag.FlagSet) (start func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error)

// serveExtras is what serve runs beside the bus: the enrolment service (operator mode) and,
// with --key, the targets' re-signer, and with --metrics, the Prometheus metrics.
func serveExtras() []serveExtra {
	return []serveExtra{enrolInServe, keepTargetsInServe, metricsInServe}
}

func serveCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string, ready func(url string)) error {
	return serveWith(ctx, s, fs, args, ready, serveExtras())
}

// serveFlags are serve's own flags (the extras register theirs).
type serveFlags struct {
	data, listen, prefix string
	verbose, insecure    bool
	tlsCert, tlsKey      string
	tlsNames             namesFlag
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.data, "data", "", "`DIR` for the bus's JetStream data, identities (DIR/trust) and TLS files (DIR/tls) (default $"+envReleaseData+", else "+defaultDataDir+")")
	fs.StringVar(&f.listen, "listen", bus.DefaultListen, "`HOST:PORT` to accept clients on (port 0 picks a free one)")
	fs.StringVar(&f.prefix, "prefix", wire.DefaultPrefix, "prefix of the mesh's bus names")
	fs.BoolVar(&f.verbose, "verbose", false, "log the NATS server's notices too, not only its warnings and errors")
	fs.BoolVar(&f.insecure, "insecure-no-auth", false, "serve without authentication or TLS: anyone who reaches the listen address controls the fleet")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "the server's TLS certificate `FILE` (PEM: the certificate, then its CA, which enrolling nodes pin) instead of one from serve's own CA; with --tls-key")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the key `FILE` (PEM) of --tls-cert")
	fs.Var(&f.tlsNames, "tls-name", "another `NAME` (host name or IP address) clients reach the server by, for the certificate serve makes; repeat it or separate names with commas")
}

// check refuses flags that do not go together.
func (f *serveFlags) check() error {
	switch {
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return usagef("--tls-cert and --tls-key go together")
	case f.insecure && len(f.tlsNames) > 0:
		return usagef("--tls-name is for the certificate serve makes, and with --insecure-no-auth it makes none")
	case f.tlsCert != "" && len(f.tlsNames) > 0:
		return usagef("--tls-name is for the certificate serve makes; with --tls-cert, the certificate names what it names")
	}
	return nil
}

// serveWith is serveCmd with what it runs beside the bus given.
func serveWith(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string, ready func(url string), extras []serveExtra) error {
	var f serveFlags
	f.register(fs)
	var starts []func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error
	for _, x := range extras {
		starts = append(starts, x(fs))
	}
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if f.data == "" {
		f.data = serveDataDir(s.getenv)
	}
	if err := f.check(); err != nil {
		return err
	}
	srv, store, err := f.start(ctx, s)
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	n := wire.NamesFor(f.prefix)
	if err := f.ready(ctx, s, srv, store, n); err != nil {
		return err
	}
	for _, start := range starts {
		if start == nil {
			continue
		}
		if err := start(ctx, s, srv, store, n); err != nil {
			return err
		}
	}
	if ready != nil {
		ready(srv.ClientURL())
	}
	<-ctx.Done()
	s.printf("stopping; the data stays in %s\n", f.data)
	return nil
}

// start starts the server, with the identities in DATA/trust (made on the first start) unless
// --insecure-no-auth; store is nil then.
func (f *serveFlags) start(ctx context.Context, s *stdio) (srv *bus.Server, store *trust.Store, err error) {
	level := slog.LevelWarn // the server's start-up banner is a page of notices
	if f.verbose {
		level = slog.LevelInfo
	}
	logger := logkey.Text(s.err, &slog.HandlerOptions{Level: level})
	opts := bus.ServeOptions{DataDir: f.data, Listen: f.listen, Logger: logger.With("component", "nats"),
		TLSCert: f.tlsCert, TLSKey: f.tlsKey}
	if f.insecure {
		logger.Warn("serving without authentication or TLS (--insecure-no-auth): anyone who reaches the listen address can read and change every node's declaration and target", "listen", f.listen)
	} else {
		if store, err = trust.Ensure(f.data); err != nil {
			return nil, nil, err
		}
		opts.Auth = store
		opts.OwnTLS, opts.TLSNames = f.tlsCert == "", f.tlsNames
	}
	srv, err = bus.Serve(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	return srv, store, nil
}

// ready makes the mesh's buckets and stream on srv and says where it serves and how to reach it.
func (f *serveFlags) ready(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
	creds := ""
	if store != nil {
		creds = store.AdminCreds()
	}
	c, err := srv.Connect(ctx, creds)
	if err != nil {
		return err
	}
	err = bus.Init(ctx, c.JS, n)
	c.Close()
	if err != nil {
		return err
	}
	url := srv.ClientURL()
	s.printf("serving the mesh bus on %s (data in %s, prefix %s)\n", url, f.data, n.Prefix)
	if loopback(srv.Addr()) {
		if f.insecure {
			s.printf("only this machine can connect; nodes elsewhere need --listen on an address they reach (no TLS or auth: a trusted network only)\n")
		} else {
			s.printf("only this machine can connect; nodes elsewhere need --listen on an address they reach\n")
		}
	}
	if store != nil {
		serveBanner(s, srv, store, url)
	}
	return nil
}

// serveBanner says where the credentials and the CA are, and how to use them.
func serveBanner(s *stdio, srv *bus.Server, store *trust.Store, url string) {
	if srv.CAFile() != "" {
		names := append(append([]string{}, trust.DefaultTLSNames...), srv.TLSNames()...)
		s.printf("TLS: clients trust %s; the server certificate names %s (more with --tls-name)\n", srv.CAFile(), strings.Join(uniqueNonEmpty(names), ", "))
	} else {
		s.printf("TLS: with the certificate given; clients trust the CA that signed it\n")
	}
	s.printf("the release side's credentials are %s (every permission in the mesh account; keep them secret); to use them in this shell:\n", store.AdminCreds())
	s.printf("  export %s=%s\n  export %s=%s\n", envNATSURL, url, envNATSCreds, store.AdminCreds())
	if srv.CAFile() != "" {
		s.printf("  export %s=%s\n", envNATSCA, srv.CAFile())
	}
}

func uniqueNonEmpty(l []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range l {
		if ip := net.ParseIP(v); (ip != nil && ip.IsUnspecified()) || v == "" || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, v)
	}
	return out
}

func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
