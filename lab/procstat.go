package lab

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CPUTicks is a process's user+system CPU time in clock ticks (USER_HZ, 100 on Linux), from
// /proc/<pid>/stat.
func CPUTicks(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k, nil
}

// MemoryKB reads one field of /proc/<pid>/status in kB: "VmRSS" (resident now) or "VmHWM" (peak).
func MemoryKB(pid int, field string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
