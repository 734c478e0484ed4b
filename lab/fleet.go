package lab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// ScaledLauncherArgs are the launcher flags of a fleet node: the production rules with their
// clocks scaled down so a broken release is judged in seconds (a host that has not confirmed in
// 10s is rolled back; restarts back off from 200ms to at most 2s).
var ScaledLauncherArgs = []string{
	"--confirm-deadline", "10s", "--liveness-limit", "10s",
	"--backoff-min", "200ms", "--backoff-max", "2s", "--stop-timeout", "10s",
}

// ToolVersion is the version the lab stamps into mesh-release and the tools it builds; the launcher
// built at ToolVersion is not stamped and says its own version (launcher.Version, BuildArgs).
const ToolVersion = "v0.0.0-lab"

// FleetOptions say what fleet StartFleet runs.
type FleetOptions struct {
	Dir     string   // required: the bus's data, the keys, the releases and every node's root
	Builder *Builder // required: builds the launcher, mesh-release and the host versions

	Nodes    int           // how many (default 6), named node-1 … node-N
	Base     string        // the version every root is seeded with, the real host (default v1.0.0)
	Interval time.Duration // every host's heartbeat and reconcile interval (default 1s)
	// LauncherArgs are given to every `mesh-launcher run` (default ScaledLauncherArgs).
	LauncherArgs []string
	// Env is extra environment for every node (its launcher and its hosts), such as
	// MESH_LAB_CRASH_AFTER.
	Env []string
	// LogDir, if set, also gets each node's output, in <node>.log, for a person to follow.
	LogDir string
	// Arches are the nodes' architectures (GOARCH names), node-1 first; nodes past the list run
	// this machine's. A node of another architecture runs a launcher and hosts built for it,
	// through qemu-user: check first that the machine runs them (emulator.Runs).
	Arches []string
	// BaseBinaries seeds the named nodes with this host binary as Base instead of the one built
	// from the tree: a host built from an older commit, for an upgrade from it.
	BaseBinaries map[string]string
}

// arch is node i's architecture (i from 0).
func (o FleetOptions) arch(i int) string {
	if i < len(o.Arches) && o.Arches[i] != "" {
		return o.Arches[i]
	}
	return runtime.GOARCH
}

// Platforms are the architectures the fleet's nodes run, each once, in node order.
func (o FleetOptions) Platforms() []string {
	var out []string
	for i := range o.Nodes {
		if a := o.arch(i); !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func (o FleetOptions) withDefaults() FleetOptions {
	if o.Nodes == 0 {
		o.Nodes = 6
	}
	if o.Base == "" {
		o.Base = "v1.0.0"
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.LauncherArgs == nil {
		o.LauncherArgs = ScaledLauncherArgs
	}
	return o
}

// Fleet is a mesh on one machine, every part real: an embedded NATS server (the Bus), N nodes
// each a `mesh-launcher run` process with its own root seeded with the base version and trusting
// the release key, the real mesh-release (Release) for everything an operator does, and the
// lab's observers — every heartbeat recorded (Beats) and every read of an archive counted
// (Reads) — on a connection of their own that rides out a restart of the server.
type Fleet struct {
	Bus     *Bus
	Release *Release
	Nodes   []*Node
	Beats   *HeartbeatLog
	Reads   *ArchiveReads
	Key     string // the release public key every node trusts
	Opts    FleetOptions

	observer *nats.Conn
	logs     []*cappedLog

	mu          sync.Mutex
	controllers []*Controller
}

// StartFleet builds what it runs (the launcher and mesh-release at ToolVersion, the host at the
// base version; build them first when ctx is short, as a cold build takes minutes), starts the
// bus and every node, and returns once every node has heartbeat its base version running and
// confirmed. On error, what it started is stopped.
func StartFleet(ctx context.Context, o FleetOptions) (f *Fleet, err error) {
	o = o.withDefaults()
	if o.Dir == "" || o.Builder == nil {
		return nil, errors.New("StartFleet: Dir and Builder are required")
	}
	releaseBin, err := o.Builder.Build(ctx, PkgRelease, ToolVersion)
	if err != nil {
		return nil, err
	}
	// Each architecture's launcher and base host.
	launcherBin, baseBin := map[string]string{}, map[string]string{}
	for _, a := range o.Platforms() {
		if launcherBin[a], err = o.Builder.BuildFor(ctx, PkgLauncher, ToolVersion, a); err != nil {
			return nil, err
		}
		if baseBin[a], err = o.Builder.BuildFor(ctx, PkgHost, o.Base, a); err != nil {
			return nil, err
		}
	}

	f = &Fleet{Opts: o}
	defer func() {
		if err != nil {
			f.Close()
			f = nil
		}
	}()
	if f.Bus, err = StartBus(ctx, filepath.Join(o.Dir, "bus")); err != nil {
		return f, err
	}
	// The observers' own connection: it keeps trying while the server is down (Restart).
	f.observer, err = nats.Connect(f.Bus.URL(), nats.Name("mesh-lab observer"),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.ReconnectBufSize(-1))
	if err != nil {
		return f, fmt.Errorf("connect the lab's observer: %w", err)
	}
	if f.Beats, err = RecordHeartbeats(f.observer, f.Bus.Names); err != nil {
		return f, err
	}
	if f.Reads, err = CountArchiveReads(f.observer, f.Bus.Names); err != nil {
		return f, err
	}
	f.Release = &Release{Bin: releaseBin, KeyDir: filepath.Join(o.Dir, "keys"), Out: filepath.Join(o.Dir, "releases"), NATS: f.Bus.URL(),
		Launcher: launcherBin[runtime.GOARCH]}
	if f.Key, err = f.Release.Keygen(ctx); err != nil {
		return f, err
	}
	for i := 1; i <= o.Nodes; i++ {
		name, arch := fmt.Sprintf("node-%d", i), o.arch(i-1)
		n := &Node{
			Name: name, Root: filepath.Join(o.Dir, "nodes", name), Launcher: launcherBin[arch], Arch: arch,
			Env: append([]string{"MESH_HOST_NODE=" + name, "MESH_HOST_NATS_URL=" + f.Bus.URL(), "MESH_HOST_TRUSTED_KEYS=" + f.Key,
				"MESH_HOST_RECONCILE_INTERVAL=" + o.Interval.String(), "MESH_HOST_HEARTBEAT_INTERVAL=" + o.Interval.String()}, o.Env...),
			Args: o.LauncherArgs,
		}
		if o.LogDir != "" {
			if err := os.MkdirAll(o.LogDir, 0o755); err != nil {
				return f, err
			}
			log, err := openCappedLog(filepath.Join(o.LogDir, name+".log"), maxNodeLog)
			if err != nil {
				return f, err
			}
			f.logs, n.Tee = append(f.logs, log), log
		}
		bin := baseBin[arch]
		if b, ok := o.BaseBinaries[name]; ok {
			bin = b
		}
		if err := n.PlaceVersion(o.Base, bin); err != nil {
			return f, fmt.Errorf("seed %s with %s: %w", name, o.Base, err)
		}
		f.Nodes = append(f.Nodes, n)
	}
	for _, n := range f.Nodes {
		if err := n.Start(); err != nil {
			return f, err
		}
	}
	if err := f.Beats.WaitAll(ctx, f.Names(), o.Base+" running and confirmed", RunningConfirmed(o.Base)); err != nil {
		return f, err
	}
	return f, nil
}

// Names are the nodes' names, node-1 first.
func (f *Fleet) Names() []string {
	out := make([]string, len(f.Nodes))
	for i, n := range f.Nodes {
		out[i] = n.Name
	}
	return out
}

// Node is the node called name, or nil.
func (f *Fleet) Node(name string) *Node {
	for _, n := range f.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// BuildRelease builds pkg stamped version and packs and signs it with mesh-release build, ready to
// publish; it returns the release's directory. A fleet of several architectures gets one release
// for all of them, built from the tree (Release.BuildTree).
func (f *Fleet) BuildRelease(ctx context.Context, version, pkg string) (string, error) {
	if ps := f.Opts.Platforms(); len(ps) > 1 || ps[0] != runtime.GOARCH {
		return f.Release.BuildTree(ctx, f.Opts.Builder.Src, version, pkg, ps)
	}
	bin, err := f.Opts.Builder.Build(ctx, pkg, version)
	if err != nil {
		return "", err
	}
	return f.Release.Build(ctx, version, bin)
}

// Ship builds pkg as version and publishes it (mesh-release build, then publish).
func (f *Fleet) Ship(ctx context.Context, version, pkg string) error {
	dir, err := f.BuildRelease(ctx, version, pkg)
	if err != nil {
		return err
	}
	return f.Release.Publish(ctx, dir)
}

// Rollout prepares `mesh-release rollout args… --nats URL` as a background process (with
// --key, the release key, for a subcommand that writes targets); set its OnLine if needed, then
// Start it. Close kills it if it is still running.
func (f *Fleet) Rollout(args ...string) *Controller {
	args = append(append([]string{"rollout"}, args...), "--nats", f.Bus.URL())
	if len(args) > 1 && signs(args[1]) {
		args = append(args, "--key", f.Release.KeyPath())
	}
	c := NewController(f.Release.Bin, args...)
	f.mu.Lock()
	f.controllers = append(f.controllers, c)
	f.mu.Unlock()
	return c
}

// signs reports whether `mesh-release rollout sub` writes targets, so takes --key.
func signs(sub string) bool {
	switch sub {
	case "start", "resume", "watch", "abort":
		return true
	}
	return false
}

// StartRollout runs `mesh-release rollout args… --nats URL` in the background.
func (f *Fleet) StartRollout(args ...string) (*Controller, error) {
	c := f.Rollout(args...)
	return c, c.Start()
}

// RolloutState reads the current rollout as the controller stored it (the `current` pointer,
// then the head rollout.<id> and the chunks of its node list, decision 0021); ok is false when
// there has been none.
func (f *Fleet) RolloutState(ctx context.Context) (st rollout.State, ok bool, err error) {
	return rollout.Current(ctx, f.Bus.Conn.JS, f.Bus.Names)
}

// FleetTable is `mesh-release fleet`'s table, as a person sees it.
func (f *Fleet) FleetTable(ctx context.Context) (string, error) {
	return f.Release.Run(ctx, "fleet", "--nats", f.Bus.URL())
}

// Close stops every controller it started (SIGKILL), every node (SIGTERM, then SIGKILL after
// 15s), the observers and the bus. What is on disk stays.
func (f *Fleet) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.mu.Lock()
	controllers := f.controllers
	f.mu.Unlock()
	for _, c := range controllers {
		if c.PID() != 0 {
			c.Kill(ctx)
		}
	}
	var wg sync.WaitGroup
	for _, n := range f.Nodes {
		if !n.Alive() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			if _, err := n.Stop(sctx); err != nil {
				n.Signal(syscall.SIGKILL)
				n.Wait(ctx)
			}
		}()
	}
	wg.Wait()
	if f.Beats != nil {
		f.Beats.Stop()
	}
	if f.Reads != nil {
		f.Reads.Stop()
	}
	if f.observer != nil {
		f.observer.Close()
	}
	if f.Bus != nil {
		f.Bus.Close()
	}
	for _, log := range f.logs {
		log.Close()
	}
}

// Target is the version KV names under key (wire.FleetTargetKey, or "node.<id>"); ok is false
// when the key is absent.
func (f *Fleet) Target(ctx context.Context, key string) (version string, ok bool, err error) {
	kv, err := f.Bus.Conn.JS.KeyValue(ctx, f.Bus.Names.Targets())
	if err != nil {
		return "", false, fmt.Errorf("open %s: %w", f.Bus.Names.Targets(), err)
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("%s %s: %w", f.Bus.Names.Targets(), key, err)
	}
	t, err := wire.ParseTarget(e.Value())
	if err != nil {
		return "", false, fmt.Errorf("%s %s: %w", f.Bus.Names.Targets(), key, err)
	}
	return t.Version, true, nil
}

// WaitRollout polls the current rollout's state (every 100ms) until ok is true of it; it returns
// the last state read.
func (f *Fleet) WaitRollout(ctx context.Context, what string, ok func(rollout.State) bool) (rollout.State, error) {
	var last rollout.State
	var lastErr error
	for {
		st, found, err := f.RolloutState(ctx)
		switch {
		case err != nil:
			lastErr = err
		case found:
			last = st
			if ok(st) {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for a rollout %s: %w (last seen: %s %s %s; last error: %v)",
				what, ctx.Err(), last.ID, last.Version, last.Status, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// BatchNodes are the nodes of batch i of st (0 is the canaries).
func BatchNodes(st rollout.State, i int) []string {
	if i < 0 || i >= len(st.Batches) {
		return nil
	}
	from := 0
	if i > 0 {
		from = st.Batches[i-1].End
	}
	end := min(st.Batches[i].End, len(st.Nodes))
	return st.Nodes[min(from, end):end]
}
