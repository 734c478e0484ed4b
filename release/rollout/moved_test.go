package rollout

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// The fleet's bytes moved (decision 0028): each node counts the most its heartbeats said it
// fetched delivering the rollout's version; a fetch of another version, or a heartbeat without
// a fetch (the new host after the stand-aside), leaves it as it was.
func TestATrackKeepsTheMostItsNodeSaidItMovedForTheVersion(t *testing.T) {
	const v = "v1.2.0"
	fetch := func(version, state string, moved int64) func(*wire.Heartbeat) {
		return func(hb *wire.Heartbeat) {
			hb.Fetch = &wire.Fetch{State: state, Version: version, Moved: moved, Delta: "v1.1.0"}
		}
	}
	for _, tc := range []struct {
		name string
		fn   []func(*wire.Heartbeat)
		want int64
	}{
		{"fetching then staged", []func(*wire.Heartbeat){fetch(v, "fetching", 100), fetch(v, "staged", 5000)}, 5000},
		{"the new host says nothing of the fetch", []func(*wire.Heartbeat){fetch(v, "staged", 5000), func(*wire.Heartbeat) {}}, 5000},
		{"another version's fetch is not this rollout's", []func(*wire.Heartbeat){fetch(v, "staged", 5000), fetch("v1.3.0", "fetching", 99999)}, 5000},
		{"a delta that failed, then the archive", []func(*wire.Heartbeat){fetch(v, "fetching", 2000), fetch(v, "fetching", 2000+5680954)}, 2000 + 5680954},
		{"never heard fetching", []func(*wire.Heartbeat){func(*wire.Heartbeat) {}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &track{inBatch: true, targetRev: 7}
			for i, f := range tc.fn {
				tr.observe(beat(float64(i), "v1.1.0", "v1.1.0", int64(i+1), f), v, time.Minute)
			}
			if tr.moved != tc.want {
				t.Fatalf("moved %d, want %d", tr.moved, tc.want)
			}
		})
	}
	r := &runner{tracks: map[string]*track{"a": {moved: 366000}, "b": {moved: 2163}, "c": {}}}
	if got := r.moved(); got != 368163 {
		t.Fatalf("the fleet moved %d, want the sum 368163", got)
	}
}

func TestFollowAndStatusSayTheBytesTheFleetMoved(t *testing.T) {
	st := sampleRunning()
	if got := progressMessage(st, 1, progressView{confirmed: 1, nodes: 2, elapsed: 40 * time.Second, windowLeft: time.Minute, moved: 2163 + 5680954}); !strings.HasSuffix(got, "; 5.7 MB moved") {
		t.Errorf("progress: %q", got)
	}
	st.BytesMoved = 366000
	var b bytes.Buffer
	if err := WriteStatus(&b, st, at(13, 16, 0)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "  moved       366 KB fetched by the nodes") {
		t.Errorf("status:\n%s", b.String())
	}
	st.Status, st.Ended = StatusCompleted, at(13, 20, 0)
	if got := completedMessage(st, nil); !strings.HasSuffix(got, "; the nodes moved 366 KB fetching it") {
		t.Errorf("completed: %q", got)
	}
	for n, want := range map[int64]string{912: "912 bytes", 2163: "2 KB", 5680954: "5.7 MB"} {
		if got := movedText(n); got != want {
			t.Errorf("movedText(%d) = %q, want %q", n, got, want)
		}
	}
	st.BytesMoved = 0
	b.Reset()
	WriteStatus(&b, st, at(13, 16, 0))
	if strings.Contains(b.String(), "moved") || strings.Contains(completedMessage(st, nil), "moved") {
		t.Errorf("a rollout that saw no fetch speaks of bytes moved:\n%s", b.String())
	}
}
