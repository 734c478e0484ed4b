package deliver

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

func statfsFree(dir string) (uint64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return s.Bavail * uint64(s.Bsize), nil
}

// ownGroup runs cmd in its own process group and makes cancelling it kill the whole group, so a
// preflight that forks and hangs leaves nothing behind.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
