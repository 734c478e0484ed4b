package lab

import (
	"fmt"
	"os"
	"sync"
)

// maxNodeLog is how large a node's log under LogDir grows before it is moved to NAME.log.1 (the
// one before it dropped) and begun again: `mesh-lab up` may be left running for days beside a
// node that crash-loops, and its logs must not fill the disk.
const maxNodeLog = 16 << 20

// cappedLog is an append-only log file kept to at most max bytes, with the previous max bytes
// in path.1: a write that would pass max first moves the file aside.
type cappedLog struct {
	mu   sync.Mutex
	path string
	max  int64
	f    *os.File
	size int64
}

func openCappedLog(path string, max int64) (*cappedLog, error) {
	l := &cappedLog{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *cappedLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write appends p whole; a write larger than max is kept whole in a file of its own.
func (l *cappedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return 0, fmt.Errorf("log %s is closed", l.path)
	}
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		if err := l.f.Close(); err != nil {
			return 0, err
		}
		l.f = nil
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return 0, fmt.Errorf("move %s aside: %w", l.path, err)
		}
		if err := l.open(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *cappedLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
