// Package web serves the live fleet page (`mesh-release web`).
//
// It shows the fleet as `fleet` judges it, the current or last rollout as batches with progress
// bars, its halt report, the withdrawals, and one node's page as `fleet NODE` tells it. It only
// reads the bus.
//
// The pages are rendered on the server by html/template, so the tables work without JavaScript
// and every text from the bus is escaped in one place. The one script, assets/live.js, adds the
// live updates: it listens to server-sent events carrying the same server-rendered fragments and
// swaps them in. Heartbeats are followed in the background (fleet.Watch into a fleet.View, as
// the metrics do); the rollouts and withdrawals buckets are read at most once a second, and a
// page's clients are told when either changed.
package web

import (
	"context"
	"embed"
	"errors"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// DefaultListen is where `mesh-release web` serves the page: loopback, next to the metrics'
// 127.0.0.1:9469.
const DefaultListen = "127.0.0.1:9470"

// DefaultEvery is how often the buckets are read and the pages' time-dependent parts sent.
const DefaultEvery = time.Second

//go:embed assets
var assets embed.FS

// Config is what a Server reads and how.
type Config struct {
	JS    jetstream.JetStream
	Names wire.Names
	// SilentAfter is the fleet view's rule (default fleet.DefaultSilentAfter).
	SilentAfter time.Duration
	// Every is how often the buckets are read and the pages' clients sent the time-dependent
	// parts again (ages, silence) when nothing else changed (default DefaultEvery).
	Every time.Duration
	Now   func() time.Time
	Log   *slog.Logger
}

// Server is the page's handlers over one view of the bus; Run feeds it.
type Server struct {
	cfg   Config
	view  *fleet.View
	ready atomic.Bool
	// watchErr is why following the heartbeats failed last, "" while it works.
	watchErr atomic.Pointer[string]
	reads    atomic.Int64 // reads of the buckets done (tests wait on it)

	mu      sync.Mutex
	buckets buckets
	changed chan struct{} // closed, and replaced, when anything the pages show changed
	gen     uint64        // counts the changes

	cacheMu sync.Mutex // guards the fleet fragment last drawn, shared by every open page
	cache   drawn

	roots fleet.RootReader
}

// drawn is the fleet fragment as drawn for change gen at at.
type drawn struct {
	gen  uint64
	at   time.Time
	html []byte
}

// buckets is one read of the rollouts and withdrawals buckets.
type buckets struct {
	rollout     rollout.State
	hasRollout  bool
	rolloutErr  string
	withdrawals wire.Withdrawals
	withdrawRev uint64
	withdrawErr string
	// trustRoot is the newest root on the bus (fleet.RootReader); rootErr says why the roots
	// could not be read or the next is refused.
	trustRoot uint64
	rootErr   string
}

// withDefaults returns c with every zero field at its default (decision 0041).
func (c Config) withDefaults() Config {
	if c.SilentAfter <= 0 {
		c.SilentAfter = fleet.DefaultSilentAfter
	}
	if c.Every <= 0 {
		c.Every = DefaultEvery
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// New returns a Server of cfg; Run fills it.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	return &Server{cfg: cfg, view: fleet.NewView(), changed: make(chan struct{})}
}

// Run follows the heartbeats and reads the buckets until ctx ends, following again (after a
// pause) when the stream cannot be read: the bus restarting must not end the page. It returns
// ctx's error.
func (s *Server) Run(ctx context.Context) error {
	go s.readBuckets(ctx)
	for {
		err := fleet.Watch(ctx, s.cfg.JS, s.cfg.Names, func(e fleet.Entry) {
			s.view.Update(e)
			if s.ready.Load() {
				s.notify()
			}
		}, func() {
			s.ready.Store(true)
			s.watchErr.Store(nil)
			s.notify()
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg := text.Cut(text.Printable(err.Error()), 512)
		s.watchErr.Store(&msg)
		s.notify()
		s.cfg.Log.Warn("web: following the heartbeats failed; trying again in 2s", "err", msg)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// readBuckets reads the rollouts and withdrawals buckets and the roots every cfg.Every, telling the clients
// when what they hold changed.
func (s *Server) readBuckets(ctx context.Context) {
	t := time.NewTicker(s.cfg.Every)
	defer t.Stop()
	for {
		b := s.read(ctx)
		s.reads.Add(1)
		s.mu.Lock()
		same := reflect.DeepEqual(b, s.buckets)
		s.buckets = b
		s.mu.Unlock()
		if !same {
			s.notify()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) read(ctx context.Context) buckets {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var b buckets
	st, ok, err := rollout.Current(ctx, s.cfg.JS, s.cfg.Names)
	if err != nil {
		b.rolloutErr = text.Cut(text.Printable(err.Error()), 512)
	} else {
		b.rollout, b.hasRollout = st, ok
	}
	w, rev, err := targets.ReadWithdrawals(ctx, s.cfg.JS, s.cfg.Names)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
		// a bus set up before withdrawals has withdrawn nothing
	case err != nil:
		b.withdrawErr = text.Cut(text.Printable(err.Error()), 512)
	default:
		b.withdrawals, b.withdrawRev = w, rev
	}
	root, refused, err := s.roots.Newest(ctx, s.cfg.JS, s.cfg.Names)
	b.trustRoot, b.rootErr = root, refused
	if err != nil {
		b.rootErr = "the roots could not be read: " + err.Error()
	}
	b.rootErr = text.Cut(text.Printable(b.rootErr), 512)
	return b
}

// Update records one heartbeat as Run does, and MarkReady says the view is complete; for tests
// that feed the view themselves.
func (s *Server) Update(e fleet.Entry) { s.view.Update(e); s.notify() }

// MarkReady says the view holds every node's last heartbeat.
func (s *Server) MarkReady() { s.ready.Store(true); s.notify() }

// SetBuckets sets what the rollouts and withdrawals buckets hold, for tests without a bus.
func (s *Server) SetBuckets(st rollout.State, hasRollout bool, w wire.Withdrawals, rev uint64) {
	s.mu.Lock()
	s.buckets = buckets{rollout: st, hasRollout: hasRollout, withdrawals: w, withdrawRev: rev}
	s.mu.Unlock()
	s.notify()
}

// notify wakes every client waiting for a change.
func (s *Server) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.gen++
	s.mu.Unlock()
}

// wait returns a channel closed at the next change, and the current change's number.
func (s *Server) wait() (<-chan struct{}, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed, s.gen
}

func (s *Server) snapshot() buckets {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buckets
}

// Handler serves the pages, their events and their assets. It answers GET (and HEAD) only:
// nothing it serves changes anything.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.fleetPage)
	mux.HandleFunc("GET /events", s.fleetEvents)
	mux.HandleFunc("GET /node/{node}", s.nodePage)
	mux.HandleFunc("GET /node/{node}/events", s.nodeEvents)
	mux.Handle("GET /assets/{file}", staticAssets())
	return headers(mux)
}

// staticAssets serves the script and the stylesheet, nothing else of assets (no listing, no
// template).
func staticAssets() http.Handler {
	files := http.FileServerFS(assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("file") {
		case "live.js", "style.css":
			files.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// headers sets what every answer carries: a content security policy allowing only this
// server's own script and style (no inline script, so an escaped text that slipped through
// still could not run), no framing, no referrer, no sniffing.
func headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}
