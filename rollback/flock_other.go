//go:build !linux

package rollback

import (
	"fmt"
	"os"
	"runtime"
)

// tryLock, off Linux, refuses: one launcher and one host per root rest on flock, and the
// launcher and the host are built and tested for Linux only.
func tryLock(*os.File) (bool, error) {
	return false, fmt.Errorf("mesh-launcher and mesh-host run on linux only; on %s one of each per root cannot be ensured", runtime.GOOS)
}

// heldElsewhere, off Linux, where no launcher can take the lock, is false.
func heldElsewhere(*os.File) bool { return false }
