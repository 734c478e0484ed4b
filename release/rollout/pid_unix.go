//go:build unix

package rollout

import (
	"errors"
	"syscall"
)

// processGone reports whether no process has this pid (on this host): a holder killed with
// SIGKILL left its lease behind, and a controller on the same host may take over at once.
func processGone(pid int) bool {
	return pid > 0 && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
