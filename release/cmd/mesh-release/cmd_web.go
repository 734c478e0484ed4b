package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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

func webCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	listen := fs.String("listen", web.DefaultListen, "`HOST:PORT` to serve the page on (port 0 picks a free one)")
	cert := fs.String("tls-cert", "", "serve HTTPS with this certificate `FILE` (PEM; with --tls-key)")
	key := fs.String("tls-key", "", "the certificate's private key `FILE` (PEM)")
	tokenFile := fs.String("token-file", "", "require this `FILE`'s token to read the page")
	usersFile := fs.String("users-file", "", "require HTTP basic auth of a user in this `FILE` (lines user:bcrypt-hash)")
	silentAfter := fs.Duration("silent-after", fleet.DefaultSilentAfter, "mark a node SILENT when unheard for this long (3× its heartbeat interval)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *silentAfter <= 0 {
		return usagef("--silent-after must be positive")
	}
	if (*cert == "") != (*key == "") {
		return usagef("--tls-cert and --tls-key go together")
	}
	if *tokenFile != "" && *usersFile != "" {
		return usagef("--token-file or --users-file, not both")
	}
	var login *web.Login
	var err error
	switch {
	case *tokenFile != "":
		login, err = web.TokenLogin(*tokenFile)
	case *usersFile != "":
		login, err = web.BasicLogin(*usersFile)
	}
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}
	var tlsConf *tls.Config
	if *cert != "" {
		pair, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return fmt.Errorf("web: TLS certificate %s and key %s: %w", *cert, *key, err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("web: listen on %s: %w", *listen, err)
	}
	if !loopback(ln.Addr()) && (tlsConf == nil || login == nil) {
		ln.Close()
		return fmt.Errorf("web: %s is not a loopback address: the page shows every node's versions, state and errors, so off loopback it needs TLS (--tls-cert, --tls-key) and a login (--token-file or --users-file); missing: %s",
			*listen, missingForNetwork(tlsConf != nil, login != nil))
	}
	c, err := b.connect(ctx)
	if err != nil {
		ln.Close()
		return err
	}
	defer c.Close()
	log := logkey.Text(s.err, nil).With("component", "web")
	srv := web.New(web.Config{JS: c.JS, Names: b.names(), SilentAfter: *silentAfter, Log: log})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(ctx)
	h := srv.Handler()
	if login != nil {
		h = login.Wrap(h)
	}
	// No WriteTimeout: the events stream for as long as the page is open. The handlers end with
	// ctx (BaseContext), so a stop does not wait for the open pages.
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, TLSConfig: tlsConf,
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
		go func() { errc <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- hs.Serve(ln) }()
	}
	s.printf("web: serving %s://%s/\n", scheme, ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("web: %w", err)
	}
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web: stop: %w", err)
	}
	return nil
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
