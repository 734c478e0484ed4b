package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// startServe runs `serve` on a free loopback port and returns its client URL.
func startServe(t *testing.T, data string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	urlc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- serveCmd(ctx, []string{"--data", data, "--listen", "127.0.0.1:0"}, &bytes.Buffer{}, func(u string) { urlc <- u })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case u := <-urlc:
		return u
	case err := <-errc:
		t.Fatalf("serve: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("serve was not ready")
	}
	return ""
}

func TestDeclarePutsAValidDeclarationAndPrintsTheRevision(t *testing.T) {
	url := startServe(t, t.TempDir())
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "n1.json")
	if err := os.WriteFile(file, []byte(`{"version":1,"node":"n1","resources":[{"type":"file","id":"/etc/motd","spec":{}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := declareCmd(ctx, []string{"n1", file, "--nats", url}, nil, &out); err != nil {
		t.Fatal(err)
	}
	rev, err := strconv.ParseUint(strings.TrimSpace(out.String()), 10, 64)
	if err != nil || rev == 0 {
		t.Fatalf("printed %q, want a revision", out.String())
	}
	c, err := bus.Connect(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kv, err := c.JS.KeyValue(ctx, wire.NamesFor("").Declarations())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "n1")
	if err != nil || e.Revision() != rev {
		t.Fatalf("get = %v, %v", e, err)
	}
}

func TestDeclareRefusesAnInvalidDeclarationAndPutsNothing(t *testing.T) {
	for _, tc := range []struct{ name, node, body, want string }{
		{"OtherNode", "n1", `{"version":1,"node":"n2","resources":[]}`, `addressed to node "n2"`},
		{"UnknownField", "n1", `{"version":1,"node":"n1","resources":[],"x":1}`, `unknown field "x"`},
		{"BadNodeID", "a.b", `{}`, `node id "a.b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No server: validation must fail before any connection is tried.
			err := declareCmd(context.Background(), []string{"--nats", "nats://127.0.0.1:1", tc.node, "-"}, strings.NewReader(tc.body), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestInitIsIdempotentOnAServedBus(t *testing.T) {
	url := startServe(t, t.TempDir())
	for i := 0; i < 2; i++ {
		var out bytes.Buffer
		if err := initCmd(context.Background(), []string{"--nats", url}, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "MESH_HEARTBEATS") {
			t.Fatalf("init said %q", out.String())
		}
	}
}

func TestFleetListsNodesAsTextAndJSON(t *testing.T) {
	url := startServe(t, t.TempDir())
	ctx := context.Background()
	c, err := bus.Connect(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := wire.NamesFor("")
	for _, node := range []string{"n1", "n2"} {
		hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", SentAt: time.Now().UTC()}
		if _, err := c.JS.Publish(ctx, n.Heartbeat(node), hb.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := fleetCmd(ctx, []string{"--nats", url}, &out, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "n1") || !strings.Contains(out.String(), "2 nodes, 0 silent") {
		t.Fatalf("fleet:\n%s", out.String())
	}
	out.Reset()
	if err := fleetCmd(ctx, []string{"--nats", url, "--json"}, &out, false); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("fleet --json: %s (%v)", out.String(), err)
	}
}
