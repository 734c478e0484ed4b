package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// series is one scrape: each sample's value by its name and labels, as `name{k="v",…}` with the
// labels in the order Prometheus sorts them.
type series map[string]float64

func gather(t testing.TB, c prometheus.Collector) series {
	t.Helper()
	reg := prometheus.NewPedanticRegistry() // checks every metric against its description
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := series{}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[name] = m.Gauge.GetValue()
			case dto.MetricType_COUNTER:
				out[name] = m.Counter.GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func heartbeat(node string, f func(*wire.Heartbeat)) wire.Heartbeat {
	hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.2.0", KnownGood: "v1.2.0", UptimeS: 600,
		SentAt: time.Now(), LastReconcile: &wire.LastReconcile{At: time.Now(), OK: true},
		Launcher: &wire.Launcher{Version: "v0.3.0", State: wire.LauncherConfirmed}}
	if f != nil {
		f(&hb)
	}
	return hb
}

// A lab fleet on the real bus: the exporter follows its heartbeats and counts each node once,
// by the fleet view's STATE, by its versions and launcher, with its failing reconcile, drift and
// fetch; a spoofed version is a bounded label, never the text; an hour on, every node is silent.
func TestExporterCountsTheFleetByTheFleetViewsRules(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, time.Minute)
	beats := []wire.Heartbeat{
		heartbeat("n1", nil),
		heartbeat("n2", nil),
		heartbeat("n3", func(hb *wire.Heartbeat) {
			hb.LastReconcile = &wire.LastReconcile{At: time.Now(), Error: "unit web.service: exit 1"}
		}),
		heartbeat("n4", func(hb *wire.Heartbeat) {
			hb.Drift = []wire.Drifted{{Type: "file", ID: "a", What: "content"}, {Type: "file", ID: "b", What: "mode"}}
		}),
		heartbeat("n5", func(hb *wire.Heartbeat) {
			hb.Target, hb.Fetch = "v1.3.0", &wire.Fetch{State: "fetching", Version: "v1.3.0", Bytes: 100, Total: 1000}
		}),
		heartbeat("n6", func(hb *wire.Heartbeat) {
			hb.Running, hb.KnownGood, hb.Launcher = "v1.1.0\x1b[2J", "v1.1.0", nil
		}),
	}
	for _, hb := range beats {
		if _, err := b.Conn.JS.Publish(ctx, b.Names.Heartbeat(hb.Node), hb.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	// Node n1 heartbeats again: still one node.
	if _, err := b.Conn.JS.Publish(ctx, b.Names.Heartbeat("n1"), beats[0].Marshal()); err != nil {
		t.Fatal(err)
	}
	var shift time.Duration
	e := New(Config{JS: b.Conn.JS, Names: b.Names, Now: func() time.Time { return time.Now().Add(shift) }})
	before := gather(t, e)
	if _, ok := before["mesh_fleet_nodes"]; ok || before[`mesh_metrics_source_up{source="heartbeats"}`] != 0 {
		t.Errorf("before the heartbeats were read: %v; want no fleet series and heartbeats down", before)
	}
	e.read = time.Time{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() { stop(); <-done }()
	meshtest.Eventually(t, "the exporter has caught up with the heartbeats", e.Ready)

	s := gather(t, e)
	for name, want := range map[string]float64{
		`mesh_metrics_source_up{source="heartbeats"}`:              1,
		`mesh_metrics_source_up{source="rollouts"}`:                1,
		`mesh_metrics_source_up{source="releases"}`:                1,
		`mesh_fleet_nodes`:                                         6,
		`mesh_fleet_nodes_by_running_version{version="v1.2.0"}`:    5,
		`mesh_fleet_nodes_by_running_version{version="invalid"}`:   1,
		`mesh_fleet_nodes_by_known_good_version{version="v1.1.0"}`: 1,
		`mesh_fleet_nodes_by_launcher_version{version="v0.3.0"}`:   5,
		`mesh_fleet_nodes_by_launcher_version{version="none"}`:     1,
		`mesh_fleet_nodes_by_state{state="ok"}`:                    3,
		`mesh_fleet_nodes_by_state{state="trying"}`:                1, // n6 runs what is not its known-good
		`mesh_fleet_nodes_by_state{state="failing"}`:               1,
		`mesh_fleet_nodes_by_state{state="fetching"}`:              1,
		`mesh_fleet_nodes_by_state{state="silent"}`:                0,
		`mesh_fleet_nodes_reconcile_failing`:                       1,
		`mesh_fleet_nodes_drifted`:                                 1,
		`mesh_fleet_drifted_resources`:                             2,
		`mesh_fleet_fetch_bytes`:                                   100,
		`mesh_fleet_fetch_size_bytes`:                              1000,
		`mesh_fleet_heartbeat_age_seconds_count`:                   6,
		`mesh_releases_published_total`:                            0,
		`mesh_releases_withdrawn_total`:                            0,
	} {
		if got, ok := s[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	for name := range s {
		if strings.Contains(name, "\x1b") || strings.HasPrefix(name, "mesh_node_") || strings.HasPrefix(name, "mesh_rollout_") {
			t.Errorf("series %q: no node label by default, no rollout when none ran, no raw text", name)
		}
	}

	shift = time.Hour
	e.cfg.BucketsEvery = time.Nanosecond
	s = gather(t, e)
	if got := s[`mesh_fleet_nodes_by_state{state="silent"}`]; got != 6 {
		t.Errorf("an hour on, %v nodes silent, want 6", got)
	}
	if got := s[`mesh_fleet_heartbeat_oldest_age_seconds`]; got < 3600 {
		t.Errorf("an hour on, the oldest heartbeat is %vs old", got)
	}
}

// --node-metrics adds a series per node, its id as a label; the fleet's series stay.
func TestNodeMetricsLabelEachNode(t *testing.T) {
	e := New(Config{NodeMetrics: true})
	now := time.Now()
	for _, n := range []string{"web-1", "web-2"} {
		e.Update(fleet.Entry{Node: n, Heard: now, Heartbeat: heartbeat(n, func(hb *wire.Heartbeat) { hb.Drift = make([]wire.Drifted, 3) })})
	}
	e.MarkReady()
	s := gather(t, e)
	for name, want := range map[string]float64{
		`mesh_node_info{known_good="v1.2.0",launcher="v0.3.0",node="web-1",platform="unknown",running="v1.2.0",state="ok"}`: 1,
		`mesh_node_drifted_resources{node="web-2"}`: 3,
		`mesh_node_reconcile_failing{node="web-2"}`: 0,
		`mesh_fleet_nodes`:                          2,
	} {
		if got, ok := s[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}

func TestVersionLabelsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		versions int
		wantVals int
		other    int
	}{
		{"few versions keep their own series", 3, 3, 0},
		{"exactly the bound keeps every version", MaxVersions, MaxVersions, 0},
		{"beyond the bound the smallest are summed as other", MaxVersions + 20, MaxVersions, 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := versionCounter{}
			for i := range tc.versions {
				v := fmt.Sprintf("v1.%d.0", i)
				c.add(v)
				if i == 0 {
					c.add(v) // the one with most nodes always stays
				}
			}
			got := c.bounded()
			if len(got) != tc.wantVals || got[versionOther] != tc.other || got["v1.0.0"] != 2 {
				t.Errorf("%d values, other %d, v1.0.0 %d; want %d, %d, 2", len(got), got[versionOther], got["v1.0.0"], tc.wantVals, tc.other)
			}
		})
	}
}

func TestRolloutSeriesSayBatchProgressAndWhyItHalted(t *testing.T) {
	created := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	base := rollout.State{ID: "r1", Version: "v1.3.0", Status: rollout.StatusRunning, Created: created, SoakS: 120,
		Nodes:   []string{"c1", "c2", "a1", "a2", "a3", "a4"},
		Batches: []rollout.Batch{{Name: "canary", End: 2, Done: created.Add(time.Minute)}, {Name: "100%", End: 6}},
		Current: 1, Holder: &rollout.Holder{Until: created.Add(time.Hour)}}
	on := func(node string, uptime int64) fleet.Row {
		hb := heartbeat(node, func(hb *wire.Heartbeat) { hb.Running, hb.KnownGood, hb.UptimeS = "v1.3.0", "v1.3.0", uptime })
		return fleet.Row{Node: node, Heartbeat: &hb}
	}
	rows := []fleet.Row{on("c1", 10), on("c2", 10), on("a1", 500), on("a2", 30), {Node: "a3", Heartbeat: &wire.Heartbeat{Running: "v1.2.0"}}}
	halted := base
	halted.Status = rollout.StatusHalted
	halted.Halt = &rollout.Halt{Batch: 1, Nodes: []rollout.NodeReason{{Node: "a3", Why: rollout.WhyRolledBack}, {Node: "a4", Why: rollout.WhySilent}, {Node: "x", Why: "a-new-reason"}}, More: 4}
	for _, tc := range []struct {
		name string
		st   rollout.State
		want map[string]float64
	}{
		{"a running rollout counts its confirmed and soaked nodes, a done batch's all soaked", base, map[string]float64{
			`mesh_rollout_info{id="r1",status="running",version="v1.3.0"}`: 1,
			`mesh_rollout_batch`: 2, `mesh_rollout_batches`: 2, `mesh_rollout_nodes`: 6, `mesh_rollout_halted`: 0, `mesh_rollout_paused`: 0,
			`mesh_rollout_nodes_confirmed`: 4, `mesh_rollout_nodes_soaked`: 3,
			`mesh_rollout_batch_nodes`: 4, `mesh_rollout_batch_nodes_confirmed`: 2, `mesh_rollout_batch_nodes_soaked`: 1,
			`mesh_rollout_created_timestamp_seconds`:        float64(created.Unix()),
			`mesh_rollout_halt_nodes{reason="rolled-back"}`: 0,
		}},
		{"a halted rollout says why by reason, an unknown one as other, the unnamed as unlisted", halted, map[string]float64{
			`mesh_rollout_info{id="r1",status="halted",version="v1.3.0"}`: 1,
			`mesh_rollout_halted`:                           1,
			`mesh_rollout_halt_nodes{reason="rolled-back"}`: 1, `mesh_rollout_halt_nodes{reason="silent"}`: 1,
			`mesh_rollout_halt_nodes{reason="other"}`: 1, `mesh_rollout_halt_nodes{reason="unlisted"}`: 4,
			`mesh_rollout_halt_nodes{reason="refused"}`: 0,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := gather(t, collectorFunc(func(ch chan<- prometheus.Metric) { collectRollout(ch, tc.st, rows, true, created.Add(time.Minute)) }))
			for name, want := range tc.want {
				if got, ok := s[name]; !ok || got != want {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
				}
			}
		})
	}
}

// collectorFunc is a collector of what f sends, described by allDescs.
type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// The handler answers in Prometheus's text format, with the fleet's metrics only.
func TestHandlerServesTheTextFormat(t *testing.T) {
	e := New(Config{})
	e.MarkReady()
	e.Update(fleet.Entry{Node: "n1", Heard: time.Now(), Heartbeat: heartbeat("n1", nil)})
	rec := httptest.NewRecorder()
	e.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if rec.Code != 200 || !strings.Contains(string(body), "# TYPE mesh_fleet_nodes gauge\nmesh_fleet_nodes 1\n") {
		t.Errorf("status %d:\n%s", rec.Code, body)
	}
	if strings.Contains(string(body), "go_goroutines") {
		t.Errorf("the Go process's metrics are served too")
	}
}

// The issue (§3): the rollout metrics say each platform's progress under a bounded platform
// label — the platforms the rollout names, then "other" (a node whose heartbeat names another) —
// with the nodes it left out by platform and its halt's troubled nodes by platform; a rollout
// whose nodes said no platform has no such series.
func TestRolloutSeriesSayEachPlatformsProgress(t *testing.T) {
	created := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	st := rollout.State{ID: "r1", Version: "v1.3.0", Status: rollout.StatusHalted, Created: created, SoakS: 120,
		Nodes: []string{"amd-1", "arm-1", "amd-2", "arm-2", "odd"},
		Batches: []rollout.Batch{
			{Name: "canary", End: 2, Done: created.Add(time.Minute), Platforms: []rollout.PlatformCount{{Platform: "linux/amd64", Nodes: 1}, {Platform: "linux/arm64", Nodes: 1}}},
			{Name: "100%", End: 5, Platforms: []rollout.PlatformCount{{Platform: "linux/amd64", Nodes: 1}, {Platform: "linux/arm64", Nodes: 1}, {Platform: rollout.UnknownPlatform, Nodes: 1}}}},
		Current: 1, Skipped: []rollout.SkippedPlatform{{Platform: "linux/arm/v7", Nodes: 12, Why: rollout.SkipNoBuild}},
		Halt: &rollout.Halt{Batch: 1, Nodes: []rollout.NodeReason{{Node: "arm-2", Why: rollout.WhyRolledBack}},
			Platforms: []rollout.PlatformOutcome{{Platform: "linux/arm64", Nodes: 1, Troubled: 1, Why: rollout.WhyRolledBack}, {Platform: "linux/amd64", Nodes: 1, Confirmed: 1}}}}
	on := func(node, platform, running string, uptime int64) fleet.Row {
		hb := heartbeat(node, func(hb *wire.Heartbeat) {
			hb.Running, hb.KnownGood, hb.UptimeS = running, running, uptime
			hb.Profile = &wire.Profile{OS: "linux", Platform: platform}
		})
		return fleet.Row{Node: node, Heartbeat: &hb}
	}
	rows := []fleet.Row{on("amd-1", "linux/amd64", "v1.3.0", 500), on("arm-1", "linux/arm64", "v1.3.0", 500),
		on("amd-2", "linux/amd64", "v1.3.0", 10), on("arm-2", "linux/arm64", "v1.2.0", 10), on("odd", "linux/riscv64", "v1.3.0", 10)}
	s := gather(t, collectorFunc(func(ch chan<- prometheus.Metric) { collectRollout(ch, st, rows, true, created.Add(time.Minute)) }))
	for name, want := range map[string]float64{
		`mesh_rollout_platform_nodes{platform="linux/amd64"}`:           2,
		`mesh_rollout_platform_nodes{platform="linux/arm64"}`:           2,
		`mesh_rollout_platform_nodes{platform="unknown"}`:               1,
		`mesh_rollout_platform_nodes_confirmed{platform="linux/amd64"}`: 2,
		`mesh_rollout_platform_nodes_soaked{platform="linux/amd64"}`:    1,
		`mesh_rollout_platform_nodes_confirmed{platform="linux/arm64"}`: 1,
		`mesh_rollout_platform_nodes_confirmed{platform="other"}`:       1,
		`mesh_rollout_platform_halt_nodes{platform="linux/arm64"}`:      1,
		`mesh_rollout_platform_halt_nodes{platform="linux/amd64"}`:      0,
		`mesh_rollout_platform_skipped_nodes{platform="linux/arm/v7"}`:  12,
	} {
		if got, ok := s[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	st.Skipped, st.Halt = nil, nil
	for i := range st.Batches {
		st.Batches[i].Platforms = nil
	}
	for name := range gather(t, collectorFunc(func(ch chan<- prometheus.Metric) { collectRollout(ch, st, rows, true, created) })) {
		if strings.HasPrefix(name, "mesh_rollout_platform_") {
			t.Errorf("%s for a rollout whose nodes said no platform", name)
		}
	}
}
