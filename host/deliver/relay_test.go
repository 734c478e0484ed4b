package deliver

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"
)

// relay is a small TCP proxy between a host's NATS connection and the bus: it forwards the
// client→server direction as it comes and the server→client direction at rate bytes a second,
// and hold makes it stop forwarding that direction (a stalled link) until release.
type relay struct {
	t    testing.TB
	ln   net.Listener
	to   string
	rate int

	mu    sync.Mutex
	open  chan struct{} // closed while forwarding
	conns []net.Conn
	wg    sync.WaitGroup
}

// startRelay relays to the bus at busURL (nats://host:port); URL is where clients connect.
func startRelay(t testing.TB, busURL string, rate int) *relay {
	t.Helper()
	u, err := url.Parse(busURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{t: t, ln: ln, to: u.Host, rate: rate, open: make(chan struct{})}
	close(r.open)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.stop)
	return r
}

func (r *relay) URL() string { return "nats://" + r.ln.Addr().String() }

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

func (r *relay) stop() {
	r.ln.Close()
	r.release()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		client, err := r.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", r.to)
		if err != nil {
			client.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, client, server)
		r.mu.Unlock()
		r.wg.Add(2)
		go func() {
			defer r.wg.Done()
			io.Copy(server, client)
			server.Close()
		}()
		go func() {
			defer r.wg.Done()
			r.paced(client, server)
			client.Close()
		}()
	}
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
