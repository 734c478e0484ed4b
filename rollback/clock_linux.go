package rollback

import (
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// bootClock returns a function reading the boot clock; the boot id is read once, since it
// cannot change while a process lives.
func bootClock() func() bootTime {
	b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	id := strings.TrimSpace(string(b))
	return func() bootTime {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			return bootTime{}
		}
		return bootTime{ID: id, Since: time.Duration(ts.Nano())}
	}
}
