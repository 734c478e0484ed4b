package launcher

import "syscall"

// diesWithLauncher is the process attribute that makes the kernel kill the host when the
// launcher dies, however it dies (Pdeathsig), so a SIGKILLed launcher never leaves a host behind
// to run beside the next one.
func diesWithLauncher() (*syscall.SysProcAttr, error) {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}, nil
}

// alive reports whether a process with this pid exists on this machine.
func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}
