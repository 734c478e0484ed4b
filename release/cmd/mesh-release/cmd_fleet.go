package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/buslayout"
)

func fleetCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	asJSON := fs.Bool("json", false, "write JSON instead of a table")
	watch := fs.Bool("watch", false, "keep showing the fleet as heartbeats arrive")
	silentAfter := fs.Duration("silent-after", fleet.DefaultSilentAfter, "mark a node SILENT when unheard for this long (3× its heartbeat interval)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("one NODE at most, got %d arguments", len(pos))
	}
	if *silentAfter <= 0 {
		return usagef("--silent-after must be positive")
	}
	node := ""
	if len(pos) == 1 {
		node = pos[0]
		if err := wire.ValidNode(node); err != nil {
			return usagef("NODE %s: %v", text.Bound(node), err)
		}
	}
	out := s.out
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	withdrawn := withdrawalsOf(c, b)
	roots := rootsOf(c, b)
	if node != "" {
		return fleetNode(ctx, s, c, b, node, *asJSON, *watch, *silentAfter, withdrawn, roots)
	}
	header := rolloutHeader(c, b)
	render := func(judge func(fleet.RowOptions) []fleet.Row) error {
		w, rev, problem := withdrawn(ctx)
		root, rootProblem := roots(ctx)
		rows := judge(fleet.RowOptions{SilentAfter: *silentAfter, Withdrawals: w, WithdrawalsRevision: rev, TrustRoot: root})
		if *asJSON {
			if *watch {
				return fleet.WriteJSONLine(out, rows) // one line per render
			}
			return fleet.WriteJSON(out, rows)
		}
		if *watch {
			redraw(s)
		}
		return fleet.WriteTextWith(out, rows, fleet.TextOptions{SilentAfter: *silentAfter, Header: header(ctx),
			Withdrawn: w.Withdrawn, WithdrawnProblem: problem, TrustRoot: root, TrustProblem: rootProblem})
	}
	if !*watch {
		es, err := fleet.Read(ctx, c.JS, b.names())
		if err != nil {
			return err
		}
		return render(func(o fleet.RowOptions) []fleet.Row { return fleet.RowsWith(es, time.Now(), o) })
	}
	return watchFleet(ctx, c, b, render)
}

// redraw starts a --watch render: on a terminal the cursor home and the screen cleared, so the
// render replaces the last one in place; otherwise (a pipe, a file) a line with the time, so
// renders are appended, each one marked.
func redraw(s *stdio) {
	if s.tty {
		fmt.Fprint(s.out, clearScreen)
		return
	}
	fmt.Fprintf(s.out, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
}

// clearScreen is ANSI's cursor home (CSI H) and erase display (CSI 2J).
const clearScreen = "\x1b[H\x1b[2J"

// watchFleet re-renders when heartbeats arrive (at most every 250 ms) and once a second so that
// ages and silence stay current. Heartbeats are pushed by the server; nothing is polled.
func watchFleet(ctx context.Context, c *bus.Conn, b busFlags, render func(func(fleet.RowOptions) []fleet.Row) error) error {
	view := fleet.NewView()
	return watchRendering(ctx, func(ctx context.Context, changed func(), ready func()) error {
		return fleet.Watch(ctx, c.JS, b.names(), func(e fleet.Entry) {
			view.Update(e)
			changed()
		}, ready)
	}, func() error {
		return render(func(o fleet.RowOptions) []fleet.Row { return view.RowsWith(time.Now(), o) })
	})
}

// watchRendering runs follow (which calls changed on news and ready once caught up) and calls
// render once follow is ready, then on news (at most every 250 ms) and once a second.
func watchRendering(ctx context.Context, follow func(ctx context.Context, changed func(), ready func()) error, render func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- follow(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}, func() { close(ready) })
	}()
	select {
	case <-ready:
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := time.Time{}
	for {
		if time.Since(last) >= 250*time.Millisecond {
			if err := render(); err != nil {
				return err
			}
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-changed:
			if wait := 250*time.Millisecond - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return nil
				}
			}
		case <-tick.C:
		}
	}
}

// fleetNode prints node's story (`fleet NODE`): from its last heartbeat, or with --watch,
// again as each heartbeat arrives, with the heartbeats seen listed.
func fleetNode(ctx context.Context, s *stdio, c *bus.Conn, b busFlags, node string, asJSON, watch bool, silentAfter time.Duration,
	withdrawn func(context.Context) (wire.Withdrawals, uint64, string), roots func(context.Context) (uint64, string)) error {
	n := b.names()
	story := func(e fleet.Entry, beats []fleet.Beat) fleet.Story {
		w, rev, _ := withdrawn(ctx)
		root, _ := roots(ctx)
		st := fleet.StoryOf(e, time.Now(), fleet.RowOptions{SilentAfter: silentAfter, Withdrawals: w, WithdrawalsRevision: rev, TrustRoot: root})
		st.Heard = beats
		return st
	}
	if !watch {
		e, ok, err := fleet.Last(ctx, c.JS, n, node)
		if err != nil {
			return err
		}
		if !ok {
			return notHeardError(node, n)
		}
		if asJSON {
			return fleet.WriteStoryJSON(s.out, story(e, nil), false)
		}
		return fleet.WriteStory(s.out, story(e, nil), time.Now())
	}
	var (
		mu    sync.Mutex
		last  fleet.Entry
		heard bool
		beats []fleet.Beat
	)
	return watchRendering(ctx, func(ctx context.Context, changed func(), ready func()) error {
		return fleet.WatchNode(ctx, c.JS, n, node, func(e fleet.Entry) {
			mu.Lock()
			if !heard || !e.Heard.Before(last.Heard) {
				last, heard = e, true
				row := fleet.RowsWith([]fleet.Entry{e}, time.Now(), fleet.RowOptions{SilentAfter: silentAfter})[0]
				beats = append(beats, fleet.BeatOf(row))
				if len(beats) > fleet.MaxHeard {
					beats = beats[len(beats)-fleet.MaxHeard:]
				}
			}
			mu.Unlock()
			changed()
		}, ready)
	}, func() error {
		mu.Lock()
		e, ok, bs := last, heard, slices.Clone(beats)
		mu.Unlock()
		if asJSON {
			if !ok {
				return nil // nothing heard yet: no line until there is
			}
			return fleet.WriteStoryJSON(s.out, story(e, bs), true)
		}
		redraw(s)
		if !ok {
			_, err := fmt.Fprintf(s.out, "node %s: no heartbeat in %s yet; waiting for its first\n", node, n.HeartbeatStream())
			return err
		}
		return fleet.WriteStory(s.out, story(e, bs), time.Now())
	})
}

// notHeardError says that node has no heartbeat on this bus.
func notHeardError(node string, n wire.Names) error {
	return fmt.Errorf("fleet: node %s has no heartbeat in %s: it never heartbeated on this bus, or not within %d days; `mesh-release fleet` lists the nodes heard",
		node, n.HeartbeatStream(), buslayout.HeartbeatMaxAge/(24*time.Hour))
}

// rolloutHeader returns what the table's top line says about the current rollout: its summary
// while it runs or once it has halted (a halt stays on top until the next rollout, as it needs a
// person), nothing otherwise. It reads the bus at most once a second, so --watch stays light.
func rolloutHeader(c *bus.Conn, b busFlags) func(context.Context) string {
	var line string
	var read time.Time
	return func(ctx context.Context) string {
		if time.Since(read) < time.Second {
			return line
		}
		read = time.Now()
		st, ok, err := rollout.Current(ctx, c.JS, b.names())
		switch {
		case err != nil:
			line = "rollout: could not be read: " + err.Error() // bounded and made printable by the table
		case ok && (st.Status == rollout.StatusRunning || st.Status == rollout.StatusHalted):
			line = rollout.Summary(st, time.Now())
		default:
			line = ""
		}
		return line
	}
}

// withdrawalsOf returns a reader of the withdrawal list on the bus: the list, its revision and,
// when it could not be read, why. It reads at most once a second, so --watch stays light. A bus
// without the bucket (set up before withdrawals) has withdrawn nothing.
func withdrawalsOf(c *bus.Conn, b busFlags) func(context.Context) (wire.Withdrawals, uint64, string) {
	var (
		list    wire.Withdrawals
		rev     uint64
		problem string
		read    time.Time
	)
	return func(ctx context.Context) (wire.Withdrawals, uint64, string) {
		if time.Since(read) < time.Second {
			return list, rev, problem
		}
		read = time.Now()
		l, r, err := targets.ReadWithdrawals(ctx, c.JS, b.names())
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound):
			list, rev, problem = wire.Withdrawals{}, 0, ""
		case err != nil:
			problem = err.Error() // the last list read stays in use
		default:
			list, rev, problem = l, r, ""
		}
		return list, rev, problem
	}
}

// rootsOf returns a reader of the newest root on the bus (fleet.RootReader): its version (0:
// none) and, when the roots could not be read or the next is refused, why. It reads at most once
// a second, so --watch stays light; a root that cannot be read keeps the last one read.
func rootsOf(c *bus.Conn, b busFlags) func(context.Context) (uint64, string) {
	var (
		rr      fleet.RootReader
		root    uint64
		problem string
		read    time.Time
	)
	return func(ctx context.Context) (uint64, string) {
		if time.Since(read) < time.Second {
			return root, problem
		}
		read = time.Now()
		v, refused, err := rr.Newest(ctx, c.JS, b.names())
		root, problem = v, refused
		if err != nil {
			problem = "the roots could not be read: " + err.Error()
		}
		return root, problem
	}
}

const fleetAbout = `Without NODE, a table: every node's PLATFORM (linux/arm64, from its heartbeat), STATE (what it is
doing, judged from its last heartbeat; SILENT when unheard for --silent-after), versions,
launcher, last heard and last reconcile, the current rollout and the withdrawn versions above it,
a mixed fleet's nodes counted by platform below, and, once roots are on the bus, each node's TRUST
(its root, behind the newest, expired) and a trust line counting them. With NODE, that node's
whole story from its last heartbeat: its platform, trust, versions, launcher, last reconcile,
fetch progress, refusal, link failure, rollbacks with the failed version's last output, drift,
profile, inventory, and a timeline of what the heartbeat dates (the stream keeps each node's last
heartbeat only; --watch adds each heartbeat as it arrives). --json writes the same as JSON.
--watch redraws in place on a terminal, and appends each render after a line with the time
otherwise (one JSON line each with --json). Exit 1 when NODE has no heartbeat on the bus.`
