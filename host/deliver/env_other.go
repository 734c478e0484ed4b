//go:build !linux

package deliver

import (
	"errors"
	"os/exec"
)

func statfsFree(string) (uint64, error) {
	return 0, errors.New("free space cannot be checked on this operating system; hosts run on linux")
}

func mountPoint(dir string) string { return dir }

// unameMachine, off Linux, has no kernel word: GOARCH alone names the platform.
func unameMachine() (string, error) { return "", nil }

// ownGroup, off Linux, cannot make the kernel kill a preflight with the host; it is never
// reached, since statfsFree refuses every staging first.
func ownGroup(*exec.Cmd) {}

func killGroup(*exec.Cmd) error { return nil }
