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
// mesh's buckets and stream created.
type Bus struct {
	Server *bus.Server
	Conn   *bus.Conn
	Names  wire.Names
}

// StartBus starts the server and connects to it.
func StartBus(ctx context.Context, dir string) (*Bus, error) {
	srv, err := bus.Serve(ctx, bus.ServeOptions{DataDir: dir, Listen: "127.0.0.1:-1", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	conn, err := bus.Connect(ctx, srv.ClientURL(), "")
	if err != nil {
		srv.Shutdown()
		return nil, err
	}
	b := &Bus{Server: srv, Conn: conn, Names: wire.NamesFor("")}
	if err := bus.Init(ctx, conn.JS, b.Names); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// URL is the client URL hosts are given.
func (b *Bus) URL() string { return b.Server.ClientURL() }

// Close disconnects and stops the server.
func (b *Bus) Close() {
	b.Conn.Close()
	b.Server.Shutdown()
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
