package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

var names = wire.NamesFor("mesh")

func heartbeat(t *testing.T, b *meshtest.Bus, node, running string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: running, KnownGood: running, SentAt: time.Now().UTC(),
		LastReconcile: &wire.LastReconcile{Trigger: wire.TriggerStart, OK: true}}
	if _, err := b.Conn.JS.Publish(ctx, names.Heartbeat(node), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
}

func byNode(es []Entry) map[string]Entry {
	m := make(map[string]Entry)
	for _, e := range es {
		m[e.Node] = e
	}
	return m
}

func TestFleetReadsEveryNodesLastWordAcrossARestart(t *testing.T) {
	b := meshtest.StartBus(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		heartbeat(t, b, n, "v1.0.0")
	}
	heartbeat(t, b, "n2", "v1.1.0")
	if _, err := b.Conn.JS.Publish(context.Background(), names.Heartbeat("n4"), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	b.Start()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	es, err := Read(ctx, b.Conn.JS, names)
	if err != nil {
		t.Fatal(err)
	}
	m := byNode(es)
	if len(es) != 4 || len(m) != 4 {
		t.Fatalf("entries = %+v, want one for each of 4 nodes", es)
	}
	if m["n2"].Heartbeat.Running != "v1.1.0" {
		t.Fatalf("n2 = %+v, want its last word v1.1.0", m["n2"])
	}
	if m["n4"].Err == nil {
		t.Fatal("n4's unreadable heartbeat has no error")
	}
	if m["n1"].Heard.IsZero() {
		t.Fatal("no server timestamp")
	}
}

func TestFleetReadOfAnEmptyStreamIsEmpty(t *testing.T) {
	b := meshtest.StartBus(t)
	es, err := Read(context.Background(), b.Conn.JS, names)
	if err != nil || len(es) != 0 {
		t.Fatalf("entries %v err %v", es, err)
	}
}

func TestFleetReadWithoutTheStreamSaysRunInit(t *testing.T) {
	b := meshtest.StartBus(t, meshtest.NoBuckets())
	_, err := Read(context.Background(), b.Conn.JS, names)
	if err == nil || !strings.Contains(err.Error(), "mesh-release init") {
		t.Fatalf("err = %v", err)
	}
}

func TestFleetWatchPushesHeartbeatsAsTheyArrive(t *testing.T) {
	b := meshtest.StartBus(t)
	heartbeat(t, b, "n1", "v1.0.0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Entry, 16)
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- Watch(ctx, b.Conn.JS, names, func(e Entry) { got <- e }, func() { close(ready) }) }()
	deadline := time.After(10 * time.Second)
	next := func() Entry {
		select {
		case e := <-got:
			return e
		case <-deadline:
			t.Fatal("no entry within the deadline")
		}
		return Entry{}
	}
	if e := next(); e.Node != "n1" {
		t.Fatalf("first = %+v", e)
	}
	select {
	case <-ready:
	case <-deadline:
		t.Fatal("not ready")
	}
	heartbeat(t, b, "n2", "v2.0.0")
	if e := next(); e.Node != "n2" || e.Heartbeat.Running != "v2.0.0" {
		t.Fatalf("pushed = %+v", e)
	}
	cancel()
	select {
	case err := <-errc:
		if err != context.Canceled {
			t.Fatalf("watch ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not end with its context")
	}
}

func TestFleetWatchOfAnEmptyStreamIsReadyAtOnce(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	go Watch(ctx, b.Conn.JS, names, func(Entry) {}, func() { close(ready) })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
}

func TestFleetRowsPutSilentNodesFirst(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ok, bad := &wire.LastReconcile{OK: true}, &wire.LastReconcile{OK: false, Error: "file /etc/x: denied"}
	es := []Entry{
		{Node: "a", Heard: now.Add(-5 * time.Second), Heartbeat: wire.Heartbeat{Node: "a", State: "running", Running: "v1", KnownGood: "v1", LastReconcile: ok}},
		{Node: "b", Heard: now.Add(-91 * time.Second), Heartbeat: wire.Heartbeat{Node: "b", State: "running", Running: "v1", KnownGood: "v1", LastReconcile: ok}},
		{Node: "c", Heard: now.Add(-10 * time.Second), Heartbeat: wire.Heartbeat{Node: "c", State: "running", LastReconcile: bad}},
		{Node: "d", Heard: now.Add(-1 * time.Second), Err: errString("heartbeat: schema 2 is not supported")},
		{Node: "e", Heard: now.Add(-3 * time.Hour), Heartbeat: wire.Heartbeat{Node: "e", State: "stopping"}},
	}
	rows := Rows(es, now, 0)
	var order []string
	for _, r := range rows {
		order = append(order, r.Node)
	}
	if got := strings.Join(order, ","); got != "b,e,d,c,a" {
		t.Fatalf("order = %s, want silent (b,e), unreadable (d), in trouble (c, its reconcile failing), then the rest", got)
	}
	if !rows[0].Silent || rows[4].Silent || *rows[3].ReconcileOK || rows[3].ReconcileError == "" || rows[3].StatusKind != KindFailing {
		t.Fatalf("rows = %+v", rows)
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, rows, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"SILENT since 11:58:29 (was running v1)", "SILENT since 09:00:00 (was stopping)", "UNREADABLE", "failed: file /etc/x: denied", "5 nodes, 2 silent", "1m31s ago", "3h00m ago"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	buf.Reset()
	if err := WriteJSON(&buf, rows); err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back) != 5 || back[0]["silent"] != true {
		t.Fatalf("json = %s (%v)", buf.String(), err)
	}
}

func TestFleetViewKeepsTheNewestEntry(t *testing.T) {
	v := NewView()
	t0 := time.Unix(100, 0)
	v.Update(Entry{Node: "a", Heard: t0.Add(time.Second), Heartbeat: wire.Heartbeat{Running: "v2"}})
	v.Update(Entry{Node: "a", Heard: t0, Heartbeat: wire.Heartbeat{Running: "v1"}})
	rows := v.Rows(t0.Add(2*time.Second), time.Minute)
	if v.Len() != 1 || rows[0].Running != "v2" {
		t.Fatalf("rows = %+v", rows)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestFleetTableCellsArePrintableAndBounded(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	es := []Entry{
		{Node: "a", Heard: now, Heartbeat: wire.Heartbeat{Node: "a", State: "running", Running: "v1\x1b[2J", KnownGood: "v0\u009b1m", Target: strings.Repeat("v", 10_000),
			LastReconcile: &wire.LastReconcile{Error: "line one\nline\ttwo \u202egnp.exe " + strings.Repeat("e", 10_000)}}},
		{Node: "b\x1b[31m", Heard: now, Err: errString("heartbeat: " + strings.Repeat("x", 10_000))},
	}
	var buf bytes.Buffer
	if err := WriteText(&buf, Rows(es, now, 0), 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{`v1\x1b[2J`, `v0\x9b1m`, `failed: line one line two \u202egnp.exe eee`, `b\x1b[31m`, "…[cut "} {
		if !strings.Contains(text, want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	if strings.ContainsAny(text, "\x1b\t\r\u009b\u202e") {
		t.Errorf("table carries a control character:\n%q", text)
	}
	for _, line := range strings.Split(text, "\n") {
		if len(line) > 400 {
			t.Errorf("a line of %d bytes", len(line))
		}
	}
}

// encoding/json writes C0 controls as \u00XX but DEL, C1 controls and bidi overrides raw;
// WriteJSON escapes those too, and the values still decode as sent.
func TestFleetJSONHasNoRawTerminalControlAndKeepsTheValues(t *testing.T) {
	sent := "v1\x1b[2J\x7f\u009b31m\u202e\u2028é"
	rows := []Row{{Node: "a", Running: sent, Heartbeat: &wire.Heartbeat{Running: sent}}}
	for name, write := range map[string]func(*bytes.Buffer) error{
		"indented": func(b *bytes.Buffer) error { return WriteJSON(b, rows) },
		"one line": func(b *bytes.Buffer) error { return WriteJSONLine(b, rows) },
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := write(&buf); err != nil {
				t.Fatal(err)
			}
			if strings.ContainsAny(buf.String(), "\x1b\x7f\u009b\u202e\u2028") {
				t.Fatalf("raw control in %q", buf.String())
			}
			if !strings.Contains(buf.String(), "é") {
				t.Errorf("printable text was escaped: %s", buf.String())
			}
			var back []Row
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back[0].Running != sent || back[0].Heartbeat.Running != sent {
				t.Fatalf("decoded %+v, %v", back, err)
			}
		})
	}
}

// Found by the 10,000-node rollout benchmark: heartbeats stored while Read walked the stream
// came back as further entries for nodes already read, so a node was listed twice. Read returns
// one entry per node, its newest.
func TestFleetReadListsEachNodeOnceWhileHeartbeatsArrive(t *testing.T) {
	b := meshtest.StartBus(t)
	const nodes = 300
	for i := range nodes {
		heartbeat(t, b, fmt.Sprintf("n%03d", i), "v1.0.0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { // every node heartbeats again and again while the fleet is read
		defer close(done)
		for round := 0; ctx.Err() == nil; round++ {
			for i := range nodes {
				hb := wire.Heartbeat{Node: fmt.Sprintf("n%03d", i), State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", UptimeS: int64(round)}
				if _, err := b.Conn.JS.Publish(ctx, names.Heartbeat(hb.Node), hb.Marshal()); err != nil {
					return
				}
			}
		}
	}()
	for range 10 {
		es, err := Read(context.Background(), b.Conn.JS, names)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != nodes || len(byNode(es)) != nodes {
			t.Fatalf("Read returned %d entries for %d distinct nodes; want %d, each once", len(es), len(byNode(es)), nodes)
		}
	}
	cancel()
	<-done
}
