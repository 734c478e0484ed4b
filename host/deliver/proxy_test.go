package deliver

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// tcpProxy sits between a host's NATS connection and the bus: each connection's client→server
// bytes go through up, its server→client bytes through down, and both ends close when either
// direction ends. relay (a paced, holdable link) and loser (a server lost with a request) are
// its two uses.
type tcpProxy struct {
	ln       net.Listener
	to       string
	up, down func(dst io.Writer, src io.Reader)

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// copyAll is a direction passed on as it comes.
func copyAll(dst io.Writer, src io.Reader) { io.Copy(dst, src) }

// startTCPProxy proxies to the bus at busURL (nats://host:port); URL is where clients connect.
func startTCPProxy(t testing.TB, busURL string, up, down func(dst io.Writer, src io.Reader)) *tcpProxy {
	t.Helper()
	u, err := url.Parse(busURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, to: u.Host, up: up, down: down}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

func (p *tcpProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *tcpProxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.to)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			p.up(server, client)
			server.Close()
			client.Close()
		}()
		go func() {
			defer p.wg.Done()
			p.down(client, server)
			client.Close()
			server.Close()
		}()
	}
}
