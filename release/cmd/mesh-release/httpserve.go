package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// The release side's HTTP servers (metrics, web, serve --metrics) listen and serve one way:
// the listen address refused at once, naming the command; headers read within
// readHeaderTimeout; the server's own complaints logged as warnings; a stop waits
// shutdownTimeout for the requests in flight.
const (
	readHeaderTimeout = 10 * time.Second
	shutdownTimeout   = 5 * time.Second
)

// listenTCP listens on addr for what ("metrics", "web").
func listenTCP(what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", what, addr, err)
	}
	return ln, nil
}

// newHTTPServer is an http.Server for h with the settings every one shares; the caller adds
// its own (a write timeout, TLS).
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
}

// serveHTTP serves hs on ln, with TLS when hs.TLSConfig is set, until ctx ends, then shuts
// it down. ln is closed when it returns. Errors are what's ("metrics: …").
func serveHTTP(ctx context.Context, what string, hs *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() {
		if hs.TLSConfig != nil {
			errc <- hs.ServeTLS(ln, "", "")
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("%s: %w", what, err)
	}
	shut, done := context.WithTimeout(context.Background(), shutdownTimeout)
	defer done()
	if err := hs.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: stop: %w", what, err)
	}
	return nil
}
