package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// storyHeartbeat is a node with a story: a rollback whose failed version printed 15 lines (the
// last one with an escape sequence), a refused target, drift, a fetch, its profile and
// inventory, a launcher that rolled back.
func storyHeartbeat(node string) wire.Heartbeat {
	at := time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)
	var out strings.Builder
	for i := 1; i <= 15; i++ {
		fmt.Fprintf(&out, "line %02d of the failed version\n", i)
	}
	out.WriteString("panic: \x1b[31mboom\n")
	applied := at.Add(-time.Hour)
	return wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.2.0", KnownGood: "v1.2.0", Target: "v1.3.0",
		Staged: []string{"v1.3.0"}, DeclarationRevision: 42, UptimeS: 300, SentAt: time.Now(),
		LastReconcile: &wire.LastReconcile{At: at, Trigger: "timer", Error: "unit web.service: exit status 1", DurationMS: 12},
		Rollbacks:     []wire.Rollback{{From: "v1.3.0", To: "v1.2.0", At: at.Add(-10 * time.Minute), Reason: "exited 2 before confirming", Output: out.String()}},
		Refused:       &wire.Refusal{What: "target", Revision: 7, Error: "signature by an untrusted key", At: at.Add(-5 * time.Minute)},
		Fetch:         &wire.Fetch{State: "fetching", Version: "v1.4.0", Bytes: 3 << 20, Total: 10 << 20, Percent: 30, RateBPS: 1 << 20},
		Drift:         []wire.Drifted{{Type: "file", ID: "/etc/motd", What: "content changed", At: at.Add(-2 * time.Minute), Restored: true}},
		Profile:       &wire.Profile{Arch: "amd64", OS: "linux", OSID: "debian", OSVersion: "12", Kernel: "6.1.0", Systemd: wire.SystemdRunning, SystemdVersion: "252", PackageManager: "apt", DetectedAt: at.Add(-time.Hour)},
		Inventory:     &wire.Inventory{Hostname: "web-1.example", MachineID: "abc123", CPUs: 4, MemoryBytes: 8 << 30, Disks: []wire.Disk{{Path: "/", TotalBytes: 50 << 30, FreeBytes: 20 << 30}}, Owned: wire.OwnedCount{Total: 12, ByType: map[string]int{"file": 10, "unit": 2}, AppliedAt: &applied}},
		Launcher:      &wire.Launcher{Version: "v1.1.0", Floor: "v1.0.0", State: wire.LauncherConfirmed, RolledBackFrom: "v1.2.0", RolledBackAt: at.Add(-30 * time.Minute), RollbackReason: "exited at once"},
	}
}

func publishHeartbeat(t *testing.T, c *bus.Conn, hb wire.Heartbeat) {
	t.Helper()
	if _, err := c.JS.Publish(context.Background(), wire.NamesFor("").Heartbeat(hb.Node), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
}

// `fleet NODE` tells one node's whole story from its last heartbeat: each part of it, the
// failed version's last output lines (the last ten, made printable), and a timeline in order.
func TestFleetNodeTellsOneNodesWholeStory(t *testing.T) {
	url, c := startServeConnected(t)
	publishHeartbeat(t, c, storyHeartbeat("web-1"))
	publishHeartbeat(t, c, wire.Heartbeat{Node: "web-2", State: wire.StateRunning, Running: "v1.2.0", SentAt: time.Now()})
	var out bytes.Buffer
	if err := execCmd(context.Background(), "fleet", nil, &out, "web-1", "--nats", url); err != nil {
		t.Fatal(err)
	}
	story := out.String()
	for _, want := range []string{
		"node web-1\n", "STATE", "rolled back from v1.3.0", "known-good", "target", "staged", "v1.3.0",
		"launcher", "v1.1.0 (rolled back from v1.2.0), floor v1.0.0", "revision 42",
		"failed: unit web.service: exit status 1", "fetching v1.4.0: 3.0 MiB of 10.0 MiB (30%), 1.0 MiB/s",
		"refused", "target revision 7", "signature by an untrusted key",
		"rollbacks (1, newest first)", "from v1.3.0 to v1.2.0: exited 2 before confirming",
		"| line 07 of the failed version", `| panic: \x1b[31mboom`,
		"drift (1, oldest first)", "file /etc/motd: content changed (restored)",
		"profile", "linux amd64, debian 12, kernel 6.1.0, systemd running 252, package manager apt",
		"inventory", "hostname web-1.example, machine id abc123, 4 CPUs, 8.0 GiB memory", "disk /: 20.0 GiB free of 50.0 GiB",
		"owns 12 resources (file 10, unit 2)", "timeline", "profile detected", "launcher rolled back from v1.2.0",
	} {
		if !strings.Contains(story, want) {
			t.Errorf("the story lacks %q:\n%s", want, story)
		}
	}
	if strings.Contains(story, "line 06 of") || strings.Contains(story, "web-2") {
		t.Errorf("the story shows more than the last ten output lines, or another node:\n%s", story)
	}
	if bad := controlBytes(story); bad != "" {
		t.Errorf("the story carries %s", bad)
	}
	tl := story[strings.Index(story, "timeline"):]
	if a, b := strings.Index(tl, "profile detected"), strings.Index(tl, "heard (the server"); a < 0 || b < 0 || a > b {
		t.Errorf("the timeline is not oldest first:\n%s", tl)
	}

	out.Reset()
	if err := execCmd(context.Background(), "fleet", nil, &out, "--json", "web-1", "--nats", url); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Node       string `json:"node"`
		StatusKind string `json:"status_kind"`
		Heartbeat  struct {
			Rollbacks []struct {
				Output string `json:"output"`
			} `json:"rollbacks"`
			Inventory *wire.Inventory `json:"inventory"`
		} `json:"heartbeat"`
		Timeline []struct {
			At   time.Time `json:"at"`
			What string    `json:"what"`
		} `json:"timeline"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if got.Node != "web-1" || got.StatusKind != "rolled-back" || len(got.Heartbeat.Rollbacks) != 1 ||
		!strings.Contains(got.Heartbeat.Rollbacks[0].Output, "line 01") || got.Heartbeat.Inventory == nil || len(got.Timeline) < 5 {
		t.Errorf("the JSON story: %+v", got)
	}
	if bad := controlBytes(out.String()); bad != "" {
		t.Errorf("the JSON carries %s", bad)
	}
}

func TestFleetNodeRefusesWhatItCannotShow(t *testing.T) {
	url, _ := startServeConnected(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a node never heard exits 1 saying so", []string{"nobody"}, exitError, "node nobody has no heartbeat in MESH_HEARTBEATS: it never heartbeated on this bus, or not within 30 days"},
		{"a node id that cannot be one is a usage error", []string{"bad.node"}, exitUsage, "NODE"},
		{"two nodes are a usage error", []string{"a", "b"}, exitUsage, "one NODE at most, got 2 arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, nil, append([]string{"fleet", "--nats", url}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d saying %q", code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}

// fleet --watch, whole or one node: on a terminal each render starts with the cursor home and
// the screen cleared, so it replaces the last one in place; elsewhere each is appended after a
// line with the time. A node watched lists each heartbeat seen.
func TestFleetWatchRedrawsInPlaceOnlyOnATerminal(t *testing.T) {
	url, c := startServeConnected(t)
	publishHeartbeat(t, c, wire.Heartbeat{Node: "n1", State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", UptimeS: 5, SentAt: time.Now()})
	for _, tc := range []struct {
		name  string
		tty   bool
		args  []string
		first string // each render's start
		ready string
	}{
		{"the fleet on a terminal", true, nil, clearScreen, "1 node, 0 silent"},
		{"the fleet in a pipe", false, nil, "--- ", "1 node, 0 silent"},
		{"a node on a terminal", true, []string{"n1"}, clearScreen, "node n1\n"},
		{"a node in a pipe", false, []string{"n1"}, "--- ", "node n1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			out := &meshtest.Buffer{}
			s := &stdio{out: out, err: &bytes.Buffer{}, getenv: func(string) string { return "" }, tty: tc.tty}
			done := make(chan error, 1)
			go func() {
				done <- fleetCmd(ctx, s, flagSetFor("fleet"), append([]string{"--watch", "--nats", url}, tc.args...))
			}()
			meshtest.Eventually(t, "a render", func() bool { return strings.Contains(out.String(), tc.ready) })
			if len(tc.args) > 0 {
				publishHeartbeat(t, c, wire.Heartbeat{Node: "n1", State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", UptimeS: 35, SentAt: time.Now()})
				meshtest.Eventually(t, "the second heartbeat listed", func() bool {
					return strings.Contains(out.String(), "heartbeats seen while watching (2, newest last)")
				})
			} else {
				meshtest.Eventually(t, "a second render (once a second)", func() bool { return strings.Count(out.String(), tc.ready) >= 2 })
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			text := out.String()
			renders := strings.Count(text, tc.ready)
			if !strings.HasPrefix(text, tc.first) || strings.Count(text, tc.first) < renders {
				t.Errorf("%d renders, not each starting with %q:\n%q", renders, tc.first, text)
			}
			if other := map[bool]string{true: "--- ", false: clearScreen}[tc.tty]; strings.Contains(text, other) {
				t.Errorf("the output carries %q:\n%q", other, text)
			}
		})
	}
}
