package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// metricsURL is the /metrics address a command said it serves.
func metricsURL(t *testing.T, out *meshtest.Buffer) string {
	t.Helper()
	re := regexp.MustCompile(`metrics: serving (http://\S+/metrics)`)
	var u string
	meshtest.Eventually(t, "the command says where it serves /metrics", func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			u = m[1]
		}
		return m != nil
	})
	return u
}

func scrape(u string) string {
	resp, err := http.Get(u)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// serve --metrics serves /metrics beside the bus, reading it in-process with the release side's
// credentials (serve's default: auth and TLS); a heartbeat published by a node shows up.
func TestServeMetricsServesTheFleetBesideTheBus(t *testing.T) {
	data := t.TempDir()
	_, out, errOut, _ := runServe(t, "--data", data, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0")
	u := metricsURL(t, out)
	env := exported(out.String())
	c, err := bus.Connect(context.Background(), env[envNATSURL], env[envNATSCreds], bus.WithCA(env[envNATSCA]))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := wire.NamesFor("")
	hb := wire.Heartbeat{Node: "n1", State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", SentAt: time.Now()}
	if _, err := c.JS.Publish(context.Background(), n.Heartbeat("n1"), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
	meshtest.Eventually(t, "serve's /metrics counts the node", func() bool {
		body := scrape(u)
		return strings.Contains(body, "\nmesh_fleet_nodes 1\n") && strings.Contains(body, `mesh_fleet_nodes_by_running_version{version="v1.0.0"} 1`) &&
			strings.Contains(body, `mesh_metrics_source_up{source="heartbeats"} 1`)
	})
	if strings.Contains(errOut.String(), "metrics") {
		t.Errorf("serve logged about its metrics: %s", errOut)
	}
}

func TestMetricsFlagsAreCheckedBeforeTheBus(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  string
		args []string
		want string
	}{
		{"a non-positive silence rule", "metrics", []string{"--silent-after", "0s"}, "--silent-after must be positive"},
		{"an argument", "metrics", []string{"extra"}, "takes flags only"},
		{"node metrics without metrics in serve", "serve", []string{"--insecure-no-auth", "--listen", "127.0.0.1:0", "--node-metrics"}, "--node-metrics goes with --metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cmd == "serve" {
				tc.args = append(tc.args, "--data", t.TempDir())
			}
			code, _, stderr := runMain(t, nil, append([]string{tc.cmd}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d saying %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

// A listen address in use fails at once, naming it.
func TestMetricsSaysWhenItCannotListen(t *testing.T) {
	url, _ := startServeConnected(t)
	ln, err := listenTCP("metrics", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, stderr := runMain(t, nil, "metrics", "--nats", url, "--listen", ln.Addr().String())
	if code != exitError || !strings.Contains(stderr, "listen on "+ln.Addr().String()) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}
