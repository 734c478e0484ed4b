package deliver

import (
	"os/exec"
	"path/filepath"
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

func unameMachine() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Machine[:]), nil
}

// mountPoint returns the mount point of the file system holding dir (the directory an
// operator frees space on), or dir itself when it cannot be told.
func mountPoint(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return dir
	}
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return dir
	}
	for {
		parent := filepath.Dir(dir)
		var ps unix.Stat_t
		if parent == dir || unix.Stat(parent, &ps) != nil || ps.Dev != st.Dev {
			return dir
		}
		dir = parent
	}
}

// ownGroup runs cmd in its own process group and makes cancelling it kill the whole group, so a
// preflight that forks and hangs leaves nothing behind.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return killGroup(cmd) }
}

// killGroup kills what is left of cmd's process group.
func killGroup(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
