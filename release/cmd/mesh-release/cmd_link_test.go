package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// startServeConnected runs serve on a fresh data directory and connects to it, as most command
// tests need.
func startServeConnected(t *testing.T) (string, *bus.Conn) {
	t.Helper()
	url := startServe(t, t.TempDir())
	c, err := bus.Connect(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return url, c
}

// startServe runs `serve --insecure-no-auth` on a free loopback port and returns its client URL:
// the commands' tests are about the commands, not the bus's authentication (serve_test.go).
func startServe(t *testing.T, data string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	urlc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- serveCmd(ctx, testIO(nil, &bytes.Buffer{}), flagSetFor("serve"), []string{"--data", data, "--listen", "127.0.0.1:0", "--insecure-no-auth"}, func(u string) { urlc <- u })
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

// The issue: declare printed a bare number, and stored a declaration for a node id no host
// has, silently. It says what it did; a node that never heartbeated is refused by name (with
// how node ids are made, the nodes heard, and --force), and --force pre-declares it.
func TestDeclareStoresForAHeardNodeAndRefusesAnUnheardOneWithoutForce(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	heartbeat(t, c, "n1")
	kv, err := c.JS.KeyValue(ctx, wire.NamesFor("").Declarations())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, node string
		force      bool
		want       string // in the output, or in the error when refused
		stored     bool
	}{
		{"Heard", "n1", false, `^declaration for n1 stored, revision (\d+)\n$`, true},
		{"NeverHeard", "n2", false, `(?s)node "n2" has never heartbeated on this bus.*nothing was stored.*short hostname.*MESH_HOST_NODE.*Heard from 1 node: n1\..*--force`, false},
		{"NeverHeardForced", "n2", true, `^declaration for n2 stored, revision (\d+) \(pre-declared: n2 has not heartbeated yet; its host takes it when it starts\)\n$`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), tc.node+".json")
			if err := os.WriteFile(file, []byte(`{"version":1,"node":"`+tc.node+`","resources":[{"type":"file","id":"/etc/motd","spec":{"content":""}}]}`), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{tc.node, file, "--nats", url}
			if tc.force {
				args = append(args, "--force")
			}
			var out bytes.Buffer
			err := execCmd(ctx, "declare", nil, &out, args...)
			if !tc.stored {
				var nh *neverHeard
				if !errors.As(err, &nh) || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
					t.Fatalf("err = %v, want a refusal matching %s", err, tc.want)
				}
				if _, err := kv.Get(ctx, tc.node); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Fatalf("the refused declaration was stored: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := regexp.MustCompile(tc.want).FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("printed %q, want %s", out.String(), tc.want)
			}
			rev, _ := strconv.ParseUint(m[1], 10, 64)
			if e, err := kv.Get(ctx, tc.node); err != nil || e.Revision() != rev {
				t.Fatalf("get = %v, %v; want revision %d", e, err, rev)
			}
		})
	}
}

// heartbeat stores a heartbeat from node, as its host would.
func heartbeat(t *testing.T, c *bus.Conn, node string) {
	t.Helper()
	hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", SentAt: time.Now().UTC()}
	if _, err := c.JS.Publish(context.Background(), wire.NamesFor("").Heartbeat(node), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
}

func TestDeclareRefusesAnInvalidDeclarationAndPutsNothing(t *testing.T) {
	for _, tc := range []struct{ name, node, body, want string }{
		{"OtherNode", "n1", `{"version":1,"node":"n2","resources":[]}`, `addressed to node "n2"`},
		{"UnknownField", "n1", `{"version":1,"node":"n1","resources":[],"x":1}`, `x: unknown field`},
		{"BadNodeID", "a.b", `{}`, `node id "a.b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No server: validation must fail before any connection is tried.
			err := execCmd(context.Background(), "declare", strings.NewReader(tc.body), &bytes.Buffer{}, "--nats", "nats://127.0.0.1:1", tc.node, "-")
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
		if err := execCmd(context.Background(), "init", nil, &out, "--nats", url); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "MESH_HEARTBEATS") {
			t.Fatalf("init said %q", out.String())
		}
	}
}

func TestFleetListsNodesAsTextAndJSON(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	n := wire.NamesFor("")
	for _, node := range []string{"n1", "n2"} {
		hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", SentAt: time.Now().UTC()}
		if _, err := c.JS.Publish(ctx, n.Heartbeat(node), hb.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := execCmd(ctx, "fleet", nil, &out, "--nats", url); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "n1") || !strings.Contains(out.String(), "2 nodes, 0 silent") {
		t.Fatalf("fleet:\n%s", out.String())
	}
	out.Reset()
	if err := execCmd(ctx, "fleet", nil, &out, "--nats", url, "--json"); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 2 {
		t.Fatalf("fleet --json: %s (%v)", out.String(), err)
	}
}
