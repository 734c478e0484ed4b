package lab

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// scenario is one rollout scenario of the issue: a fleet of real processes, the controllers the
// scenario started, and, when it fails, everything a person needs to see why — each
// controller's output, the fleet table, `rollout status`, each node's last heartbeat and
// `mesh-launcher status` (the node logs follow, from startFleet).
type scenario struct {
	t     *testing.T
	ctx   context.Context
	f     *Fleet
	began time.Time
	ctls  []*Controller
}

// newScenario starts a fleet for the test; the whole scenario must end within limit.
func newScenario(t *testing.T, limit time.Duration, o FleetOptions) *scenario {
	t.Helper()
	s := &scenario{t: t, ctx: meshtest.Context(t, limit), began: time.Now()}
	s.f = startFleet(t, s.ctx, o)
	// Registered after startFleet's cleanup, so it runs first, with the fleet still up.
	t.Cleanup(func() {
		if t.Failed() {
			s.diagnose()
		}
		t.Logf("scenario took %s", time.Since(s.began).Round(100*time.Millisecond))
	})
	return s
}

func (s *scenario) diagnose() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, c := range s.ctls {
		exited, code := c.Exited()
		state := "still running"
		if exited {
			state = fmt.Sprintf("exit %d", code)
		}
		s.t.Logf("mesh-release %s (%s) printed:\n%s", strings.Join(c.Args, " "), state, c.Output())
	}
	if out, err := s.f.FleetTable(ctx); err != nil {
		s.t.Logf("mesh-release fleet: %v", err)
	} else {
		s.t.Logf("mesh-release fleet:\n%s", out)
	}
	out, _ := s.f.Release.Run(ctx, "rollout", "status", "--nats", s.f.Bus.URL())
	s.t.Logf("mesh-release rollout status:\n%s", out)
	for _, n := range s.f.Nodes {
		if b, ok := s.f.Beats.Last(n.Name); ok {
			s.t.Logf("%s last heartbeat (%s): %s", n.Name, b.At.Format("15:04:05.000"), Describe(b.Heartbeat))
		}
		s.t.Logf("mesh-launcher status of %s:\n%s", n.Name, n.StatusText(ctx))
	}
}

// rolloutFlags are a scenario's scaled rollout flags: one canary then half the fleet then all
// of it, nodes must confirm within window and then soak, a node unheard for 5s (five
// heartbeats) when its batch begins is left out, and a controller's lease is 6s.
func rolloutFlags(window, soak time.Duration) []string {
	return []string{"--canary", "1", "--steps", "50%,100%", "--window", window.String(), "--soak", soak.String(),
		"--alive", "1m", "--silent-after", "5s", "--lease", "6s"}
}

// startAgain starts node's stopped launcher and waits for a heartbeat of node, sent after that,
// of which ok is true.
func (s *scenario) startAgain(node *Node, what string, ok func(Beat) bool) {
	s.t.Helper()
	from := s.f.Beats.Len()
	if err := node.Start(); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.f.Beats.WaitAfter(s.ctx, from, what, func(b Beat) bool { return b.Node == node.Name && ok(b) }); err != nil {
		s.t.Fatal(err)
	}
}

// halted runs `mesh-release rollout start version args…` with the scenarios' clocks for
// silence and the lease, wants it to exit 3 (halted), and returns the rollout's final state (its
// halt logged) and the controller, for its output.
func (s *scenario) halted(version string, args ...string) (rollout.State, *Controller) {
	s.t.Helper()
	c := s.rollout(append(append([]string{"start", version}, args...), "--alive", "1m", "--silent-after", "5s", "--lease", "6s")...)
	if code := s.exit(c); code != 3 {
		s.t.Fatalf("rollout start exited %d, want 3 (halted)", code)
	}
	st := s.waitState(version+" halted", func(st rollout.State) bool { return st.Version == version && st.Status.Final() })
	if st.Halt != nil {
		s.t.Logf("halted: %s", whys(st.Halt.Nodes))
	}
	return st, c
}

// rollout starts `mesh-release rollout args…` in the background; its output is shown if the
// test fails.
func (s *scenario) rollout(args ...string) *Controller {
	s.t.Helper()
	c, err := s.f.StartRollout(args...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.ctls = append(s.ctls, c)
	return c
}

// ship builds pkg as version and publishes it.
func (s *scenario) ship(version, pkg string) {
	s.t.Helper()
	if err := s.f.Ship(s.ctx, version, pkg); err != nil {
		s.t.Fatal(err)
	}
}

// exit waits for c to exit and returns its status.
func (s *scenario) exit(c *Controller) int {
	s.t.Helper()
	code, err := c.Wait(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return code
}

// waitState waits until the current rollout's state satisfies ok.
func (s *scenario) waitState(what string, ok func(rollout.State) bool) rollout.State {
	s.t.Helper()
	st, err := s.f.WaitRollout(s.ctx, what, ok)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// stateOf reads rollout id (not necessarily the current one).
func (s *scenario) stateOf(id string) rollout.State {
	s.t.Helper()
	st, err := rollout.Get(s.ctx, s.f.Bus.Conn.JS, s.f.Bus.Names, id)
	if err != nil {
		s.t.Fatalf("read rollout %s: %v", id, err)
	}
	return st
}

// event waits for an event of kind (and, if batch > 0, of that 1-based batch) from c.
func (s *scenario) event(c *Controller, kind string, batch int) rollout.Event {
	s.t.Helper()
	e, err := c.WaitEvent(s.ctx, fmt.Sprintf("%s (batch %d)", kind, batch), func(e rollout.Event) bool {
		return e.Kind == kind && (batch == 0 || e.Batch == batch)
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return e
}

// allOn waits until every one of nodes heartbeats version running and confirmed.
func (s *scenario) allOn(nodes []string, version string) {
	s.t.Helper()
	if err := s.f.Beats.WaitAll(s.ctx, nodes, version+" running and confirmed", RunningConfirmed(version)); err != nil {
		s.t.Fatal(err)
	}
}

// targetsAfterCompletion checks what a completed rollout of version leaves in the targets
// bucket: the fleet key names it, and no per-node key of nodes remains.
func (s *scenario) targetsAfterCompletion(version string, nodes []string) {
	s.t.Helper()
	if v, ok, err := s.f.Target(s.ctx, wire.FleetTargetKey); err != nil || !ok || v != version {
		s.t.Errorf("the fleet key names %q (present %v, %v), want %s", v, ok, err, version)
	}
	for _, n := range nodes {
		if v, ok, err := s.f.Target(s.ctx, wire.NodeTargetKey(n)); err != nil || ok {
			s.t.Errorf("%s's own target is still set (%q, %v); a completed rollout deletes it", n, v, err)
		}
	}
}

// targetPut is one write of a node's target key, from the bucket's history.
type targetPut struct {
	Version  string
	Revision uint64
	Deleted  bool
}

// targetHistory is the history of node's target key (the bucket keeps the last 10 writes),
// oldest first.
func (s *scenario) targetHistory(node string) []targetPut {
	s.t.Helper()
	kv, err := s.f.Bus.Conn.JS.KeyValue(s.ctx, s.f.Bus.Names.Targets())
	if err != nil {
		s.t.Fatal(err)
	}
	entries, err := kv.History(s.ctx, wire.NodeTargetKey(node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		s.t.Fatalf("history of %s: %v", wire.NodeTargetKey(node), err)
	}
	var out []targetPut
	for _, e := range entries {
		p := targetPut{Revision: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
		if !p.Deleted {
			if t, err := wire.ParseTarget(e.Value()); err == nil {
				p.Version = t.Version
			}
		}
		out = append(out, p)
	}
	return out
}

// inBatchOrder checks, from the heartbeat history, that the batches of st went one after the
// other: every node of a batch heartbeat version running and confirmed, and no node of the next
// batch was targeted at it, fetched it or ran it before the last of them had.
func (s *scenario) inBatchOrder(st rollout.State, version string) {
	s.t.Helper()
	touched := func(b Beat) bool {
		return b.Target == version || b.Running == version || b.Fetch != nil && b.Fetch.Version == version ||
			slices.Contains(b.Staged, version)
	}
	for i := 1; i < len(st.Batches); i++ {
		var confirmed time.Time
		for _, n := range BatchNodes(st, i-1) {
			b, ok := s.f.Beats.First(func(b Beat) bool { return b.Node == n && RunningConfirmed(version)(b) })
			if !ok {
				s.t.Errorf("%s (batch %s) never heartbeat %s running and confirmed", n, st.Batches[i-1].Name, version)
				continue
			}
			confirmed = later(confirmed, b.At)
		}
		for _, n := range BatchNodes(st, i) {
			b, ok := s.f.Beats.First(func(b Beat) bool { return b.Node == n && touched(b) })
			if !ok {
				s.t.Errorf("%s (batch %s) never heard of %s", n, st.Batches[i].Name, version)
			} else if b.At.Before(confirmed) {
				s.t.Errorf("%s (batch %s) heartbeat %q at %s, before every node of batch %s had confirmed %s (the last at %s)",
					n, st.Batches[i].Name, Describe(b.Heartbeat), b.At.Format("15:04:05.000"), st.Batches[i-1].Name, version, confirmed.Format("15:04:05.000"))
			}
		}
	}
}

// touchedBy reports whether node was ever targeted at version, fetched it or staged it, from
// its heartbeats, its log and its disk.
func (s *scenario) touchedBy(node, version string) bool {
	for _, b := range s.f.Beats.Of(node) {
		if b.Target == version || b.Running == version || b.Fetch != nil && b.Fetch.Version == version || slices.Contains(b.Staged, version) {
			return true
		}
	}
	n := s.f.Node(node)
	return n.Has(version) || n.Staged(version) > 0
}

// others are the fleet's nodes not in nodes.
func (s *scenario) others(nodes []string) []string {
	return slices.DeleteFunc(s.f.Names(), func(n string) bool { return slices.Contains(nodes, n) })
}

func whys(reasons []rollout.NodeReason) string {
	var parts []string
	for _, r := range reasons {
		parts = append(parts, r.Node+" "+r.Why)
	}
	return strings.Join(parts, ", ")
}
