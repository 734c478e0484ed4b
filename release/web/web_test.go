package web

import (
	"bufio"
	"context"
	"encoding/json"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

var now = time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)

// newTestServer is a Server fed by the test, its clock stopped at now.
func newTestServer(t *testing.T) (*Server, *httptest.Server) {
	t.Helper()
	s := New(Config{Now: func() time.Time { return now }, Every: time.Hour})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs
}

func running(node, version string) fleet.Entry {
	return fleet.Entry{Node: node, Heard: now.Add(-2 * time.Second), Heartbeat: wire.Heartbeat{Node: node, State: wire.StateRunning,
		Running: version, KnownGood: version, UptimeS: 60, SentAt: now.Add(-2 * time.Second),
		LastReconcile: &wire.LastReconcile{At: now.Add(-time.Minute), OK: true}}}
}

func fetch(t *testing.T, method, u string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const hostile = `<script>alert("x")</script>`

// Every text from the bus lands escaped: a node id, an error a node reports, a halt's detail and
// a failed version's output lines, a withdrawal's reason. None of them can open a tag.
func TestPagesEscapeEveryTextFromTheBus(t *testing.T) {
	s, hs := newTestServer(t)
	e := running("n1", "v1.0.0")
	e.Heartbeat.LastReconcile = &wire.LastReconcile{At: now, Error: "unit failed: " + hostile}
	s.Update(e)
	s.Update(running(hostile, "v1.0.0"))
	st := rollout.State{ID: "r1" + hostile, Version: "v2" + hostile, Status: rollout.StatusHalted, Nodes: []string{"n1"}, Ran: []string{"v1.0.0"},
		Batches: []rollout.Batch{{Name: "canary", End: 1, Started: now}},
		Halt:    &rollout.Halt{At: now, Nodes: []rollout.NodeReason{{Node: "n1" + hostile, Why: rollout.WhyRolledBack, Detail: "rolled back " + hostile, Output: "panic " + hostile}}}}
	s.SetBuckets(st, true, wire.Withdrawals{Withdrawn: []wire.Withdrawn{{Version: "v0.9.0", Reason: "bad " + hostile, At: "2026-12-01T00:00:00Z"}}}, 1)
	s.MarkReady()

	for _, path := range []string{"/", "/node/n1"} {
		code, _, body := fetch(t, "GET", hs.URL+path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("GET %s holds a text from the bus unescaped:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
			t.Errorf("GET %s does not show the hostile text escaped:\n%s", path, body)
		}
	}
	ev := firstEvent(t, hs.URL+"/events")
	if strings.Contains(ev, "<script>alert") || !strings.Contains(ev, "&lt;script&gt;") {
		t.Errorf("the event's fragment holds a text from the bus unescaped, or not at all:\n%s", ev)
	}
}

// firstEvent is the HTML the first "page" event of u carries.
func firstEvent(t *testing.T, u string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return nextEvent(t, bufio.NewReader(resp.Body))
}

func nextEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	event := ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the events ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "page":
			var html string
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &html); err != nil {
				t.Fatalf("an event's data is not a JSON string: %v: %q", err, line)
			}
			return html
		}
	}
}

// The rollout is drawn as its batches, each with a bar: a done batch full, the batch in
// progress with the nodes whose heartbeat shows the version running as known-good, a batch not
// begun empty; the summary line is rollout.Summary's.
func TestFleetPageDrawsTheRolloutAsBatchesWithProgress(t *testing.T) {
	s, hs := newTestServer(t)
	for _, n := range []string{"a", "b"} {
		s.Update(running(n, "v2.0.0"))
	}
	for _, n := range []string{"c", "d", "e"} {
		s.Update(running(n, "v1.0.0"))
	}
	st := rollout.State{ID: "r7", Version: "v2.0.0", Status: rollout.StatusRunning, Created: now.Add(-time.Minute),
		Nodes: []string{"a", "b", "c", "d", "e"}, Ran: []string{"v1.0.0", "v1.0.0", "v1.0.0", "v1.0.0", "v1.0.0"},
		Batches: []rollout.Batch{{Name: "canary", End: 1, Started: now, Done: now}, {Name: "50%", End: 3, Started: now}, {Name: "100%", End: 5}},
		Current: 1}
	s.SetBuckets(st, true, wire.Withdrawals{}, 0)
	s.MarkReady()
	_, _, body := fetch(t, "GET", hs.URL+"/")
	for _, want := range []string{
		`id="batch-1" data-state="done"`, `<progress value="1" max="1">`,
		`id="batch-2" data-state="in progress"`, `<progress value="1" max="2">`,
		`id="batch-3" data-state="waiting"`, `<progress value="0" max="2">`,
		rollout.Summary(st, now), "Fleet: 5 nodes",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `id="halt"`) {
		t.Errorf("a running rollout shows a halt report:\n%s", body)
	}
}

// A halted rollout shows its report: the batch, each node named with why, its detail and the
// failed version's last output lines.
func TestFleetPageShowsTheHaltReport(t *testing.T) {
	s, hs := newTestServer(t)
	st := rollout.State{ID: "r8", Version: "v2.0.0", Status: rollout.StatusHalted, Nodes: []string{"a", "b"}, Ran: []string{"v1", "v1"},
		Batches: []rollout.Batch{{Name: "canary", End: 1, Started: now}, {Name: "100%", End: 2}},
		Halt:    &rollout.Halt{At: now, Batch: 0, Nodes: []rollout.NodeReason{{Node: "a", Why: rollout.WhyRolledBack, Detail: "rolled back from v2.0.0", Output: "panic: nil map"}}, More: 3}}
	s.SetBuckets(st, true, wire.Withdrawals{}, 0)
	s.MarkReady()
	_, _, body := fetch(t, "GET", hs.URL+"/")
	for _, want := range []string{`id="halt"`, "Halted in batch 1", `<a href="/node/a">a</a>`, "rolled-back", "rolled back from v2.0.0", "<pre>panic: nil map</pre>",
		"and 3 more not named", `id="batch-1" data-state="halted"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
}

// Without a rollout on the bus the page says so; the withdrawals are listed.
func TestFleetPageWithoutARolloutSaysSoAndListsWithdrawals(t *testing.T) {
	s, hs := newTestServer(t)
	s.SetBuckets(rollout.State{}, false, wire.Withdrawals{Withdrawn: []wire.Withdrawn{{Version: "v1.3.0", Reason: "eats disks", At: "2026-12-01T10:00:00Z"}}}, 4)
	s.MarkReady()
	_, _, body := fetch(t, "GET", hs.URL+"/")
	for _, want := range []string{`id="rollout-none"`, "<td>v1.3.0</td><td>eats disks</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
}

// A node's page is `fleet NODE`'s story; a node never heard is a 404 page saying so once the
// heartbeats are read; a path that is no node id is refused.
func TestNodePageTellsTheNodesStory(t *testing.T) {
	s, hs := newTestServer(t)
	e := running("web-1", "v1.2.0")
	e.Heartbeat.Rollbacks = []wire.Rollback{{At: now.Add(-time.Hour), From: "v1.3.0", To: "v1.2.0", Reason: "exited 2", Output: "line one\nlast words"}}
	s.Update(e)
	s.MarkReady()
	var want strings.Builder
	st, _ := s.view.Story("web-1", now, fleet.RowOptions{SilentAfter: fleet.DefaultSilentAfter})
	fleet.WriteStory(&want, st, now)
	for _, tc := range []struct {
		name, path string
		code       int
		want       string
	}{
		{"a heard node's story", "/node/web-1", http.StatusOK, "last words"},
		{"a node never heard", "/node/web-2", http.StatusNotFound, `id="node-unheard"`},
		{"no node id", "/node/a%20b", http.StatusNotFound, "not a node id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := fetch(t, "GET", hs.URL+tc.path)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("GET %s: %d, want %d with %q:\n%s", tc.path, code, tc.code, tc.want, body)
			}
		})
	}
	_, _, body := fetch(t, "GET", hs.URL+"/node/web-1")
	if !strings.Contains(body, template.HTMLEscapeString(want.String())) || !strings.Contains(body, "rolled back from v1.3.0 to v1.2.0") {
		t.Errorf("the node page is not fleet NODE's story:\n%s\nwant within it:\n%s", body, want.String())
	}
}

// The page only reads: anything but GET and HEAD is refused, and every answer forbids inline
// scripts, framing and sniffing.
func TestPagesAnswerReadsOnlyWithAStrictPolicy(t *testing.T) {
	_, hs := newTestServer(t)
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		if code, _, _ := fetch(t, m, hs.URL+"/"); code != http.StatusMethodNotAllowed {
			t.Errorf("%s /: %d, want 405", m, code)
		}
	}
	code, h, _ := fetch(t, "GET", hs.URL+"/")
	if code != http.StatusOK || !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") || h.Get("X-Content-Type-Options") != "nosniff" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("GET /: %d, headers %v", code, h)
	}
	code, h, body := fetch(t, "GET", hs.URL+"/assets/live.js")
	if code != http.StatusOK || !strings.Contains(body, "EventSource") || !strings.Contains(h.Get("Content-Type"), "javascript") {
		t.Errorf("GET /assets/live.js: %d %s", code, h.Get("Content-Type"))
	}
	for _, p := range []string{"/assets/", "/assets/fleet.html", "/assets/node.html"} {
		if code, _, body := fetch(t, "GET", hs.URL+p); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404 (only the script and stylesheet are served):\n%s", p, code, body)
		}
	}
}

// The events carry the page's fragment again when a heartbeat arrives: a node heard after the
// page opened shows up in the next event.
func TestEventsCarryTheFragmentAgainWhenAHeartbeatArrives(t *testing.T) {
	s, hs := newTestServer(t)
	s.Update(running("first", "v1.0.0"))
	s.MarkReady()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	if ev := nextEvent(t, r); !strings.Contains(ev, "first") || strings.Contains(ev, "second") {
		t.Fatalf("the first event:\n%s", ev)
	}
	s.Update(running("second", "v1.0.0"))
	if ev := nextEvent(t, r); !strings.Contains(ev, `href="/node/second"`) || !strings.Contains(ev, "Fleet: 2 nodes") {
		t.Fatalf("the event after a heartbeat arrived:\n%s", ev)
	}
}

// On a real bus the server follows the heartbeats and reads the rollout: both show on the page,
// and the events stream; it writes nothing: every stream but the heartbeats' (the buckets are
// streams) keeps its last sequence.
func TestServerFollowsTheBusAndWritesNothing(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seqs := func() map[string]uint64 {
		out := map[string]uint64{}
		l := b.Conn.JS.ListStreams(ctx)
		for info := range l.Info() {
			if info.Config.Name != b.Names.HeartbeatStream() {
				out[info.Config.Name] = info.State.LastSeq
			}
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := seqs()
	if len(before) < 3 {
		t.Fatalf("the bus has %d streams besides the heartbeats'; this test checks nothing", len(before))
	}
	s := New(Config{JS: b.Conn.JS, Names: b.Names, Every: 100 * time.Millisecond})
	go s.Run(ctx)
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	hb := wire.Heartbeat{Node: "bus-1", State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", SentAt: time.Now()}
	if _, err := b.Conn.JS.Publish(ctx, b.Names.Heartbeat("bus-1"), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
	meshtest.Eventually(t, "the page lists the node heard on the bus", func() bool {
		_, _, body := fetch(t, "GET", hs.URL+"/")
		return strings.Contains(body, `href="/node/bus-1"`) && strings.Contains(body, `id="rollout-none"`)
	})
	if ev := firstEvent(t, hs.URL+"/node/bus-1/events"); !strings.Contains(ev, `id="story"`) {
		t.Errorf("the node's events:\n%s", ev)
	}
	read := s.reads.Load()
	meshtest.Eventually(t, "the server reads the buckets three more times", func() bool { return s.reads.Load() >= read+3 })
	for name, seq := range seqs() {
		if before[name] != seq {
			t.Errorf("stream %s went from sequence %d to %d while the page ran: it wrote to the bus", name, before[name], seq)
		}
	}
}
