package rollback

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// bootClock returns a function reading the boot clock; the boot id is read once, since it
// cannot change while a process lives.
func bootClock() func() Boot {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(string(b))
	return func() Boot {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			return Boot{}
		}
		return Boot{ID: id, Since: time.Duration(ts.Nano())}
	}
}
