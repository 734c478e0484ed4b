package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/metrics"
	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

const metricsAbout = `It serves /metrics in Prometheus's format until interrupted: the fleet as ` + "`fleet`" + ` judges it
(nodes by STATE, silent included, by running, known-good and launcher version; heartbeat
age; failing reconciles; drift; fetch bytes), the current rollout (id, version, batch, nodes
confirmed, soaked and in all, halted and why) and the releases published and withdrawn. The
metrics and their labels are in docs/metrics.md. No label names a node unless --node-metrics.

It only reads the bus: the heartbeat stream (followed, as ` + "`fleet --watch`" + ` does, with an
ordered consumer the server removes when it stops) and the rollouts, releases and
withdrawals buckets. It writes nothing to it. It connects as the --creds given, the release
side's credentials being the ones serve makes.`

func metricsCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	listen := fs.String("listen", metrics.DefaultListen, "`HOST:PORT` to serve /metrics on (port 0 picks a free one)")
	var o metricsFlags
	o.register(fs)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ln, err := listenTCP("metrics", *listen)
	if err != nil {
		return err
	}
	return serveMetrics(ctx, s, c, b.names(), ln, o)
}

// metricsFlags are the flags `metrics` and `serve --metrics` share.
type metricsFlags struct {
	nodeMetrics bool
	silentAfter time.Duration
}

func (o *metricsFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.nodeMetrics, "node-metrics", false, "add per-node series (a node label each: one series per node per metric)")
	fs.DurationVar(&o.silentAfter, "silent-after", fleet.DefaultSilentAfter, "count a node SILENT when unheard for this long (3× its heartbeat interval)")
}

func (o *metricsFlags) check() error {
	if o.silentAfter <= 0 {
		return usagef("--silent-after must be positive")
	}
	return nil
}

// serveMetrics serves /metrics on ln from c until ctx ends, then closes ln.
func serveMetrics(ctx context.Context, s *stdio, c *bus.Conn, n wire.Names, ln net.Listener, o metricsFlags) error {
	log := logkey.Text(s.err, nil).With("component", "metrics")
	e := metrics.New(metrics.Config{JS: c.JS, Names: n, SilentAfter: o.silentAfter, NodeMetrics: o.nodeMetrics, Log: log})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go e.Run(ctx)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", e.Handler())
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "mesh-release metrics: the fleet's metrics are at /metrics (docs/metrics.md)")
	})
	srv := newHTTPServer(mux, log)
	srv.WriteTimeout = time.Minute
	s.printf("metrics: serving http://%s/metrics\n", ln.Addr())
	if !loopback(ln.Addr()) {
		s.printf("metrics: not on loopback: whoever reaches %s reads every node's versions and state; serve it on a network only Prometheus reaches\n", ln.Addr())
	}
	return serveHTTP(ctx, "metrics", srv, ln)
}

// metricsInServe is serve's --metrics: the same /metrics served beside the bus, connected to it
// in-process with the release side's credentials.
func metricsInServe(fs *flag.FlagSet) func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
	listen := fs.String("metrics", "", "`HOST:PORT` to serve the fleet's Prometheus metrics on, as `mesh-release metrics` does (default: none)")
	var o metricsFlags
	fs.BoolVar(&o.nodeMetrics, "node-metrics", false, "with --metrics, add per-node series (a node label each)")
	o.silentAfter = fleet.DefaultSilentAfter
	return func(ctx context.Context, s *stdio, srv *bus.Server, store *trust.Store, n wire.Names) error {
		if *listen == "" {
			if o.nodeMetrics {
				return usagef("--node-metrics goes with --metrics")
			}
			return nil
		}
		ln, err := listenTCP("metrics", *listen)
		if err != nil {
			return err
		}
		creds := ""
		if store != nil {
			creds = store.AdminCreds()
		}
		c, err := srv.Connect(ctx, creds)
		if err != nil {
			ln.Close()
			return err
		}
		go func() {
			defer c.Close()
			if err := serveMetrics(ctx, s, c, n, ln, o); err != nil {
				logkey.Text(s.err, nil).Error("metrics stopped", "err", err)
			}
		}()
		return nil
	}
}
