package systemd

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// listenIn opens a TCP listener inside the network namespace at nsPath. A socket belongs to the
// namespace it was made in for its whole life, so the listener is made on a thread moved into
// that namespace — a thread never handed back to the runtime, which ends it — and then used
// from anywhere.
func listenIn(nsPath, addr string) (net.Listener, error) {
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: fmt.Errorf("opening %s: %w", nsPath, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("entering %s: %w", nsPath, os.NewSyscallError("setns", err))}
			return
		}
		l, err := net.Listen("tcp", addr)
		ch <- result{l, err}
	}()
	r := <-ch
	return r.l, r.err
}

// forwarder accepts on a listener in the lab's bridge namespace and relays each connection to
// the bus, which runs on this machine's loopback — in this process, or a `mesh-release serve`
// the caller runs (Options.Bus; TLS passes through the relay untouched): the nodes see the bus
// at BridgeAddr, the test talks to it directly, and the server never has to listen in another
// namespace (the embedded one starts its accept loop on a goroutine, so on whatever thread the
// runtime picks).
type forwarder struct {
	l     net.Listener
	to    string
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  sync.WaitGroup
}

func forward(l net.Listener, to string) *forwarder {
	f := &forwarder{l: l, to: to, conns: map[net.Conn]struct{}{}}
	f.done.Add(1)
	go f.accept()
	return f
}

func (f *forwarder) accept() {
	defer f.done.Done()
	for {
		c, err := f.l.Accept()
		if err != nil {
			return
		}
		f.done.Add(1)
		go f.relay(c)
	}
}

func (f *forwarder) track(c net.Conn, on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conns == nil {
		return false
	}
	if on {
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *forwarder) relay(in net.Conn) {
	defer f.done.Done()
	defer in.Close()
	out, err := net.Dial("tcp", f.to)
	if err != nil {
		return
	}
	defer out.Close()
	if !f.track(in, true) || !f.track(out, true) {
		return
	}
	defer f.track(in, false)
	defer f.track(out, false)
	// Either side ending ends both: a node cut off never sends its FIN, and the bus's own
	// ping timeout is what notices — the relay must not outlive it.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(out, in)
		in.Close()
		out.Close()
	}()
	io.Copy(in, out)
	in.Close()
	out.Close()
	wg.Wait()
}

// Close stops accepting, drops every relayed connection and waits for the relays to end.
func (f *forwarder) Close() {
	f.l.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.done.Wait()
}
