//go:build !linux

package launcher

import (
	"fmt"
	"runtime"
	"syscall"
)

// diesWithLauncher, off Linux, refuses: without Pdeathsig a killed launcher would leave its host
// running beside the next one.
func diesWithLauncher() (*syscall.SysProcAttr, error) {
	return nil, fmt.Errorf("mesh-launcher runs hosts on linux only: on %s nothing kills the host when the launcher dies (Pdeathsig)", runtime.GOOS)
}

// alive, off Linux, is false: no launcher runs hosts here, so a pid in the records belongs to
// the machine the records came from.
func alive(int) bool { return false }
