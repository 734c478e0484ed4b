package bus

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// certReloader is the server's certificate, read again from its files when they change: a
// `mesh-release bus ca switch` (or a renewal) writes new files, and the running server presents
// them from its next handshake without dropping a connection (decision 0046). A pair that does
// not load (the key written, the certificate not yet) leaves the last good one in use.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger

	mu    sync.Mutex
	stamp string
	cert  *tls.Certificate
}

// get is tls.Config.GetCertificate.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stamp, err := fileStamp(r.certFile, r.keyFile)
	if err == nil && stamp == r.stamp {
		return r.cert, nil
	}
	pair, lerr := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err == nil {
		err = lerr
	}
	if err != nil {
		if r.cert == nil {
			return nil, fmt.Errorf("TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
		}
		if r.logger != nil {
			r.logger.Warn("serve: the TLS certificate's files changed but do not load; presenting the one loaded before", "cert", r.certFile, "err", err)
		}
		return r.cert, nil
	}
	if r.cert != nil && r.logger != nil {
		r.logger.Info("serve: presenting the TLS certificate written since; connections made keep theirs", "cert", r.certFile)
	}
	r.stamp, r.cert = stamp, &pair
	return r.cert, nil
}

// fileStamp names the files' versions: their sizes and modification times.
func fileStamp(paths ...string) (string, error) {
	s := ""
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d/%s;", st.Size(), st.ModTime().Format(time.RFC3339Nano))
	}
	return s, nil
}
