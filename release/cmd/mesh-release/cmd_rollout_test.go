package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// `rollout --help` lists the five subcommands; each answers -h, --help and `help rollout X`
// on stdout with exit 0, naming its arguments, its flags and the exit statuses it can return.
func TestRolloutAndEachSubcommandPrintTheirHelpOnStdout(t *testing.T) {
	code, out, errOut := runMain(t, nil, "rollout", "--help")
	if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: mesh-release rollout (plan|start|resume|status|abort|watch)") {
		t.Fatalf("rollout --help: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, sub := range []string{"start VERSION", "resume", "status [ID]", "abort", "watch"} {
		if !strings.Contains(out, "\n  "+sub+" ") {
			t.Errorf("rollout --help does not list %q:\n%s", sub, out)
		}
	}
	if code, out, _ := runMain(t, nil, "--help"); code != 0 || !regexp.MustCompile(`\n  rollout +stage a release`).MatchString(out) {
		t.Errorf("mesh-release --help does not list rollout:\n%s", out)
	}
	if _, out, _ := runMain(t, nil, "target", "--help"); !strings.Contains(out, "`mesh-release rollout start VERSION`") {
		t.Errorf("target --help does not point at rollout start:\n%s", out)
	}
	for _, tc := range []struct {
		sub, usage string
		flags      []string
		exits      bool
	}{
		{"start", "usage: mesh-release rollout start [flags] VERSION\n", []string{"-canary int", "-canary-nodes ids", "-steps shares", "-window duration", "-soak duration", "-alive duration", "-silent-after duration", "-lease duration", "-policy string", "-supersede", "-follow", "-json", "-nats URL", "-creds FILE", "-prefix string"}, true},
		{"resume", "usage: mesh-release rollout resume [flags]\n", []string{"-follow", "-json", "-lease duration", "-nats URL"}, true},
		{"status", "usage: mesh-release rollout status [flags] [ID]\n", []string{"-json", "-nats URL"}, false},
		{"abort", "usage: mesh-release rollout abort [flags]\n", []string{"-nats URL"}, false},
		{"watch", "usage: mesh-release rollout watch [flags]\n", []string{"-policy string", "-canary int", "-steps shares", "-window duration", "-follow", "-json", "-lease duration"}, false},
	} {
		for _, args := range [][]string{{"rollout", tc.sub, "-h"}, {"rollout", tc.sub, "--help"}, {"help", "rollout", tc.sub}} {
			code, out, errOut := runMain(t, nil, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, tc.usage) {
				t.Errorf("%q: exit %d, stdout %.200q, stderr %q; want exit 0 and %q on stdout", args, code, out, errOut, tc.usage)
				continue
			}
			for _, f := range tc.flags {
				if !strings.Contains(out, "\n  "+f+"\n") {
					t.Errorf("%q: no flag %q in:\n%s", args, f, out)
				}
			}
			if strings.Contains(out, "-supersede") != (tc.sub == "start") {
				t.Errorf("%q: --supersede belongs to start alone:\n%s", args, out)
			}
			if tc.exits && !strings.Contains(out, "exit status: 0 completed, 1 an error (or stopped by a signal: the rollout pauses), 2 usage,\n3 halted, 4 aborted or superseded.") {
				t.Errorf("%q: the exit statuses are not said:\n%s", args, out)
			}
			if !strings.Contains(out, envNATSURL) {
				t.Errorf("%q: the help does not name %s", args, envNATSURL)
			}
		}
	}
}

// A bad subcommand, flag or argument is said once, with the --help to read, and exits 2 before
// any bus is dialled (none runs here).
func TestRolloutUsageErrorsExit2AndAreSaidOnce(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "frob"}, "mesh-release rollout: unknown subcommand \"frob\"; want plan, start, resume, status, abort or watch\nrun `mesh-release rollout --help` for usage\n"},
		{[]string{"rollout", "--bogus"}, "mesh-release rollout: flag provided but not defined: -bogus\nrun `mesh-release rollout --help` for usage\n"},
		{[]string{"rollout", "start", "v1.2.0", "--bogus"}, "mesh-release rollout start: flag provided but not defined: -bogus\nrun `mesh-release rollout start --help` for usage\n"},
		{[]string{"rollout", "start", "v1.2.0", "v1.3.0"}, "mesh-release rollout start: want VERSION, got 2 arguments\n"},
		{[]string{"rollout", "start", "1.2.0"}, "mesh-release rollout start: \"1.2.0\" is not a version; want vX.Y.Z\n"},
		{[]string{"rollout", "start", "v1.2.0", "--steps", "10%,50%"}, "mesh-release rollout start: --steps: the last step is 50%; it must be 100% so that the rollout reaches every node\n"},
		{[]string{"rollout", "start", "v1.2.0", "--steps", "50%,x,100%"}, "mesh-release rollout start: --steps: step \"x\" is not a whole percentage like 10%\n"},
		{[]string{"rollout", "start", "v1.2.0", "--policy", "yolo"}, "mesh-release rollout start: --policy \"yolo\": want canary or immediate\n"},
		{[]string{"rollout", "start", "v1.2.0", "--canary", "1", "--canary-nodes", "a"}, "mesh-release rollout start: give --canary N or --canary-nodes a,b, not both\n"},
		{[]string{"rollout", "start", "v1.2.0", "--canary-nodes", "a,b.c"}, "mesh-release rollout start: --canary-nodes: node id \"b.c\""},
		{[]string{"rollout", "start", "v1.2.0", "--window", "0s"}, "mesh-release rollout start: --window is 0s; it must be positive\n"},
		{[]string{"rollout", "start", "v1.2.0", "--canary", "0"}, "mesh-release rollout start: --canary is 0; it must be at least 1 (or name the canaries with --canary-nodes)\n"},
		{[]string{"rollout", "resume", "now"}, "mesh-release rollout resume: unexpected argument [\"now\"]; this command takes flags only\n"},
		{[]string{"rollout", "resume", "--lease", "0s"}, "mesh-release rollout resume: --lease is 0s; it must be positive\n"},
		{[]string{"rollout", "status", "a", "b"}, "mesh-release rollout status: want at most one rollout ID, got 2 arguments\n"},
		{[]string{"rollout", "abort", "now"}, "mesh-release rollout abort: unexpected argument"},
		{[]string{"rollout", "watch", "v1.2.0"}, "mesh-release rollout watch: unexpected argument"},
		{[]string{"rollout", "watch", "--soak", "-1s"}, "mesh-release rollout watch: --soak is -1s; it must be positive\n"},
		{[]string{"rollout", "start", "v1.2.0", "--key", "k", "--target-ttl", "10s"}, "mesh-release rollout start: --target-ttl 10s: want between 1m0s and"},
	} {
		code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, tc.args...)
		hint := "\nrun `mesh-release " + strings.Join(tc.args[:2], " ") + " --help` for usage\n"
		if tc.args[1] == "frob" || tc.args[1] == "--bogus" {
			hint = "\nrun `mesh-release rollout --help` for usage\n"
		}
		if code != 2 || out != "" || !strings.HasPrefix(errOut, tc.want) || strings.Count(errOut, "\n") != 2 || !strings.HasSuffix(errOut, hint) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q once, then %q", tc.args, code, out, errOut, tc.want, hint)
		}
	}
	// Alone, rollout and rollout start show their whole usage on stderr.
	for _, args := range [][]string{{"rollout"}, {"rollout", "start"}} {
		code, out, errOut := runMain(t, nil, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: mesh-release "+strings.Join(args, " ")) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", args, code, out, errOut)
		}
	}
}

// simNode is a host as the bus sees it, light enough for a test to run a fleet of: it
// heartbeats every 50 ms and runs the version the targets bucket names for it (its own key,
// else the fleet key) — unless that version is in crash, when it rolls back at once and
// reports it with the failed version's output, as a launcher does — or, when stuck, never
// takes a target at all. Its uptime is its own clock since it last started a version.
type simNode struct {
	id    string
	crash map[string]bool
	mu    sync.Mutex
	stuck bool
}

func (n *simNode) setStuck(v bool) { n.mu.Lock(); n.stuck = v; n.mu.Unlock() }

// simulate runs node on c until the test ends, starting on version running (its known good).
func simulate(t *testing.T, c *bus.Conn, node, running string, crash ...string) *simNode {
	t.Helper()
	n := &simNode{id: node, crash: map[string]bool{}}
	for _, v := range crash {
		n.crash[v] = true
	}
	names := wire.NamesFor("")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	kv, err := c.JS.KeyValue(ctx, names.Targets())
	if err != nil {
		t.Fatal(err)
	}
	publish := func(hb wire.Heartbeat) {
		hb.Node, hb.SentAt = node, time.Now().UTC()
		c.JS.Publish(ctx, names.Heartbeat(node), hb.Marshal())
	}
	hb := wire.Heartbeat{State: wire.StateRunning, Running: running, KnownGood: running}
	started := time.Now().Add(-100 * time.Second)
	hb.UptimeS = 100
	publish(hb) // heard before the test starts a rollout
	go func() {
		defer close(done)
		tried := map[string]bool{}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			target := ""
			for _, key := range []string{wire.NodeTargetKey(node), wire.FleetTargetKey} {
				if e, err := kv.Get(ctx, key); err == nil {
					// As a host does: a target that does not verify for its key is refused.
					if tg, err := wire.ParseTarget(e.Value()); err == nil && tg.Verify(key, wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now()) == nil {
						target = tg.Version
						break
					}
				}
			}
			n.mu.Lock()
			stuck := n.stuck
			n.mu.Unlock()
			hb.Target = target
			if target != "" && target != hb.Running && !tried[target] && !stuck {
				tried[target] = true
				now := time.Now().UTC()
				if n.crash[target] {
					hb.Rollbacks = append(hb.Rollbacks, wire.Rollback{From: target, To: hb.Running, At: now,
						Reason: "exited 3 times within 10s (exit status 2)", Output: "starting " + target + "\npanic: boom\n"})
				} else {
					hb.Running, hb.KnownGood, started = target, target, now
				}
			}
			hb.UptimeS = int64(time.Since(started) / time.Second)
			publish(hb)
		}
	}()
	return n
}

// lastingConn is a connection of the test's own that outlives the bus restarting.
func lastingConn(t *testing.T, url string) *bus.Conn {
	t.Helper()
	c, err := bus.Connect(context.Background(), url, "", bus.Lasting(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// fleetOf publishes v1.1.0 and v1.2.0 and runs nodes n1…nN on v1.1.0, those named in crashing
// rolling v1.2.0 back.
func fleetOf(t *testing.T, c *bus.Conn, n int, crashing ...string) map[string]*simNode {
	t.Helper()
	announce(t, c, "v1.1.0")
	announce(t, c, "v1.2.0")
	nodes := map[string]*simNode{}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%d", i)
		var crash []string
		if slices.Contains(crashing, id) {
			crash = []string{"v1.2.0"}
		}
		nodes[id] = simulate(t, c, id, "v1.1.0", crash...)
	}
	return nodes
}

// fastRollout are flags that make a rollout of a simulated fleet take a few seconds, and the
// test release key that signs its targets.
func fastRollout(t *testing.T) []string {
	return []string{"--soak", "1s", "--window", "20s", "--silent-after", "5s", "--lease", "3s", "--key", keyFile(t)}
}

// background is a command line run in the background with its own context, as a person runs a
// controller in another terminal.
type background struct {
	t      *testing.T
	args   []string
	cancel context.CancelFunc
	codec  chan int
	code   int
	ended  bool
	o, e   meshtest.Buffer
}

func started(t *testing.T, env map[string]string, args ...string) *background {
	t.Helper()
	b := &background{t: t, args: args, codec: make(chan int, 1)}
	s := &stdio{in: strings.NewReader(""), out: &b.o, err: &b.e, getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { b.codec <- run(ctx, s, args) }()
	t.Cleanup(func() { b.stop() })
	return b
}

// wait waits for the command to end by itself and returns its exit status and output.
func (b *background) wait() (code int, stdout, stderr string) {
	b.t.Helper()
	if !b.ended {
		select {
		case b.code = <-b.codec:
			b.ended = true
		case <-time.After(30 * time.Second):
			b.t.Fatalf("%q did not end within 30s; stdout:\n%s\nstderr:\n%s", b.args, b.o.String(), b.e.String())
		}
	}
	return b.code, b.o.String(), b.e.String()
}

// stop signals the command (its context ends, as main's does on SIGINT) and waits for it.
func (b *background) stop() (code int, stdout, stderr string) {
	b.t.Helper()
	b.cancel()
	return b.wait()
}

// waitStatus waits until the current rollout satisfies ok and returns it.
func waitStatus(t *testing.T, c *bus.Conn, what string, ok func(rollout.State) bool) rollout.State {
	t.Helper()
	var st rollout.State
	meshtest.Eventually(t, what, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var found bool
		var err error
		st, found, err = rollout.Current(ctx, c.JS, wire.NamesFor(""))
		return err == nil && found && ok(st)
	})
	return st
}

// The good path, for a machine: `rollout start --json` on a fleet that confirms exits 0,
// every line of stdout is an event, they say the rollout started, its batches and its end, and
// the bus is left as the contract says: the fleet key names the version, no node key is left.
func TestRolloutStartJSONDrivesAGoodReleaseToEveryNodeAndExits0(t *testing.T) {
	url, c := startServeConnected(t)
	fleetOf(t, c, 3)
	env := map[string]string{envNATSURL: url}
	code, out, errOut := runMain(t, env, append([]string{"rollout", "start", "v1.2.0", "--json", "--canary", "1", "--steps", "100%"}, fastRollout(t)...)...)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", code, errOut, out)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var e rollout.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("a line of stdout is not an event: %v: %q", err, line)
		}
		if e.Version != "v1.2.0" || e.Rollout == "" || e.Message == "" || e.Time.IsZero() {
			t.Errorf("an event without its version, rollout, message or time: %q", line)
		}
		kinds = append(kinds, e.Kind)
	}
	for _, want := range []string{rollout.EventStarted, rollout.EventBatch, rollout.EventBatchDone, rollout.EventCompleted} {
		if !slices.Contains(kinds, want) {
			t.Errorf("no %q event among %q", want, kinds)
		}
	}
	if slices.Contains(kinds, rollout.EventProgress) || slices.Contains(kinds, rollout.EventConfirmed) {
		t.Errorf("progress or per-node events without --follow: %q", kinds)
	}
	if kinds[len(kinds)-1] != rollout.EventCompleted {
		t.Errorf("the last event is %q, want completed", kinds[len(kinds)-1])
	}
	kv, err := c.JS.KeyValue(context.Background(), wire.NamesFor("").Targets())
	if err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(context.Background(), wire.FleetTargetKey); err != nil || !strings.Contains(string(e.Value()), "v1.2.0") {
		t.Errorf("the fleet key after completion: %v", err)
	}
	for _, node := range []string{"n1", "n2", "n3"} {
		if _, err := kv.Get(context.Background(), wire.NodeTargetKey(node)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s's own target is left after completion: %v", node, err)
		}
	}
	// status says so, in text and JSON.
	code, out, _ = runMain(t, env, "rollout", "status")
	if code != 0 || !regexp.MustCompile(`(?m)^  status +completed: the fleet target is v1\.2\.0$`).MatchString(out) {
		t.Errorf("status after completion: exit %d:\n%s", code, out)
	}
}

// The bad path: a canary rolls the release back; the rollout halts in the canary batch
// (exit 3), the report names each node and why with the failed version's output, no other node
// was ever targeted, and `rollout status` (text and JSON) says the same afterwards.
func TestRolloutStartHaltsOnARollbackExits3AndNamesTheNodeAndWhy(t *testing.T) {
	url, c := startServeConnected(t)
	fleetOf(t, c, 4, "n1")
	env := map[string]string{envNATSURL: url}
	code, out, errOut := runMain(t, env, append([]string{"rollout", "start", "v1.2.0", "--canary-nodes", "n1,n2", "--steps", "50%,100%"}, fastRollout(t)...)...)
	if code != 3 {
		t.Fatalf("exit %d, want 3 (halted); stderr:\n%s\nstdout:\n%s", code, errOut, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\d\d:\d\d:\d\d .*HALTED in batch 1/\d \(canary\)`),
		regexp.MustCompile(`(?m)^  n1: rolled back from v1\.2\.0 to v1\.1\.0 .*exited 3 times within 10s \(exit status 2\)$`),
		regexp.MustCompile(`(?m)^      \| panic: boom$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("stdout does not match %s:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("a halt is said on stdout, not stderr: %q", errOut)
	}
	kv, _ := c.JS.KeyValue(context.Background(), wire.NamesFor("").Targets())
	for _, node := range []string{"n3", "n4"} {
		if e, err := kv.Get(context.Background(), wire.NodeTargetKey(node)); err == nil {
			t.Errorf("%s, outside the canary batch, was targeted: %s", node, e.Value())
		}
	}
	if e, err := kv.Get(context.Background(), wire.FleetTargetKey); err == nil && strings.Contains(string(e.Value()), "v1.2.0") {
		t.Errorf("a halted version became the fleet target")
	}

	code, out, _ = runMain(t, env, "rollout", "status")
	if code != 0 || !regexp.MustCompile(`(?m)^  status +HALTED in batch 1/2 \(canary\) at `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  n1: rolled back from v1\.2\.0 to v1\.1\.0`).MatchString(out) || !strings.Contains(out, "| panic: boom") {
		t.Errorf("status after a halt: exit %d:\n%s", code, out)
	}
	code, out, _ = runMain(t, env, "rollout", "status", "--json")
	var st rollout.State
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.Status != rollout.StatusHalted || st.Halt == nil ||
		len(st.Halt.Nodes) != 1 || st.Halt.Nodes[0].Node != "n1" || st.Halt.Nodes[0].Why != rollout.WhyRolledBack {
		t.Errorf("status --json after a halt: exit %d, %v:\n%s", code, err, out)
	}
	if code, out2, _ := runMain(t, env, "rollout", "status", st.ID); code != 0 || !strings.HasPrefix(out2, "rollout "+st.ID+"\n") {
		t.Errorf("status %s: exit %d:\n%s", st.ID, code, out2)
	}
	// Nothing runs, so there is nothing to resume or abort: exit 1, saying why.
	for _, sub := range []string{"resume", "abort"} {
		if code, out, errOut := runMain(t, env, "rollout", sub, "--key", keyFile(t)); code != 1 || out != "" || !strings.Contains(errOut, "halted") {
			t.Errorf("%s after a halt: exit %d, stdout %q, stderr %q; want exit 1 saying it halted", sub, code, out, errOut)
		}
	}
}

// One controller at a time: while `rollout start` drives a batch, `rollout resume` elsewhere
// exits 1 naming the holder; `rollout abort` stops it (the controller exits 4) and says what it
// set back.
func TestRolloutAbortStopsTheControllerWhichExits4AndAResumeIsRefusedWhileItHolds(t *testing.T) {
	url, c := startServeConnected(t)
	nodes := fleetOf(t, c, 3)
	nodes["n1"].setStuck(true) // never confirms: the canary batch waits
	env := map[string]string{envNATSURL: url, "USER": "ann"}
	ctl := started(t, env, append([]string{"rollout", "start", "v1.2.0", "--canary-nodes", "n1", "--steps", "100%"}, fastRollout(t)...)...)
	st := waitStatus(t, c, "the canary batch to begin", func(st rollout.State) bool {
		return len(st.Batches) > 0 && !st.Batches[0].Started.IsZero()
	})

	code, out, errOut := runMain(t, env, "rollout", "resume", "--key", keyFile(t))
	if code != 1 || out != "" || !strings.Contains(errOut, "mesh-release rollout resume: ") || !strings.Contains(errOut, st.Holder.Host) {
		t.Errorf("resume while held: exit %d, stdout %q, stderr %q; want exit 1 naming the holder %+v", code, out, errOut, st.Holder)
	}
	if code, out, _ := runMain(t, env, "rollout", "status"); code != 0 || !regexp.MustCompile(`(?m)^  controller +`+regexp.QuoteMeta(st.Holder.ID)+`, lease until `).MatchString(out) || !strings.Contains(out, "in progress since") {
		t.Errorf("status while it runs: exit %d:\n%s", code, out)
	}

	code, out, errOut = runMain(t, env, "rollout", "abort", "--key", keyFile(t))
	if code != 0 || !regexp.MustCompile(`^rollout v1\.2\.0: aborted by ann@\S+ in batch 1/2 \(canary\) at \d\d:\d\d\nThe targets of batch 1/2 \(canary\) (were|are being) set back.*: n1 to v1\.1\.0\.\n$`).MatchString(out) {
		t.Errorf("abort: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The controller notices by itself, and says so.
	if code, out, errOut := ctl.wait(); code != 4 || !strings.Contains(out, "ABORTED") {
		t.Errorf("the controller of an aborted rollout: exit %d, want 4 saying it was aborted; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// A controller stopped by a signal pauses the rollout: it exits 1 saying how to continue, and
// `rollout resume` (here at once: the lease was released) drives it to the end.
func TestRolloutStoppedBySignalPausesAndResumeCompletesIt(t *testing.T) {
	url, c := startServeConnected(t)
	nodes := fleetOf(t, c, 3)
	nodes["n1"].setStuck(true)
	env := map[string]string{envNATSURL: url}
	ctl := started(t, env, append([]string{"rollout", "start", "v1.2.0", "--canary-nodes", "n1", "--steps", "100%", "--follow"}, fastRollout(t)...)...)
	st := waitStatus(t, c, "the canary batch to begin", func(st rollout.State) bool {
		return len(st.Batches) > 0 && !st.Batches[0].Started.IsZero()
	})
	code, out, errOut := ctl.stop()
	want := "mesh-release rollout start: stopped by a signal: rollout " + st.ID + " is paused (nodes already targeted carry on); `mesh-release rollout resume` continues it\n"
	if code != 1 || errOut != want {
		t.Fatalf("stopped: exit %d, stderr %q; want exit 1 and %q; stdout:\n%s", code, errOut, want, out)
	}
	nodes["n1"].setStuck(false)
	code, out, errOut = runMain(t, env, "rollout", "resume", "--key", keyFile(t))
	if code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("resume: exit %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// With no rollout ever started, status, resume and abort say so and exit 1.
func TestRolloutCommandsSayWhenNoRolloutWasEverStarted(t *testing.T) {
	url, _ := startServeConnected(t)
	for _, args := range [][]string{{"status"}, {"resume", "--key", keyFile(t)}, {"abort", "--key", keyFile(t)}} {
		sub := args[0]
		code, out, errOut := runMain(t, map[string]string{envNATSURL: url}, append([]string{"rollout"}, args...)...)
		if want := "mesh-release rollout " + sub + ": no rollout has been started on this bus\n"; code != 1 || out != "" || errOut != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", sub, code, out, errOut, want)
		}
	}
}

// Fleet upgrade by build announcement: `rollout watch` rolls out the newest published release
// as soon as it runs (--follow adds each node's confirmation), carries on watching, and a
// signal ends it with exit 0.
func TestRolloutWatchRollsOutThePublishedReleaseAndASignalEndsItWithExit0(t *testing.T) {
	url, c := startServeConnected(t)
	fleetOf(t, c, 3)
	env := map[string]string{envNATSURL: url}
	w := started(t, env, append([]string{"rollout", "watch", "--json", "--follow", "--canary", "1", "--steps", "100%"}, fastRollout(t)...)...)
	waitStatus(t, c, "v1.2.0 to complete", func(st rollout.State) bool { return st.Version == "v1.2.0" && st.Status == rollout.StatusCompleted })
	code, out, errOut := w.stop()
	if code != 0 {
		t.Fatalf("watch stopped by a signal: exit %d, want 0; stderr:\n%s", code, errOut)
	}
	confirmed := 0
	var kinds []string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var e rollout.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("a line of stdout is not an event: %v: %q", err, line)
		}
		kinds = append(kinds, e.Kind)
		if e.Kind == rollout.EventConfirmed {
			confirmed++
		}
	}
	if !slices.Contains(kinds, rollout.EventCompleted) || confirmed != 3 {
		t.Errorf("watch --follow printed %q (%d confirmed); want the rollout to completion and each of 3 nodes confirming", kinds, confirmed)
	}
}

// The scenario 7 as the command sees it: the NATS server restarts (JetStream on disk)
// while `rollout start` waits on a batch; the controller carries on by itself and completes.
func TestRolloutStartCarriesOnAcrossANATSServerRestart(t *testing.T) {
	b := meshtest.StartBus(t)
	c := lastingConn(t, b.URL())
	nodes := fleetOf(t, c, 2)
	nodes["n1"].setStuck(true)
	env := map[string]string{envNATSURL: b.URL()}
	ctl := started(t, env, append([]string{"rollout", "start", "v1.2.0", "--canary-nodes", "n1", "--steps", "100%"}, fastRollout(t)...)...)
	waitStatus(t, c, "the canary batch to begin", func(st rollout.State) bool {
		return len(st.Batches) > 0 && !st.Batches[0].Started.IsZero()
	})
	b.Stop()
	b.Start()
	nodes["n1"].setStuck(false)
	code, out, errOut := ctl.wait()
	if code != 0 || !strings.Contains(out, "completed") {
		t.Errorf("across a restart: exit %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "lost the bus; reconnecting") || !strings.Contains(errOut, "back on the bus") {
		t.Errorf("the outage was not said on stderr:\n%s", errOut)
	}
}
