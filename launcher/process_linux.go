package launcher

import (
	"syscall"
	"unsafe"
)

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

// onMainThread reports whether the calling goroutine runs on the process's main thread, the one
// mesh-launcher locks its main goroutine to (the only one that forks hosts and execs).
func onMainThread() bool { return syscall.Gettid() == syscall.Getpid() }

// monoNow is CLOCK_BOOTTIME in nanoseconds: it goes on across exec, as the monotonic clock a
// process keeps does not.
func monoNow() int64 {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 7 /* CLOCK_BOOTTIME */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return ts.Nano()
}
