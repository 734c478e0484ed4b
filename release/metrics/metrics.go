// Package metrics serves the fleet, the current rollout and the releases as Prometheus metrics
// (docs/metrics.md).
//
// It is what `mesh-release metrics` and `serve --metrics` serve on /metrics. It only reads the bus.
//
// Heartbeats are followed in the background: fleet.Watch folds them, pushed by the server, into
// a fleet.View, and a scrape judges the view's rows as of its own time (the fleet view's STATE
// rules, SILENT included). Reading the heartbeat stream on every scrape would move a message per
// node per scrape — 10,000 of them at 10,000 nodes, every 15 s, for each Prometheus. The
// rollouts, releases and withdrawals buckets are small and read on a scrape, at most once per
// BucketsEvery, so several Prometheis scraping together share one read.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

// DefaultListen is where `mesh-release metrics` serves /metrics: loopback, Prometheus's
// customary port range, not taken by a well-known exporter.
const DefaultListen = "127.0.0.1:9469"

// DefaultBucketsEvery is how long a read of the buckets serves scrapes.
const DefaultBucketsEvery = time.Second

// MaxVersions bounds the values a version label takes in one scrape: the versions with the most
// nodes keep their own series, the rest are summed under "other". A heartbeat is written by
// the node (or anyone allowed to publish on its subject), so a label is never raw input.
const MaxVersions = 50

// Label values for what a version label cannot say as a version.
const (
	versionNone    = "none"    // the heartbeat names no version (or has no launcher)
	versionInvalid = "invalid" // the heartbeat's text is not a version
	versionOther   = "other"   // beyond MaxVersions
)

// maxNodeLabel bounds a node id in a label (--node-metrics); ids on the bus are at most 64 bytes.
const maxNodeLabel = 96

// Config is what an Exporter reads and how.
type Config struct {
	// JS is the bus read; nil reads no bucket, for a view fed by Update alone (benchmarks).
	JS    jetstream.JetStream
	Names wire.Names
	// SilentAfter is the fleet view's rule (default fleet.DefaultSilentAfter).
	SilentAfter time.Duration
	// NodeMetrics adds the per-node series (a node label each): 10,000 nodes are 10,000 series
	// per metric, which is why they are off by default.
	NodeMetrics bool
	// BucketsEvery is how long one read of the buckets serves scrapes (default
	// DefaultBucketsEvery).
	BucketsEvery time.Duration
	// Now is the clock (default time.Now); Log says why a read failed (default: discarded).
	Now func() time.Time
	Log *slog.Logger
}

// Exporter is a prometheus.Collector of the fleet, the rollout and the releases.
type Exporter struct {
	cfg   Config
	view  *fleet.View
	ready atomic.Bool // the view holds every node's last heartbeat
	// watchErr is why following the heartbeats failed last, "" while it works.
	watchErr atomic.Pointer[string]

	mu      sync.Mutex // guards the buckets' snapshot
	buckets buckets
	read    time.Time
	roots   fleet.RootReader
}

// buckets is one read of the rollouts, releases and withdrawals buckets.
type buckets struct {
	rollout     rollout.State
	hasRollout  bool
	rolloutOK   bool
	published   int
	releasesOK  bool
	withdrawals wire.Withdrawals
	withdrawnOK bool
	withdrawRev uint64
	trustRoot   uint64 // the newest root on the bus
	rootsOK     bool
}

// withDefaults returns c with every zero field at its default (decision 0041).
func (c Config) withDefaults() Config {
	if c.SilentAfter <= 0 {
		c.SilentAfter = fleet.DefaultSilentAfter
	}
	if c.BucketsEvery <= 0 {
		c.BucketsEvery = DefaultBucketsEvery
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return c
}

// New returns an exporter of cfg; Run fills it.
func New(cfg Config) *Exporter {
	cfg = cfg.withDefaults()
	return &Exporter{cfg: cfg, view: fleet.NewView()}
}

// Run follows the heartbeats into the exporter's view until ctx ends, following again (after a
// pause) when the stream cannot be read: the bus restarting must not end the exporter. It
// returns ctx's error.
func (e *Exporter) Run(ctx context.Context) error {
	for {
		err := fleet.Watch(ctx, e.cfg.JS, e.cfg.Names, e.view.Update, func() {
			e.ready.Store(true)
			e.watchErr.Store(nil)
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg := text.Cut(text.Printable(err.Error()), 512)
		e.watchErr.Store(&msg)
		e.cfg.Log.Warn("metrics: following the heartbeats failed; trying again in 2s", "err", msg)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// Ready reports whether the view holds every node's last heartbeat (the first catch-up ended).
func (e *Exporter) Ready() bool { return e.ready.Load() }

// Update records one heartbeat as Run does; for callers that feed the view themselves
// (benchmarks, a view shared with another reader).
func (e *Exporter) Update(en fleet.Entry) { e.view.Update(en) }

// MarkReady says the view is complete when it is fed by Update.
func (e *Exporter) MarkReady() { e.ready.Store(true) }

// Handler serves the exporter's metrics (and nothing of the Go process: they are the fleet's,
// not this tool's) in Prometheus's text or OpenMetrics format, as the scraper asks.
func (e *Exporter) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4})
}

// Describe sends every metric's description.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect judges the view as of now and reads the buckets (at most once per BucketsEvery).
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	now := e.cfg.Now()
	b := e.readBuckets(now)
	up := func(source string, ok bool) {
		ch <- gauge(descSourceUp, b2f(ok), source)
	}
	// Until the view holds every node's last heartbeat, and while the stream cannot be
	// followed, the fleet's series are left out: a partial count would read as nodes gone, and
	// a view no longer fed would turn every node SILENT.
	heartbeats := e.ready.Load() && e.watchErr.Load() == nil
	up("heartbeats", heartbeats)
	up("rollouts", b.rolloutOK)
	up("releases", b.releasesOK)
	up("withdrawals", b.withdrawnOK)
	up("roots", b.rootsOK)

	var rows []fleet.Row
	if heartbeats {
		rows = e.view.RowsWith(now, fleet.RowOptions{SilentAfter: e.cfg.SilentAfter, Withdrawals: b.withdrawals, WithdrawalsRevision: b.withdrawRev, TrustRoot: b.trustRoot})
		collectFleet(ch, rows, e.cfg.NodeMetrics)
		collectTrust(ch, rows, e.cfg.NodeMetrics)
	}
	if b.rootsOK {
		ch <- gauge(descTrustRoot, float64(b.trustRoot))
	}
	if b.hasRollout {
		collectRollout(ch, b.rollout, rows, heartbeats, now)
	}
	if b.releasesOK {
		ch <- counter(descPublished, float64(b.published))
	}
	if b.withdrawnOK {
		ch <- counter(descWithdrawn, float64(len(b.withdrawals.Withdrawn)))
	}
}

// readBuckets returns the buckets' snapshot, read again when it is older than BucketsEvery. A
// bucket that cannot be read keeps nothing of it (its source_up says 0): a stale rollout shown
// as current would be worse than none.
func (e *Exporter) readBuckets(now time.Time) buckets {
	if e.cfg.JS == nil {
		return buckets{}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.read.IsZero() && now.Sub(e.read) < e.cfg.BucketsEvery && now.After(e.read) {
		return e.buckets
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b buckets
	st, ok, err := rollout.Current(ctx, e.cfg.JS, e.cfg.Names)
	if err != nil {
		e.cfg.Log.Warn("metrics: read the current rollout", "err", err)
	} else {
		b.rollout, b.hasRollout, b.rolloutOK = st, ok, true
	}
	n, err := countReleases(ctx, e.cfg.JS, e.cfg.Names)
	if err != nil {
		e.cfg.Log.Warn("metrics: count the releases", "err", err)
	} else {
		b.published, b.releasesOK = n, true
	}
	w, rev, err := targets.ReadWithdrawals(ctx, e.cfg.JS, e.cfg.Names)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
		b.withdrawnOK = true // a bus set up before withdrawals has withdrawn nothing
	case err != nil:
		e.cfg.Log.Warn("metrics: read the withdrawals", "err", err)
	default:
		b.withdrawals, b.withdrawRev, b.withdrawnOK = w, rev, true
	}
	root, refused, err := e.roots.Newest(ctx, e.cfg.JS, e.cfg.Names)
	if err != nil {
		e.cfg.Log.Warn("metrics: read the roots", "err", err)
	} else if refused != "" {
		e.cfg.Log.Warn("metrics: a root on the bus is refused", "err", refused)
	}
	b.trustRoot, b.rootsOK = root, err == nil
	e.buckets, e.read = b, now
	return b
}

// countReleases counts the manifests in the releases bucket (one key a version; the bucket's
// other keys, roots root.<n> and the bus document, are not releases). Listing the keys reads
// their last headers only, never the manifests.
func countReleases(ctx context.Context, js jetstream.JetStream, n wire.Names) (int, error) {
	kv, err := js.KeyValue(ctx, n.Releases())
	if err != nil {
		return 0, fmt.Errorf("metrics: KV %s: %w", n.Releases(), err)
	}
	kl, err := kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("metrics: list %s: %w", n.Releases(), err)
	}
	defer kl.Stop()
	count := 0
	for k := range kl.Keys() {
		if wire.ValidVersion(k) {
			count++
		}
	}
	return count, nil
}

func collectFleet(ch chan<- prometheus.Metric, rows []fleet.Row, perNode bool) {
	kinds := make(map[fleet.Kind]int, len(allKinds))
	running, knownGood, launchers := versionCounter{}, versionCounter{}, versionCounter{}
	var failing, drifted, driftedResources int
	var fetchBytes, fetchSize int64
	var oldest float64
	hist := newAgeHistogram()
	for _, r := range rows {
		kinds[r.StatusKind]++
		age := max(r.AgeS, 0)
		oldest = max(oldest, age)
		hist.observe(age)
		running.add(r.Running)
		knownGood.add(r.KnownGood)
		launchers.add(launcherVersion(r.Launcher))
		if r.ReconcileOK != nil && !*r.ReconcileOK {
			failing++
		}
		var hb wire.Heartbeat
		if r.Heartbeat != nil {
			hb = *r.Heartbeat
		}
		if len(hb.Drift) > 0 {
			drifted++
			driftedResources += len(hb.Drift)
		}
		if f := hb.Fetch; f != nil && f.State == "fetching" {
			fetchBytes += f.Bytes
			fetchSize += f.Total
		}
		if perNode {
			node := nodeLabel(r.Node)
			ch <- gauge(descNodeInfo, 1, node, versionLabel(r.Running), versionLabel(r.KnownGood), string(r.StatusKind), versionLabel(launcherVersion(r.Launcher)),
				platformLabel(r.Platform))
			ch <- gauge(descNodeAge, age, node)
			ch <- gauge(descNodeFailing, b2f(r.ReconcileOK != nil && !*r.ReconcileOK), node)
			ch <- gauge(descNodeDrifted, float64(len(hb.Drift)), node)
			if f := hb.Fetch; f != nil {
				ch <- gauge(descNodeFetchBytes, float64(f.Bytes), node)
			}
		}
	}
	ch <- gauge(descNodes, float64(len(rows)))
	collectPlatforms(ch, rows)
	for _, k := range allKinds {
		ch <- gauge(descNodesState, float64(kinds[k]), string(k))
	}
	for _, d := range []struct {
		desc *prometheus.Desc
		c    versionCounter
	}{{descNodesRunning, running}, {descNodesKnownGood, knownGood}, {descNodesLauncher, launchers}} {
		for v, n := range d.c.bounded() {
			ch <- gauge(d.desc, float64(n), v)
		}
	}
	ch <- gauge(descFailing, float64(failing))
	ch <- gauge(descDriftedNodes, float64(drifted))
	ch <- gauge(descDriftedResources, float64(driftedResources))
	ch <- gauge(descFetchBytes, float64(fetchBytes))
	ch <- gauge(descFetchSize, float64(fetchSize))
	ch <- gauge(descOldestAge, oldest)
	ch <- prometheus.MustNewConstHistogram(descAge, uint64(len(rows)), hist.sum, hist.counts())
}

// nodeLabel is a node id as a label value: printable and bounded.
func nodeLabel(node string) string { return text.Cut(text.Printable(node), maxNodeLabel) }

func launcherVersion(l *wire.Launcher) string {
	if l == nil {
		return ""
	}
	return l.Version
}

// versionCounter counts nodes by a version label.
type versionCounter map[string]int

func (c versionCounter) add(v string) { c[versionLabel(v)]++ }

// bounded is c with at most MaxVersions values: the versions with the most nodes (ties by
// name), the rest summed as "other".
func (c versionCounter) bounded() map[string]int { return boundCounts(c, MaxVersions) }

// boundCounts is c with at most limit values: the ones with the most nodes (ties by name), the
// rest summed as "other".
func boundCounts(c map[string]int, limit int) map[string]int {
	if len(c) <= limit {
		return c
	}
	vs := make([]string, 0, len(c))
	for v := range c {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool {
		if c[vs[i]] != c[vs[j]] {
			return c[vs[i]] > c[vs[j]]
		}
		return vs[i] < vs[j]
	})
	out := make(map[string]int, limit)
	for i, v := range vs {
		if i < limit-1 && v != versionOther {
			out[v] = c[v]
		} else {
			out[versionOther] += c[v]
		}
	}
	return out
}

// versionLabel is v as a label value: a version, or none, or invalid.
func versionLabel(v string) string {
	switch {
	case v == "":
		return versionNone
	case wire.ValidVersion(v):
		return v
	}
	return versionInvalid
}

// ageBuckets are the heartbeat age histogram's upper bounds, in seconds: around the host's
// default 30 s interval and the 90 s silence rule, then minutes and hours.
var ageBuckets = []float64{15, 30, 45, 60, 90, 120, 300, 900, 3600, 21600, 86400}

type ageHistogram struct {
	n   []uint64 // per bucket, not cumulative
	sum float64
}

func newAgeHistogram() *ageHistogram { return &ageHistogram{n: make([]uint64, len(ageBuckets))} }

func (h *ageHistogram) observe(age float64) {
	h.sum += age
	i := sort.SearchFloat64s(ageBuckets, age) // the first bound ≥ age
	if i < len(ageBuckets) {
		h.n[i]++
	}
}

// counts is the histogram as Prometheus wants it: cumulative, per upper bound.
func (h *ageHistogram) counts() map[float64]uint64 {
	out := make(map[float64]uint64, len(ageBuckets))
	var total uint64
	for i, le := range ageBuckets {
		total += h.n[i]
		out[le] = total
	}
	return out
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
