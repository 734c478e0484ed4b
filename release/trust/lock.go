package trust

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/novox/mesh-host/internal/filelock"
)

// lockAccount takes DATA/trust/nodes.lock (internal/filelock), waiting for another process
// (serve, a separate enrolment service) that is changing nodes.jwt, so that no revocation is
// lost between two read-modify-writes. The kernel drops the lock when the process dies.
func (s *Store) lockAccount() (unlock func(), err error) {
	path := filepath.Join(s.dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trust: lock the nodes account: %w", err)
	}
	if err := filelock.Lock(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("trust: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
