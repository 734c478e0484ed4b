package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/web"
)

const webAbout = `It serves a read-only page until interrupted: the fleet as ` + "`fleet`" + ` judges it, the current or
last rollout as batches with progress bars and its halt report, the withdrawn versions, and each
node's page (what ` + "`fleet NODE`" + ` prints). It updates live by server-sent events as heartbeats
arrive; without JavaScript the tables are the ones drawn at the page's load.

It only reads the bus, as the --creds given (the release side's credentials today; decision 0031).
On loopback it needs nothing more. Anywhere else it refuses to start without TLS (--tls-cert and
--tls-key) and a login: --token-file (a token of at least 22 bytes; the browser asks for a user
and password: any user, the token as password; or Authorization: Bearer TOKEN) or --users-file
(lines user:bcrypt-hash, as ` + "`htpasswd -nB USER`" + ` writes them). Login files must not be readable
by others. docs/security.md says what the page shows.`

// webFlags are web's flags.
type webFlags struct {
	bus                  busFlags
	listen, cert, key    string
	tokenFile, usersFile string
	silentAfter          time.Duration
}

func (f *webFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	f.bus.register(fs, getenv)
	fs.StringVar(&f.listen, "listen", web.DefaultListen, "`HOST:PORT` to serve the page on (port 0 picks a free one)")
	fs.StringVar(&f.cert, "tls-cert", "", "serve HTTPS with this certificate `FILE` (PEM; with --tls-key)")
	fs.StringVar(&f.key, "tls-key", "", "the certificate's private key `FILE` (PEM)")
	fs.StringVar(&f.tokenFile, "token-file", "", "require this `FILE`'s token to read the page")
	fs.StringVar(&f.usersFile, "users-file", "", "require HTTP basic auth of a user in this `FILE` (lines user:bcrypt-hash)")
	fs.DurationVar(&f.silentAfter, "silent-after", fleet.DefaultSilentAfter, "mark a node SILENT when unheard for this long (3× its heartbeat interval)")
}

// check refuses flags that do not go together.
func (f *webFlags) check() error {
	switch {
	case f.silentAfter <= 0:
		return usagef("--silent-after must be positive")
	case (f.cert == "") != (f.key == ""):
		return usagef("--tls-cert and --tls-key go together")
	case f.tokenFile != "" && f.usersFile != "":
		return usagef("--token-file or --users-file, not both")
	}
	return nil
}

// guard is the login and the TLS configuration the flags ask for, each nil when not asked for.
func (f *webFlags) guard() (*web.Login, *tls.Config, error) {
	var login *web.Login
	var err error
	switch {
	case f.tokenFile != "":
		login, err = web.TokenLogin(f.tokenFile)
	case f.usersFile != "":
		login, err = web.BasicLogin(f.usersFile)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("web: %w", err)
	}
	if f.cert == "" {
		return login, nil, nil
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, nil, fmt.Errorf("web: TLS certificate %s and key %s: %w", f.cert, f.key, err)
	}
	return login, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

func webCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var f webFlags
	f.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	login, tlsConf, err := f.guard()
	if err != nil {
		return err
	}
	ln, err := listenTCP("web", f.listen)
	if err != nil {
		return err
	}
	if !loopback(ln.Addr()) && (tlsConf == nil || login == nil) {
		ln.Close()
		return fmt.Errorf("web: %s is not a loopback address: the page shows every node's versions, state and errors, so off loopback it needs TLS (--tls-cert, --tls-key) and a login (--token-file or --users-file); missing: %s",
			f.listen, missingForNetwork(tlsConf != nil, login != nil))
	}
	c, err := f.bus.connect(ctx)
	if err != nil {
		ln.Close()
		return err
	}
	defer c.Close()
	return servePage(ctx, s, web.Config{JS: c.JS, Names: f.bus.names(), SilentAfter: f.silentAfter}, login, tlsConf, ln)
}

// servePage serves the page on ln until ctx ends.
func servePage(ctx context.Context, s *stdio, cfg web.Config, login *web.Login, tlsConf *tls.Config, ln net.Listener) error {
	cfg.Log = logkey.Text(s.err, nil).With("component", "web")
	srv := web.New(cfg)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(ctx)
	h := srv.Handler()
	if login != nil {
		h = login.Wrap(h)
	}
	// No WriteTimeout: the events stream for as long as the page is open. The handlers end with
	// ctx (BaseContext), so a stop does not wait for the open pages.
	hs := newHTTPServer(h, cfg.Log)
	hs.IdleTimeout, hs.TLSConfig = time.Minute, tlsConf
	hs.BaseContext = func(net.Listener) context.Context { return ctx }
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
	}
	s.printf("web: serving %s://%s/\n", scheme, ln.Addr())
	return serveHTTP(ctx, "web", hs, ln)
}

func missingForNetwork(hasTLS, hasLogin bool) string {
	switch {
	case !hasTLS && !hasLogin:
		return "TLS and a login"
	case !hasTLS:
		return "TLS"
	default:
		return "a login"
	}
}
