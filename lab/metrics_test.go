package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Debian's prometheus package: the server and promtool. .ci/run installs it.
const (
	prometheusBin = "/usr/bin/prometheus"
	promtoolBin   = "/usr/bin/promtool"
)

// Issue 22: a lab fleet's heartbeats on the bus, `mesh-release metrics` as a real process
// reading them, its /metrics passing `promtool check metrics`, and a real Prometheus scraping it
// every second answering PromQL with the node counts the test made. The exporter writes nothing
// to the bus: every stream but the heartbeats' is as it was.
func TestPrometheusScrapesTheFleetsMetrics(t *testing.T) {
	for _, bin := range []string{prometheusBin, promtoolBin} {
		if _, err := os.Stat(bin); err != nil {
			meshtest.SkipUnlessCI(t, "%s is not installed (Debian's prometheus package: apt-get install -y --no-install-recommends prometheus; .ci/run installs it): %v", bin, err)
		}
	}
	ctx := meshtest.Context(t, 2*time.Minute)
	b := meshtest.StartBus(t)
	release := build(t, PkgRelease, "v0.0.0-lab")

	// The fleet: 5 nodes confirmed on v1.2.0, 3 on v1.3.0, one of which fails its reconcile.
	want := map[string]int{"v1.2.0": 5, "v1.3.0": 3}
	i := 0
	for version, n := range want {
		for range n {
			i++
			hb := wire.Heartbeat{Node: fmt.Sprintf("lab-%02d", i), State: wire.StateRunning, Running: version, KnownGood: version,
				UptimeS: 60, SentAt: time.Now(), LastReconcile: &wire.LastReconcile{At: time.Now(), OK: true}}
			if i == 8 {
				hb.LastReconcile = &wire.LastReconcile{At: time.Now(), Error: "unit web.service: exit status 1"}
			}
			if _, err := b.Conn.JS.Publish(ctx, b.Names.Heartbeat(hb.Node), hb.Marshal()); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := streamSeqs(t, ctx, b.Conn.JS, b.Names)

	ports := freePorts(t, 2)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	out := &meshtest.Buffer{}
	cmd := exec.CommandContext(ctx, release, "metrics", "--nats", b.URL(), "--listen", metricsAddr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("mesh-release metrics said:\n%s", out)
		}
	})
	var body string
	meshtest.Eventually(t, "mesh-release metrics serves the 8 nodes", func() bool {
		body = get(t, "http://"+metricsAddr+"/metrics")
		return strings.Contains(body, "\nmesh_fleet_nodes 8\n")
	})

	check := exec.CommandContext(ctx, promtoolBin, "check", "metrics")
	check.Stdin = strings.NewReader(body)
	if said, err := check.CombinedOutput(); err != nil || len(strings.TrimSpace(string(said))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, said)
	}

	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mesh
    static_configs:
      - targets: ['%s']
`, metricsAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	promOut := &meshtest.Buffer{}
	prom := exec.CommandContext(ctx, prometheusBin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	prom.Stdout, prom.Stderr = promOut, promOut
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.Process.Signal(os.Interrupt)
		prom.Wait()
		if t.Failed() {
			t.Logf("prometheus said:\n%s", promOut)
		}
	})
	for _, q := range []struct {
		query string
		want  int
	}{
		{`mesh_fleet_nodes_by_running_version{job="mesh",version="v1.2.0"}`, want["v1.2.0"]},
		{`mesh_fleet_nodes_by_running_version{job="mesh",version="v1.3.0"}`, want["v1.3.0"]},
		{`sum(mesh_fleet_nodes_by_state{job="mesh",state=~"ok|failing"})`, 8},
		{`mesh_fleet_nodes_reconcile_failing{job="mesh"}`, 1},
		{`up{job="mesh"}`, 1},
	} {
		var got string
		meshtest.EventuallyWithin(t, "Prometheus answers "+q.query, time.Minute, func() bool {
			got = promQuery(t, promAddr, q.query)
			return got == strconv.Itoa(q.want)
		})
	}

	after := streamSeqs(t, ctx, b.Conn.JS, b.Names)
	for name, seq := range before {
		if after[name] != seq {
			t.Errorf("stream %s went from sequence %d to %d while mesh-release metrics ran: it wrote to the bus", name, seq, after[name])
		}
	}
}

// streamSeqs is every stream's last sequence but the heartbeats'.
func streamSeqs(t *testing.T, ctx context.Context, js jetstream.JetStream, n wire.Names) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		if info.Config.Name != n.HeartbeatStream() {
			out[info.Config.Name] = info.State.LastSeq
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func get(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// promQuery is the value of query's single sample now, through Prometheus's HTTP API ("" when
// it has none yet).
func promQuery(t *testing.T, addr, query string) string {
	t.Helper()
	body := get(t, "http://"+addr+"/api/v1/query?query="+url.QueryEscape(query))
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal([]byte(body), &r) != nil || r.Status != "success" || len(r.Data.Result) != 1 {
		return ""
	}
	v, _ := r.Data.Result[0].Value[1].(string)
	return v
}
