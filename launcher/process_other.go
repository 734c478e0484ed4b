//go:build !linux

package launcher

import (
	"fmt"
	"runtime"
	"syscall"
	"time"
)

// diesWithLauncher, off Linux, refuses: without Pdeathsig a killed launcher would leave its host
// running beside the next one.
func diesWithLauncher() (*syscall.SysProcAttr, error) {
	return nil, fmt.Errorf("mesh-launcher runs hosts on linux only: on %s nothing kills the host when the launcher dies (Pdeathsig)", runtime.GOOS)
}

// alive, off Linux, is false: no launcher runs hosts here, so a pid in the records belongs to
// the machine the records came from.
func alive(int) bool { return false }

// onMainThread, off Linux, is false: no host runs here, so nothing is taken over.
func onMainThread() bool { return false }

func monoNow() int64 { return time.Now().UnixNano() }
