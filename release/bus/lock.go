package bus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/novox/mesh-host/internal/filelock"
)

// LockFile is the file in a data directory that one serving process holds a lock on
// (internal/filelock), so that two servers never write one JetStream store. The kernel drops the
// lock when the process dies, however it dies; the pid in the file is for the message only.
const LockFile = "serve.lock"

// ErrDataInUse is returned when another process serves from the same data directory.
var ErrDataInUse = errors.New("data directory in use")

type dataLock struct{ f *os.File }

// lockData takes DIR/serve.lock without waiting: a second server on the same store must fail at
// once and say which process holds it.
func lockData(dir string) (*dataLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("serve: lock the data directory: %w", err)
	}
	if err := filelock.TryLock(f); err != nil {
		f.Close()
		if !errors.Is(err, filelock.ErrBusy) {
			return nil, fmt.Errorf("serve: lock %s: %w", path, err)
		}
		who := "another process"
		if pid := filelock.ReadPID(path); pid > 0 {
			who = fmt.Sprintf("another process (pid %d)", pid)
		}
		return nil, fmt.Errorf("serve: %w: %s already serves from %s (it holds %s); stop it, or give this one another --data",
			ErrDataInUse, who, dir, path)
	}
	filelock.WritePID(f)
	return &dataLock{f: f}, nil
}

func (l *dataLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
