package web

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// What drawing the fleet page costs at 10,000 nodes (the table bounded to maxRows): the fleet
// view judged as of the request, a rollout of three batches drawn, the page rendered and
// escaped. Each event an open page receives costs the same, as the events carry the same
// fragment. Reported: ms per page and its size.
func BenchmarkFleetPageTenThousandNodes(b *testing.B) {
	s := New(Config{Every: time.Hour})
	now := time.Now()
	nodes := make([]string, 10000)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%05d", i)
		e := running(nodes[i], fmt.Sprintf("v1.%d.0", i%3))
		e.Heard = now.Add(-time.Duration(i%20) * time.Second)
		s.view.Update(e)
	}
	st := rollout.State{ID: "r1", Version: "v1.2.0", Status: rollout.StatusRunning, Created: now, Nodes: nodes, Ran: make([]string, len(nodes)),
		Batches: []rollout.Batch{{Name: "canary", End: 10, Started: now, Done: now}, {Name: "50%", End: 5000, Started: now}, {Name: "100%", End: 10000}}, Current: 1}
	s.SetBuckets(st, true, wire.Withdrawals{}, 0)
	s.MarkReady()
	h := s.Handler()
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			b.Fatalf("status %d", rec.Code)
		}
		body, _ := io.ReadAll(rec.Body)
		size = len(body)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
	b.ReportMetric(float64(size)/1024, "KiB/page")
}
