package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// defaultDataDir is where `serve` keeps the bus's JetStream data unless --data says otherwise.
const defaultDataDir = "/var/lib/mesh-release"

func runServe(ctx context.Context, args []string) error {
	return serveCmd(ctx, args, os.Stdout, nil)
}

// serveCmd runs an embedded bus until ctx ends. ready, when not nil, receives the client URL
// once the server and the mesh's buckets are ready.
func serveCmd(ctx context.Context, args []string, out io.Writer, ready func(url string)) error {
	fs := newFlagSet("serve", "[--data DIR] [--listen 127.0.0.1:4222] [--prefix mesh]")
	data := fs.String("data", defaultDataDir, "`DIR` for the bus's JetStream data")
	listen := fs.String("listen", bus.DefaultListen, "`HOST:PORT` to accept clients on (port 0 picks a free one)")
	prefix := fs.String("prefix", wire.DefaultPrefix, "prefix of the mesh's bus names")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("unexpected arguments %q", pos)
	}
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: *data, Listen: *listen, Logger: slog.Default().With("component", "nats")})
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
	fmt.Fprintf(out, "serving the mesh bus on %s (data in %s, prefix %s)\n", srv.ClientURL(), *data, n.Prefix)
	if ready != nil {
		ready(srv.ClientURL())
	}
	<-ctx.Done()
	slog.Info("serve: stopping")
	return nil
}
