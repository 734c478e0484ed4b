//go:build !linux

package rollback

import "time"

// bootClock, off Linux, has no boot id: the process's own monotonic clock stands in, so a
// confirmed version's failures count within one launcher's life only.
func bootClock() func() Boot {
	start := time.Now()
	return func() Boot { return Boot{ID: "process", Since: time.Since(start)} }
}
