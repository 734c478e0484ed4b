package rollback

import "time"

// bootTime is where this machine's boot clock stands: which boot it is, and how long since it
// began (CLOCK_BOOTTIME, which counts suspend and is never stepped). Failures are counted by
// the order of starts and by this clock, never by wall-clock differences, so a clock stepped
// back a day cannot hide five failures, nor one stepped forward make a crash loop look calm.
type bootTime struct {
	ID    string        // /proc/sys/kernel/random/boot_id; "" where it cannot be read
	Since time.Duration // time since the boot began
}
