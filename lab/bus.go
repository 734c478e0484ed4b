package lab

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// Bus is the lab's NATS server: embedded, on a free loopback port, JetStream in dir, with the
// mesh's buckets and stream created. The server can be stopped and started again on the same
// address and data directory (StopServer, StartServer, Restart), as a real server restarts.
type Bus struct {
	Server *bus.Server // nil while stopped
	Conn   *bus.Conn
	Names  wire.Names

	dir, listen, url string
}

// StartBus starts the server and connects to it.
func StartBus(ctx context.Context, dir string) (*Bus, error) {
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: dir, Listen: "127.0.0.1:-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	// The port the server picked, kept so a restart listens where every client reconnects.
	b := &Bus{Server: srv, Names: wire.NamesFor(""), dir: dir, listen: srv.Addr().String(), url: srv.ClientURL()}
	b.Conn, err = bus.Connect(ctx, b.url, "")
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	if err := bus.Init(ctx, b.Conn.JS, b.Names); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// URL is the client URL hosts are given; it stays the same across restarts.
func (b *Bus) URL() string { return b.url }

// StopServer stops the server as a crash or a restart would: clients lose their connections and
// try to reconnect; JetStream's data stays on disk.
func (b *Bus) StopServer() {
	if b.Server != nil {
		b.Server.Shutdown()
		b.Server = nil
	}
}

// StartServer starts the stopped server again on the same address and data directory.
func (b *Bus) StartServer(ctx context.Context) error {
	if b.Server != nil {
		return nil
	}
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: b.dir, Listen: b.listen, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("restart the bus on %s: %w", b.listen, err)
	}
	b.Server = srv
	return nil
}

// Restart stops the server and starts it again on the same address and data directory.
func (b *Bus) Restart(ctx context.Context) error {
	b.StopServer()
	return b.StartServer(ctx)
}

// Close disconnects and stops the server.
func (b *Bus) Close() {
	b.Conn.Close()
	b.StopServer()
}

// Heartbeats delivers every heartbeat of node (core subscription) until the returned stop.
func (b *Bus) Heartbeats(node string) (<-chan wire.Heartbeat, func(), error) {
	ch := make(chan wire.Heartbeat, 1024)
	sub, err := b.Conn.NC.Subscribe(b.Names.Heartbeat(node), func(m *nats.Msg) {
		if hb, err := wire.ParseHeartbeat(m.Data); err == nil {
			select {
			case ch <- hb:
			default:
			}
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribe to %s's heartbeats: %w", node, err)
	}
	if err := b.Conn.NC.Flush(); err != nil {
		return nil, nil, err
	}
	return ch, func() { sub.Unsubscribe() }, nil
}

// WaitHeartbeat waits for a heartbeat from ch that satisfies ok, for at most timeout.
func WaitHeartbeat(ch <-chan wire.Heartbeat, timeout time.Duration, what string, ok func(wire.Heartbeat) bool) (wire.Heartbeat, error) {
	deadline := time.After(timeout)
	var last wire.Heartbeat
	for {
		select {
		case hb := <-ch:
			last = hb
			if ok(hb) {
				return hb, nil
			}
		case <-deadline:
			return last, fmt.Errorf("no heartbeat with %s within %s; the last: %+v", what, timeout, last)
		}
	}
}

// Declare puts a declaration for node and returns its revision.
func (b *Bus) Declare(ctx context.Context, node string, value []byte) (uint64, error) {
	kv, err := b.Conn.JS.KeyValue(ctx, b.Names.Declarations())
	if err != nil {
		return 0, err
	}
	return kv.Put(ctx, node, value)
}
