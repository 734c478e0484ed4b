//go:build !linux

package rollback

import "time"

// bootClock, off Linux, has no boot id: the process's own monotonic clock stands in, so a
// confirmed version's failures count within one launcher's life only.
func bootClock() func() bootTime {
	start := time.Now()
	return func() bootTime { return bootTime{ID: "process", Since: time.Since(start)} }
}
