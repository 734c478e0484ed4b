package profile

import (
	"context"
	"sync"
	"time"

	"github.com/novox/mesh-host/wire"
)

// Every host in one process runs on the same machine, and a process may run hundreds (the
// lab's fleets, the host package's tests): were each to detect at its start, hundreds of
// runtimes' `info` would start at once, and on a loaded machine a slow probe reads as a runtime
// not working. So hosts given one Detector share its detection, kept for its max age: asked
// again later (the drift timer), it detects again.

// NewDetector returns a Detector of this machine whose detection is reused for maxAge.
func NewDetector(maxAge time.Duration) *Detector {
	return newDetector(maxAge, func(ctx context.Context) wire.Profile { return detect(ctx, machineOptions()) })
}

// Detect is the package's Detect shared by every caller of d: a detection younger than d's max
// age is reused, and callers that ask while one runs wait for it. It fails only when ctx ends
// first.
func (d *Detector) Detect(ctx context.Context) (wire.Profile, error) { return d.detect(ctx) }

// Detector runs one detection at a time and shares it.
type Detector struct {
	maxAge time.Duration
	run    func(ctx context.Context) wire.Profile

	mu      sync.Mutex
	last    *wire.Profile
	at      time.Time
	running chan struct{} // closed when the detection in progress ends; nil when none runs
}

func newDetector(maxAge time.Duration, run func(context.Context) wire.Profile) *Detector {
	return &Detector{maxAge: maxAge, run: run}
}

func (d *Detector) detect(ctx context.Context) (wire.Profile, error) {
	for {
		d.mu.Lock()
		if d.last != nil && time.Since(d.at) < d.maxAge {
			p := copyProfile(*d.last)
			d.mu.Unlock()
			return p, nil
		}
		if wait := d.running; wait != nil {
			d.mu.Unlock()
			select {
			case <-wait:
				continue // its result, or, if it was cut short, our turn
			case <-ctx.Done():
				return wire.Profile{}, ctx.Err()
			}
		}
		done := make(chan struct{})
		d.running = done
		d.mu.Unlock()

		p := d.run(ctx)
		d.mu.Lock()
		if ctx.Err() == nil { // one cut short is partial: not shared
			d.last, d.at = &p, time.Now()
		}
		d.running = nil
		close(done)
		d.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return wire.Profile{}, err
		}
		return copyProfile(p), nil
	}
}

func copyProfile(p wire.Profile) wire.Profile {
	p.ContainerRuntimes = append([]wire.RuntimeProbe{}, p.ContainerRuntimes...)
	return p
}
