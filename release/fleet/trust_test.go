package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Each node's trust against the newest root on the bus: the TRUST cell, the STATE, --json's
// trust_root, trust_behind and trust_expired_since, the story's trust line, and the trust line
// under the table.
func TestFleetSaysEachNodesRootAndWhetherItIsBehindOrExpired(t *testing.T) {
	expired := now.Add(-2 * time.Hour)
	for _, tc := range []struct {
		name    string
		busRoot uint64
		root    uint64 // the heartbeat's trust_root
		expired *time.Time
		cell    string // TRUST
		behind  bool
		status  string
		story   string // the story's trust line holds it
		line    string // the trust line under the table
	}{
		{"on the newest root", 4, 4, nil, "root v4", false, "ok", "root v4\n", "trust: 1 on root v4"},
		{"behind the newest root", 4, 3, nil, "root v3 (behind)", true, "ok", "root v3, behind root v4 on the bus", "trust: 0 on root v4, 1 behind (v3)"},
		{"host.json's keys only while the bus has roots", 2, 0, nil, "no root (behind)", true, "ok", "no root (host.json's keys), behind root v2 on the bus",
			"trust: 0 on root v2, 1 behind (no root)"},
		{"expired on the newest root", 4, 4, &expired, "root v4 (expired)", false, "trust expired since 2026-11-29T11:20:00Z",
			"root v4; trust expired since 2026-11-29T11:20:00Z: it runs what it has", "trust: 1 on root v4, 1 expired"},
		{"behind and expired", 4, 2, &expired, "root v2 (behind, expired)", true, "trust expired since 2026-11-29T11:20:00Z",
			"root v2, behind root v4 on the bus; trust expired", "trust: 0 on root v4, 1 behind (v2), 1 expired"},
		{"the bus unread: the newest a node says", 0, 3, nil, "root v3", false, "ok", "root v3\n", "trust: 1 on root v3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hb := with(func(hb *wire.Heartbeat) { hb.TrustRoot, hb.TrustExpiredSince = tc.root, tc.expired })
			es := []Entry{{Node: "n", Heard: now, Heartbeat: hb}}
			o := RowOptions{TrustRoot: tc.busRoot}
			rows := RowsWith(es, now, o)
			r := rows[0]
			if r.TrustRoot != tc.root || r.TrustBehind != tc.behind || (r.TrustExpiredSince != nil) != (tc.expired != nil) {
				t.Errorf("row: trust_root %d, behind %v, expired %v", r.TrustRoot, r.TrustBehind, r.TrustExpiredSince)
			}
			if r.Status != tc.status {
				t.Errorf("STATE %q, want %q", r.Status, tc.status)
			}
			var buf bytes.Buffer
			if err := WriteTextWith(&buf, rows, TextOptions{TrustRoot: tc.busRoot}); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(buf.String(), "\n")
			col, end := strings.Index(lines[0], "TRUST"), strings.Index(lines[0], "LAUNCHER")
			if col < 0 || end < col {
				t.Fatalf("no TRUST column before LAUNCHER:\n%s", buf.String())
			}
			if got := strings.TrimSpace(lines[1][col:end]); got != tc.cell {
				t.Errorf("TRUST %q, want %q", got, tc.cell)
			}
			if !strings.Contains(buf.String(), "\n"+tc.line+"\n") {
				t.Errorf("no line %q under the table:\n%s", tc.line, buf.String())
			}
			buf.Reset()
			if err := WriteStory(&buf, StoryOf(es[0], now, o), now); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(buf.String(), "  trust ") || !strings.Contains(buf.String(), tc.story) {
				t.Errorf("the story's trust line does not hold %q:\n%s", tc.story, buf.String())
			}
			buf.Reset()
			if err := WriteJSON(&buf, rows); err != nil {
				t.Fatal(err)
			}
			var back []map[string]any
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if got, _ := back[0]["trust_behind"].(bool); got != tc.behind {
				t.Errorf("--json trust_behind %v, want %v", back[0]["trust_behind"], tc.behind)
			}
			if _, ok := back[0]["trust_expired_since"]; ok != (tc.expired != nil) {
				t.Errorf("--json trust_expired_since %v", back[0]["trust_expired_since"])
			}
		})
	}
}

// A fleet with no roots at all (none on the bus, none held by a node) reads exactly as it did
// before roots: no TRUST column, no trust line, no trust line in a story, no trust key in --json.
func TestAFleetWithNoRootsReadsAsBefore(t *testing.T) {
	es := []Entry{{Node: "a", Heard: now, Heartbeat: steady("a")}, {Node: "b", Heard: now, Heartbeat: steady("b")}}
	rows := RowsWith(es, now, RowOptions{})
	var buf bytes.Buffer
	if err := WriteTextWith(&buf, rows, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "NODE  STATE  RUNNING  KNOWN-GOOD  TARGET  PLATFORM  LAUNCHER  LAST HEARD  LAST RECONCILE\n" +
		"a     ok     v1.1.0   v1.1.0      v1.1.0  -         -         0s ago      ok\n" +
		"b     ok     v1.1.0   v1.1.0      v1.1.0  -         -         0s ago      ok\n" +
		"2 nodes, 0 silent (silent after 1m30s unheard)\n"
	if buf.String() != want {
		t.Errorf("the table:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := WriteStory(&buf, StoryOf(es[0], now, RowOptions{}), now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "trust") {
		t.Errorf("the story speaks of trust:\n%s", buf.String())
	}
	buf.Reset()
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), `"trust_`) {
		t.Errorf("--json holds a trust key:\n%s", buf.String())
	}
}

// The trust line names the roots the nodes behind are on, newest first, host.json's keys last.
func TestTheTrustLineCountsTheNodesBehindByRoot(t *testing.T) {
	var es []Entry
	for i, root := range []uint64{5, 5, 5, 4, 0, 3, 4} {
		hb := steady(string(rune('a' + i)))
		hb.TrustRoot = root
		es = append(es, Entry{Node: hb.Node, Heard: now, Heartbeat: hb})
	}
	es = append(es, Entry{Node: "z", Heard: now, Err: errUnreadable})
	rows := RowsWith(es, now, RowOptions{TrustRoot: 5})
	if got, want := TrustLine(rows, 5, ""), "trust: 3 on root v5, 4 behind (v4, v3, no root)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got, want := TrustLine(rows, 5, "root.6 in mesh_host_releases is refused: why"), "trust: 3 on root v5, 4 behind (v4, v3, no root) (root.6 in mesh_host_releases is refused: why)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

var errUnreadable = errString("heartbeat: not JSON")

// The newest root on the bus is the newest a node would walk to: roots v1…vN each signed by the
// one before; a root after them that its predecessor's keys did not sign is refused, by name,
// and the walk stops there, as a node's does. A bus without roots (or the bucket) holds none.
func TestRootReaderFindsTheNewestRootANodeWouldAccept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := meshtest.StartBus(t)
	var rr RootReader
	read := func(wantV uint64, wantRefused string) {
		t.Helper()
		v, refused, err := rr.Newest(ctx, b.Conn.JS, b.Names)
		if err != nil {
			t.Fatal(err)
		}
		if v != wantV || !strings.Contains(refused, wantRefused) || (wantRefused == "" && refused != "") {
			t.Fatalf("newest v%d (refused %q), want v%d (%q)", v, refused, wantV, wantRefused)
		}
	}
	read(0, "")
	chain := meshtest.RootChain(t, 3, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	b.PutRoots(chain...)
	read(3, "")
	forged := meshtest.RootChain(t, 4, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))[3]
	forged.Signatures = nil
	if err := forged.Sign(meshtest.StrangerKey.Private); err != nil {
		t.Fatal(err)
	}
	b.PutRoots(forged)
	read(3, "root.4 in "+b.Names.Releases()+" is refused: root v4 refused")
	b.PutRoots(meshtest.RootChain(t, 4, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))[3])
	read(4, "")

	var none RootReader
	bare := meshtest.StartBus(t, meshtest.NoBuckets())
	if v, refused, err := none.Newest(ctx, bare.Conn.JS, bare.Names); v != 0 || refused != "" || err != nil {
		t.Errorf("a bus without the releases bucket: v%d, %q, %v", v, refused, err)
	}
}
