package main

import (
	"context"
	"flag"
	"log/slog"
	"net"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// defaultDataDir is where `serve` keeps the bus's JetStream data unless --data says otherwise.
const defaultDataDir = "/var/lib/mesh-release"

const serveAbout = `It serves until interrupted, and creates the mesh's buckets and stream as init does. By
default it listens on loopback only, for this machine; nodes on other machines need --listen
on an address they can reach (this server has no TLS or authentication: use it only on a
network you trust, or run your own NATS and use init). One serve per --data directory: it is
locked (DIR/serve.lock), and a listen address in use fails at once.`

// serveCmd runs an embedded bus until ctx ends. ready, when not nil, receives the client URL
// once the server and the mesh's buckets are ready.
func serveCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string, ready func(url string)) error {
	data := fs.String("data", defaultDataDir, "`DIR` for the bus's JetStream data")
	listen := fs.String("listen", bus.DefaultListen, "`HOST:PORT` to accept clients on (port 0 picks a free one)")
	prefix := fs.String("prefix", wire.DefaultPrefix, "prefix of the mesh's bus names")
	verbose := fs.Bool("verbose", false, "log the NATS server's notices too, not only its warnings and errors")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	level := slog.LevelWarn // the server's start-up banner is a page of notices
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: level})).With("component", "nats")
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: *data, Listen: *listen, Logger: log})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	c, err := bus.Connect(ctx, srv.ClientURL(), "")
	if err != nil {
		return err
	}
	n := wire.NamesFor(*prefix)
	err = bus.Init(ctx, c.JS, n)
	c.Close()
	if err != nil {
		return err
	}
	s.printf("serving the mesh bus on %s (data in %s, prefix %s)\n", srv.ClientURL(), *data, n.Prefix)
	if loopback(srv.Addr()) {
		s.printf("only this machine can connect; nodes elsewhere need --listen on an address they reach (no TLS or auth: a trusted network only)\n")
	}
	if ready != nil {
		ready(srv.ClientURL())
	}
	<-ctx.Done()
	s.printf("stopping; the data stays in %s\n", *data)
	return nil
}

func loopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}
