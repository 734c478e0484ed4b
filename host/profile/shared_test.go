package profile

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

func TestHostsAskingAtOnceShareOneDetection(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	d := newDetector(time.Hour, func(context.Context) wire.Profile {
		runs.Add(1)
		<-release
		return wire.Profile{Arch: "amd64", ContainerRuntimes: []wire.RuntimeProbe{{Name: "docker"}}}
	})
	var wg sync.WaitGroup
	got := make([]wire.Profile, 50)
	for i := range got {
		wg.Go(func() {
			p, err := d.detect(context.Background())
			if err != nil {
				t.Error(err)
			}
			got[i] = p
		})
	}
	// Let every caller reach the detector before the one detection ends.
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d detections for 50 callers at once, want 1", n)
	}
	got[0].ContainerRuntimes[0].Name = "changed"
	if got[1].Arch != "amd64" || got[1].ContainerRuntimes[0].Name != "docker" {
		t.Fatalf("callers share one profile's lists: %+v", got[1])
	}
	if _, err := d.detect(context.Background()); err != nil || runs.Load() != 1 {
		t.Fatalf("a fresh detection is reused: %d runs, %v", runs.Load(), err)
	}
}

func TestAnOldDetectionIsRunAgain(t *testing.T) {
	var runs atomic.Int32
	d := newDetector(0, func(context.Context) wire.Profile { runs.Add(1); return wire.Profile{} })
	for i := 0; i < 3; i++ {
		if _, err := d.detect(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("%d detections, want 3: none is young enough to reuse", runs.Load())
	}
}

// A detection cut short by its caller's stop is partial: it is not kept, and the next caller
// detects again.
func TestADetectionCutShortIsNotShared(t *testing.T) {
	var runs atomic.Int32
	d := newDetector(time.Hour, func(ctx context.Context) wire.Profile {
		if runs.Add(1) == 1 {
			<-ctx.Done()
			return wire.Profile{Arch: "partial"}
		}
		return wire.Profile{Arch: "amd64"}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.detect(ctx); err == nil {
		t.Fatal("a stopped caller got a profile")
	}
	p, err := d.detect(context.Background())
	if err != nil || p.Arch != "amd64" || runs.Load() != 2 {
		t.Fatalf("after a cut detection: %+v, %v, %d runs", p, err, runs.Load())
	}
}
