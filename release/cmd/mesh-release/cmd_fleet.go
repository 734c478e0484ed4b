package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

func fleetCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	asJSON := fs.Bool("json", false, "write JSON instead of a table")
	watch := fs.Bool("watch", false, "keep showing the fleet as heartbeats arrive")
	silentAfter := fs.Duration("silent-after", fleet.DefaultSilentAfter, "mark a node SILENT when unheard for this long (3× its heartbeat interval)")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if *silentAfter <= 0 {
		return usagef("--silent-after must be positive")
	}
	out := s.out
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	header := rolloutHeader(c, b)
	withdrawn := withdrawalsOf(c, b)
	render := func(judge func(fleet.RowOptions) []fleet.Row) error {
		w, rev, problem := withdrawn(ctx)
		rows := judge(fleet.RowOptions{SilentAfter: *silentAfter, Withdrawals: w, WithdrawalsRevision: rev})
		if *asJSON {
			if *watch {
				return fleet.WriteJSONLine(out, rows) // one line per render
			}
			return fleet.WriteJSON(out, rows)
		}
		if *watch && s.tty {
			fmt.Fprint(out, "\x1b[H\x1b[2J")
		} else if *watch {
			fmt.Fprintf(out, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
		}
		return fleet.WriteTextWith(out, rows, fleet.TextOptions{SilentAfter: *silentAfter, Header: header(ctx),
			Withdrawn: w.Withdrawn, WithdrawnProblem: problem})
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

// watchFleet re-renders when heartbeats arrive (at most every 250 ms) and once a second so that
// ages and silence stay current. Heartbeats are pushed by the server; nothing is polled.
func watchFleet(ctx context.Context, c *bus.Conn, b busFlags, render func(func(fleet.RowOptions) []fleet.Row) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	view := fleet.NewView()
	changed := make(chan struct{}, 1)
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- fleet.Watch(ctx, c.JS, b.names(), func(e fleet.Entry) {
			view.Update(e)
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
			if err := render(func(o fleet.RowOptions) []fleet.Row { return view.RowsWith(time.Now(), o) }); err != nil {
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
