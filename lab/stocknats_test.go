package lab

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pkgStockNATS is the stock server: nats-server's own main package, at the version go.mod pins.
const pkgStockNATS = "github.com/nats-io/nats-server/v2"

// stockNATSServer builds the stock nats-server once per test run and returns its path.
func stockNATSServer(t testing.TB) string {
	t.Helper()
	p, err := bins.BuildX(context.Background(), pkgStockNATS, "nats-server")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stockServer is one stock nats-server process started from a configuration mesh-release wrote.
type stockServer struct {
	Conf string
	Log  string // its output
	cmd  *exec.Cmd
	done chan struct{}
}

// startStockServer runs `nats-server -c conf` and returns once it says it is ready; it is
// stopped (SIGTERM, then SIGKILL after 20 s) when the test ends.
func startStockServer(t testing.TB, bin, conf string) *stockServer {
	t.Helper()
	s := &stockServer{Conf: conf, Log: filepath.Join(t.TempDir(), filepath.Base(filepath.Dir(conf))+".log"), done: make(chan struct{})}
	logf, err := os.Create(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, "-c", conf)
	out, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() {
			logf.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), "Server is ready") {
				said = true
				close(ready)
			}
		}
		io.Copy(logf, out)
	}()
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(s.stop)
	select {
	case <-ready:
	case <-s.done:
		log, _ := os.ReadFile(s.Log)
		t.Fatalf("nats-server -c %s exited:\n%s", conf, log)
	case <-time.After(60 * time.Second):
		log, _ := os.ReadFile(s.Log)
		t.Fatalf("nats-server -c %s did not say it was ready:\n%s", conf, log)
	}
	return s
}

func (s *stockServer) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// linkProxy is a TCP proxy between two servers: cutting it closes every connection through it
// and refuses new ones, as a site's line going down does; both servers keep running.
type linkProxy struct {
	t        testing.TB
	addr, to string
	mu       sync.Mutex
	ln       net.Listener
	conns    []net.Conn
	wg       sync.WaitGroup
	accepted int
}

// startLinkProxy listens on addr and carries each connection to the address to.
func startLinkProxy(t testing.TB, addr, to string) *linkProxy {
	t.Helper()
	p := &linkProxy{t: t, addr: addr, to: to}
	p.Restore()
	t.Cleanup(func() { p.Cut(); p.wg.Wait() })
	return p
}

// Restore listens again (the line is back).
func (p *linkProxy) Restore() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("link proxy on %s: %v", p.addr, err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.accepted++
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(up, c); up.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, up); c.Close() }()
		}
	}()
}

// Cut closes the listener and every connection through it.
func (p *linkProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Accepted is how many connections the proxy has carried.
func (p *linkProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}
