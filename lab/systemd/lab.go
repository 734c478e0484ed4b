package systemd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/novox/mesh-host/release/bus"
)

// BusPort is where the bus answers on the lab bridge.
const BusPort = 4222

// Options configure a Lab; the zero value is the lab the issue describes.
type Options struct {
	CacheDir string               // default DefaultCacheDir()
	Rootfs   RootfsSpec           // empty fields default (RootfsSpec.withDefaults)
	Dir      string               // the lab's working directory (node layers, bus data); required
	Logf     func(string, ...any) // progress for a person; nil discards
	// StopGrace bounds a node's clean poweroff before it is killed. Default DefaultStopGrace.
	StopGrace time.Duration
	// Bus, if set, is the URL (scheme://host:port) of a bus the caller serves on this machine —
	// `mesh-release serve` in operator mode, say — which the bridge relays to instead of a bus
	// the lab serves in-process without authentication. Lab.Bus is then nil, and BusURL keeps
	// the scheme: tls://10.77.0.1:4222 for a TLS bus, whose certificate must name BridgeAddr.
	Bus string
}

// Lab is a bus on a private bridge and the nodes booted onto it.
type Lab struct {
	Rootfs RootfsReport
	Bus    *bus.Server // in this process, on loopback; tests talk to it directly (nil with Options.Bus)
	// BusURL is the bus as nodes see it, on the lab bridge.
	BusURL string

	opts     Options
	id       string
	bridgeNS string
	fwd      *forwarder

	mu     sync.Mutex
	nodes  []*Node
	closed bool
	done   chan struct{} // closed by Close; ends the signal watcher
}

// DefaultStopGrace bounds a node's clean poweroff unless Options.StopGrace says otherwise.
const DefaultStopGrace = 20 * time.Second

// withDefaults returns o with every zero field at its default (decision 0041).
func (o Options) withDefaults() Options {
	if o.CacheDir == "" {
		o.CacheDir = DefaultCacheDir()
	}
	o.Rootfs = o.Rootfs.withDefaults()
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.StopGrace == 0 {
		o.StopGrace = DefaultStopGrace
	}
	return o
}

// New builds or reuses the rootfs, makes the bridge namespace and serves the bus on it. The
// caller must Close the lab, which it also does itself on SIGINT or SIGTERM.
func New(ctx context.Context, opts Options) (*Lab, error) {
	if opts.Dir == "" {
		return nil, errors.New("lab: no working directory")
	}
	opts = opts.withDefaults()
	id := make([]byte, 3)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	l := &Lab{opts: opts, id: hex.EncodeToString(id), done: make(chan struct{})}
	l.bridgeNS = "mlab-" + l.id
	l.watchSignals()
	ok := false
	defer func() {
		if !ok {
			l.Close()
		}
	}()

	var err error
	if l.Rootfs, err = Rootfs(ctx, opts.CacheDir, opts.Rootfs, opts.Logf); err != nil {
		return nil, err
	}
	opts.Logf("%s", l.Rootfs)
	if err := addBridgeNS(ctx, l.bridgeNS); err != nil {
		return nil, err
	}
	scheme, to := "nats", ""
	if opts.Bus != "" {
		u, err := url.Parse(opts.Bus)
		if err != nil || u.Scheme == "" || u.Port() == "" {
			return nil, fmt.Errorf("lab: Options.Bus %q is not scheme://host:port", opts.Bus)
		}
		scheme, to = u.Scheme, u.Host
	} else {
		if l.Bus, err = bus.Serve(ctx, bus.ServeOptions{DataDir: filepath.Join(opts.Dir, "bus"), Listen: "127.0.0.1:-1"}); err != nil {
			return nil, fmt.Errorf("lab bus: %w", err)
		}
		to = l.Bus.Addr().String()
	}
	addr := net.JoinHostPort(BridgeAddr, fmt.Sprint(BusPort))
	ln, err := listenIn("/run/netns/"+l.bridgeNS, addr)
	if err != nil {
		return nil, fmt.Errorf("lab bus on the bridge (%s): %w", addr, err)
	}
	l.fwd = forward(ln, to)
	l.BusURL = scheme + "://" + addr
	ok = true
	return l, nil
}

// watchSignals tears the lab down on SIGINT/SIGTERM and then lets the signal do what it would
// have done, so ^C on a test run leaves no container, namespace or mount behind.
func (l *Lab) watchSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			fmt.Fprintf(os.Stderr, "lab %s: %v: tearing down\n", l.id, sig)
			if err := l.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "lab %s: %v\n", l.id, err)
			}
			signal.Stop(ch)
			syscall.Kill(os.Getpid(), sig.(syscall.Signal))
		case <-l.done:
			signal.Stop(ch)
		}
	}()
}

// Boot starts a node named name (a hostname: letters, digits, dashes) and waits until its
// systemd says the boot finished.
func (l *Lab) Boot(ctx context.Context, name string) (*Node, SystemState, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, SystemState{}, errors.New("lab: closed")
	}
	i := len(l.nodes)
	n := &Node{
		Name: name,
		Addr: NodeAddr(i),
		lab:  l,
		dir:  filepath.Join(l.opts.Dir, "nodes", name),
		ns:   fmt.Sprintf("mlab-%s-%d", l.id, i),
		port: fmt.Sprintf("vn%d", i),
	}
	l.nodes = append(l.nodes, n)
	l.mu.Unlock()

	start := time.Now()
	copied, err := n.layer(l.Rootfs.Dir)
	if err != nil {
		return n, SystemState{}, err
	}
	if copied {
		l.opts.Logf("node %s: no overlayfs; copied the base in %s", name, time.Since(start).Round(time.Millisecond))
	}
	if err := n.identify(); err != nil {
		return n, SystemState{}, err
	}
	if err := addNodeNS(ctx, l.bridgeNS, n.ns, n.port, n.Addr); err != nil {
		return n, SystemState{}, err
	}
	if err := n.start(); err != nil {
		return n, SystemState{}, err
	}
	st, err := n.WaitRunning(ctx)
	n.Booted = time.Since(start)
	if err != nil {
		return n, st, err
	}
	l.opts.Logf("node %s booted in %s: %s %s", name, n.Booted.Round(time.Millisecond), st.State, strings.Join(st.Failed, " "))
	return n, st, nil
}

// Cut takes the node off the lab bridge (its veth's bridge end down); Restore puts it back.
func (l *Lab) Cut(ctx context.Context, n *Node) error { return setPort(ctx, l.bridgeNS, n.port, false) }

// Restore reconnects a node Cut took off the bridge.
func (l *Lab) Restore(ctx context.Context, n *Node) error {
	return setPort(ctx, l.bridgeNS, n.port, true)
}

// Close stops every node, the bus and the forwarder, and removes the namespaces and mounts. It
// goes on past errors so one stuck node does not leave the rest behind, and reports them all.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	nodes := l.nodes
	l.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errs []error
	var wg sync.WaitGroup
	nodeErrs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodeErrs[i] = n.stop(l.opts.StopGrace)
		}()
	}
	wg.Wait()
	errs = append(errs, nodeErrs...)
	for _, n := range nodes {
		errs = append(errs, n.unmount())
		if _, err := os.Stat("/run/netns/" + n.ns); err == nil {
			errs = append(errs, delNS(ctx, n.ns))
		}
	}
	if l.fwd != nil {
		l.fwd.Close()
	}
	if l.Bus != nil {
		l.Bus.Shutdown()
	}
	if _, err := os.Stat("/run/netns/" + l.bridgeNS); err == nil {
		errs = append(errs, delNS(ctx, l.bridgeNS))
	}
	return errors.Join(errs...)
}

// CheckGone proves Close left nothing: no nspawn or container process, no namespace of the
// lab's, no mount under its directory.
func (l *Lab) CheckGone() error {
	var errs []error
	l.mu.Lock()
	nodes := l.nodes
	l.mu.Unlock()
	for _, n := range nodes {
		if n.exited != nil {
			select {
			case <-n.exited:
			default:
				errs = append(errs, fmt.Errorf("node %s: systemd-nspawn %d still running", n.Name, n.current().Process.Pid))
			}
		}
		for _, p := range inPidNS(n.pidNamespace()) {
			errs = append(errs, fmt.Errorf("node %s: process %s still running", n.Name, p))
		}
	}
	netns, _ := os.ReadDir("/run/netns")
	for _, e := range netns {
		if e.Name() == l.bridgeNS || strings.HasPrefix(e.Name(), l.bridgeNS+"-") {
			errs = append(errs, fmt.Errorf("network namespace %s still there", e.Name()))
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		errs = append(errs, err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := f[4]; strings.HasPrefix(mp, l.opts.Dir+"/") || strings.HasPrefix(mp, "/run/netns/"+l.bridgeNS) {
			errs = append(errs, fmt.Errorf("mount %s still there", mp))
		}
	}
	return errors.Join(errs...)
}
