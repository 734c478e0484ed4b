package deliver

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// relay is a small TCP proxy between a host's NATS connection and the bus: it forwards the
// client→server direction as it comes and the server→client direction at rate bytes a second,
// and hold makes it stop forwarding that direction (a stalled link) until release.
type relay struct {
	*tcpProxy
	t    testing.TB
	rate int

	mu   sync.Mutex
	open chan struct{} // closed while forwarding
}

// startRelay relays to the bus at busURL (nats://host:port); URL is where clients connect.
func startRelay(t testing.TB, busURL string, rate int) *relay {
	t.Helper()
	r := &relay{t: t, rate: rate, open: make(chan struct{})}
	close(r.open)
	r.tcpProxy = startTCPProxy(t, busURL, copyAll, r.paced)
	t.Cleanup(r.release) // before the proxy stops (cleanups run last first): a held copy ends
	return r
}

// hold stops forwarding server→client bytes; connections stay open.
func (r *relay) hold() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.open:
		r.open = make(chan struct{})
	default:
	}
}

// release forwards again what was held and what follows.
func (r *relay) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.open:
	default:
		close(r.open)
	}
}

func (r *relay) gate() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open
}

// paced copies src to dst at r.rate bytes a second, waiting while the relay is held.
func (r *relay) paced(dst io.Writer, src io.Reader) {
	buf := make([]byte, 8<<10)
	next := time.Now()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-r.gate()
			if now := time.Now(); next.Before(now) {
				next = now
			}
			next = next.Add(time.Duration(n) * time.Second / time.Duration(r.rate))
			time.Sleep(time.Until(next))
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				r.t.Logf("relay: %v", err)
			}
			return
		}
	}
}
