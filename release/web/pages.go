package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// pages are the templates; html/template escapes every value by where it lands.
var pages = template.Must(template.New("").Funcs(template.FuncMap{
	"nodeURL": func(node string) string { return "/node/" + url.PathEscape(node) },
	"time":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
}).ParseFS(assets, "assets/*.html"))

// fleetView is what the fleet page shows.
type fleetView struct {
	Ready    bool
	Problem  string // why the heartbeats cannot be followed, "" while they can
	Nodes    int
	Kinds    []kindCount
	Rows     []rowView
	Rollout  *rolloutView
	NoRead   string // why the rollout could not be read
	Withdraw []wire.Withdrawn
	WErr     string
	Now      string

	// Platforms count the nodes by platform, said when the fleet runs more than one.
	Platforms []fleet.PlatformCount
	// Trust says whether the table has a trust column (the fleet has roots, decision 0045), and
	// TrustLine counts the nodes behind the newest root and the expired, as `fleet` does.
	Trust     bool
	TrustLine string
}

type kindCount struct {
	Kind string
	N    int
}

type rowView struct {
	Node, Platform, Status, Kind, Running, KnownGood, Target, Launcher, Heard string
	// Trust is the TRUST cell (`root v3 (behind)`); TrustBehind marks a node behind the newest
	// root or whose trust expired.
	Trust       string
	TrustBehind bool
	Trouble     bool
}

// rowOf is one node's row of the page's table; "-" for a platform its heartbeat does not say.
func rowOf(r fleet.Row, now time.Time) rowView {
	platform := r.Platform
	if platform == "" {
		platform = "-"
	}
	return rowView{Node: r.Node, Platform: platform, Status: r.Status, Kind: string(r.StatusKind), Running: r.Running, KnownGood: r.KnownGood,
		Target: r.Target, Launcher: fleet.LauncherText(r.Launcher), Heard: fleet.Ago(now.Sub(r.LastHeard)), Trouble: r.Silent || r.StatusKind.Trouble(),
		Trust: fleet.TrustText(r), TrustBehind: r.TrustBehind || r.TrustExpiredSince != nil}
}

// platformsOf is the nodes counted by platform when they run more than one ("unknown": none said),
// at most maxPlatformCounts named, the rest summed as "other": the page says what a mixed
// fleet is made of, and a homogeneous one's column says it already.
func platformsOf(rows []fleet.Row) []fleet.PlatformCount {
	counts := fleet.PlatformsOf(rows)
	if len(counts) < 2 {
		return nil
	}
	for i := range counts {
		if counts[i].Platform == "" {
			counts[i].Platform = "unknown"
		}
	}
	if len(counts) > maxPlatformCounts {
		other := fleet.PlatformCount{Platform: "other", Kinds: map[fleet.Kind]int{}}
		for _, c := range counts[maxPlatformCounts-1:] {
			other.Nodes += c.Nodes
			for k, n := range c.Kinds {
				other.Kinds[k] += n
			}
		}
		counts = append(counts[:maxPlatformCounts-1], other)
	}
	return counts
}

// maxPlatformCounts bounds the platforms the page names above the table.
const maxPlatformCounts = 8

type rolloutView struct {
	ID, Version, Status, Summary string
	Halted                       bool
	Batches                      []batchView
	Halt                         *haltView
	LeftOut                      int
	Platforms                    []platformView // by platform (rollout_platforms.go)
	Skipped                      []skippedView
}

type batchView struct {
	N          int
	Name       string
	Nodes      int
	Confirmed  int
	State      string // waiting, in progress, done, halted
	Started    string
	InProgress bool
}

type haltView struct {
	Batch int
	At    string
	Nodes []rollout.NodeReason
	More  int
	// ByPlatform says how each platform of the batch fared ("" when the halt says none).
	ByPlatform string
}

// maxRows bounds the fleet table the page draws: a browser is slow with tens of thousands of
// rows, and past a few thousand a table is not read but searched (`fleet --json`). Nodes in
// trouble sort first, so they are the ones drawn.
const maxRows = 5000

func (s *Server) fleetView(now time.Time) fleetView {
	b := s.snapshot()
	rows := s.view.RowsWith(now, fleet.RowOptions{SilentAfter: s.cfg.SilentAfter, Withdrawals: b.withdrawals, WithdrawalsRevision: b.withdrawRev, TrustRoot: b.trustRoot})
	v := fleetView{Ready: s.ready.Load(), Nodes: len(rows), NoRead: b.rolloutErr, WErr: b.withdrawErr, Now: now.UTC().Format(time.RFC3339)}
	if p := s.watchErr.Load(); p != nil {
		v.Problem = *p
	}
	for k, n := range fleet.KindsOf(rows) {
		v.Kinds = append(v.Kinds, kindCount{string(k), n})
	}
	sort.Slice(v.Kinds, func(i, j int) bool { return v.Kinds[i].Kind < v.Kinds[j].Kind })
	v.Platforms = platformsOf(rows)
	v.Trust, v.TrustLine = fleet.ShowsTrust(rows), fleet.TrustLine(rows, b.trustRoot, b.rootErr)
	for _, r := range rows[:min(len(rows), maxRows)] {
		v.Rows = append(v.Rows, rowOf(r, now))
	}
	if b.hasRollout {
		v.Rollout = rolloutOf(b.rollout, rows, now)
	}
	v.Withdraw = b.withdrawals.Withdrawn
	return v
}

// rolloutOf draws st as batches: a done batch is full; the batch in progress (or halted) counts
// the nodes whose last heartbeat shows the version running as known-good, as the controller
// judges a node confirmed (and as the metrics count mesh_rollout_batch_nodes_confirmed); a
// batch not begun is empty.
func rolloutOf(st rollout.State, rows []fleet.Row, now time.Time) *rolloutView {
	v := &rolloutView{ID: st.ID, Version: st.Version, Status: string(st.Status), Halted: st.Status == rollout.StatusHalted,
		Summary: rollout.Summary(st, now), LeftOut: len(st.LeftOut) + st.LeftOutMore}
	byNode := make(map[string]*wire.Heartbeat, len(rows))
	for i := range rows {
		if rows[i].Heartbeat != nil && !rows[i].Silent {
			byNode[rows[i].Node] = rows[i].Heartbeat
		}
	}
	for i, bt := range st.Batches {
		nodes := st.BatchNodes(i)
		bv := batchView{N: i + 1, Name: bt.Name, Nodes: len(nodes)}
		if !bt.Started.IsZero() {
			bv.Started = bt.Started.UTC().Format(time.RFC3339)
		}
		switch {
		case !bt.Done.IsZero():
			bv.Confirmed, bv.State = len(nodes), "done"
		case i > st.Current || bt.Started.IsZero():
			bv.State = "waiting"
		default:
			for _, n := range nodes {
				hb, ok := byNode[n]
				if ok && hb.State == wire.StateRunning && hb.Running == st.Version && hb.KnownGood == st.Version {
					bv.Confirmed++
				}
			}
			bv.State, bv.InProgress = "in progress", st.Status == rollout.StatusRunning
			if st.Halt != nil && st.Halt.Batch == i {
				bv.State = "halted"
			} else if st.Status != rollout.StatusRunning {
				bv.State = string(st.Status)
			}
		}
		v.Batches = append(v.Batches, bv)
	}
	if h := st.Halt; h != nil {
		v.Halt = &haltView{Batch: h.Batch + 1, At: h.At.UTC().Format(time.RFC3339), Nodes: h.Nodes, More: h.More, ByPlatform: st.HaltByPlatform()}
	}
	v.Platforms, v.Skipped = rolloutPlatforms(st, byNode)
	return v
}

// nodeView is what a node's page shows: the story `fleet NODE` prints, as it prints it.
type nodeView struct {
	Node   string
	Found  bool
	Ready  bool
	Status string
	Kind   string
	Story  string
	Now    string
}

func (s *Server) nodeView(node string, now time.Time) nodeView {
	b := s.snapshot()
	v := nodeView{Node: node, Ready: s.ready.Load(), Now: now.UTC().Format(time.RFC3339)}
	st, ok := s.view.Story(node, now, fleet.RowOptions{SilentAfter: s.cfg.SilentAfter, Withdrawals: b.withdrawals, WithdrawalsRevision: b.withdrawRev, TrustRoot: b.trustRoot})
	if !ok {
		return v
	}
	var w strings.Builder
	if err := fleet.WriteStory(&w, st, now); err != nil {
		v.Story = "could not write the story: " + err.Error()
	} else {
		v.Story = w.String()
	}
	v.Found, v.Status, v.Kind = true, st.Status, string(st.StatusKind)
	return v
}

// maxNodeParam bounds a node id taken from a URL: ids on the bus are at most 64 bytes.
const maxNodeParam = 128

func nodeParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	node := r.PathValue("node")
	if err := wire.ValidNode(node); err != nil || len(node) > maxNodeParam {
		http.Error(w, fmt.Sprintf("no such node %s: not a node id", text.Bound(node)), http.StatusNotFound)
		return "", false
	}
	return node, true
}

func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, "fleet.html", s.fleetView(s.cfg.Now()), http.StatusOK)
}

func (s *Server) nodePage(w http.ResponseWriter, r *http.Request) {
	node, ok := nodeParam(w, r)
	if !ok {
		return
	}
	v := s.nodeView(node, s.cfg.Now())
	code := http.StatusOK
	if !v.Found && v.Ready {
		code = http.StatusNotFound // a page saying so, which turns into the node once it is heard
	}
	s.render(w, "node.html", v, code)
}

func (s *Server) render(w http.ResponseWriter, name string, v any, code int) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, v); err != nil {
		s.cfg.Log.Error("web: render", "page", name, "err", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

func (s *Server) fleetEvents(w http.ResponseWriter, r *http.Request) {
	s.events(w, r, s.fleetFragment)
}

// fleetFragment is the fleet page's live part as of now, drawn at most once per change and per
// minGap whichever page asks: at 10,000 nodes a drawing costs about 200 ms
// (BenchmarkFleetPageTenThousandNodes), so each open page drawing its own would cost a core
// for a few of them.
func (s *Server) fleetFragment(now time.Time, gen uint64) ([]byte, error) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if c := s.cache; c.html != nil && c.gen >= gen && now.Sub(c.at) < minGap && !now.Before(c.at) {
		return c.html, nil
	}
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, "fleet-live", s.fleetView(now)); err != nil {
		return nil, err
	}
	s.cache = drawn{gen: gen, at: now, html: b.Bytes()}
	return s.cache.html, nil
}

func (s *Server) nodeEvents(w http.ResponseWriter, r *http.Request) {
	node, ok := nodeParam(w, r)
	if !ok {
		return
	}
	s.events(w, r, func(now time.Time, _ uint64) ([]byte, error) {
		var b bytes.Buffer
		err := pages.ExecuteTemplate(&b, "node-live", s.nodeView(node, now))
		return b.Bytes(), err
	})
}

// Pacing of the events: at most one per minGap however fast heartbeats arrive (at 10,000 nodes
// heartbeats arrive all the time), and one every ageEvery when nothing changed but the ages the
// page shows.
const (
	minGap   = time.Second
	ageEvery = 5 * time.Second
)

// events streams the fragment draw draws as server-sent events (event "page", its data
// the fragment's HTML as a JSON string) whenever it changes, until the client goes or the
// server stops. The fragment is the one the page was drawn with, so the page with JavaScript
// and without show the same, escaped once.
func (s *Server) events(w http.ResponseWriter, r *http.Request, draw func(now time.Time, gen uint64) ([]byte, error)) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	ctx := r.Context()
	var last []byte
	tick := time.NewTicker(ageEvery)
	defer tick.Stop()
	for {
		changed, gen := s.wait()
		html, err := draw(s.cfg.Now(), gen)
		if err != nil {
			s.cfg.Log.Error("web: render", "path", r.URL.Path, "err", err)
			return
		}
		if !bytes.Equal(html, last) {
			data, _ := json.Marshal(string(html)) // one line: JSON escapes the newlines
			if _, err := fmt.Fprintf(w, "event: page\ndata: %s\n\n", data); err != nil || rc.Flush() != nil {
				return
			}
			last = html
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(minGap):
		}
	}
}
