package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dieWithParent has the kernel send mesh-lab SIGTERM when the process that started it exits: make
// or `go run` killed (`go run` dies of SIGTERM without passing it on), a script's shell gone. The
// fleet is then stopped as on Ctrl-C, not left running with nobody to stop it. Call it after
// SIGTERM is caught.
func dieWithParent() error {
	ppid := os.Getppid()
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGTERM), 0, 0, 0); err != nil {
		return fmt.Errorf("ask to be stopped when the process that started mesh-lab exits: %w", err)
	}
	if os.Getppid() != ppid {
		// It exited before the request was made: nothing will send the signal.
		return unix.Kill(os.Getpid(), unix.SIGTERM)
	}
	return nil
}
