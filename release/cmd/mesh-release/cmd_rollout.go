package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/rollout"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Exit statuses of `rollout start`, `resume` and `watch` beyond the common ones
// (docs/decisions/0006, "Output").
const (
	exitHalted  = 3 // a node showed trouble; the report names each node and why
	exitStopped = 4 // aborted by an operator, or superseded by a newer rollout
)

// progressEvery is how often --follow looks at the batch's progress: a line when it changed,
// else one every 5 of these (rollout.Config.Progress).
const progressEvery = 2 * time.Second

const rolloutArgs = "(plan|start|resume|status|abort|watch) [flags] [arguments]"

const rolloutAbout = `A rollout stages a published release across the fleet: canaries first, then growing
batches, each waiting until its nodes run the release confirmed and keep running it; only then
the fleet target. It halts by itself when a node of a batch goes silent, rolls back, restarts,
refuses the release or does not confirm it in time, sets that batch's targets back, and says
which nodes and why. Its state is kept on the bus (KV <prefix>_rollouts), so a controller
stopped at any point is continued by ` + "`rollout resume`" + ` (docs/decisions/0006).

subcommands:
  plan VERSION   print which nodes each batch of a rollout of VERSION would hold; write nothing
  start VERSION  start a rollout of VERSION and drive it to the end (this process is the controller)
  resume         continue the current rollout where it stopped
  status [ID]    show the current rollout (or rollout ID): batches, nodes, why it halted
  abort          stop the current rollout and set its batch in progress back
  watch          roll out each newly published release (fleet upgrade by build announcement)

Run ` + "`mesh-release rollout <subcommand> --help`" + ` for its flags.`

const exitsAbout = `
exit status: 0 completed, 1 an error (or stopped by a signal: the rollout pauses), 2 usage,
3 halted, 4 aborted or superseded.`

const driveAbout = `

Every target it writes is signed with --key (the release key, or a target key the hosts trust)
and valid for --target-ttl; while it runs it signs again, before they expire, all targets of
that key with less than half of --target-ttl left.

This process is the controller: it prints each milestone (a batch begun and done, a node left
out, the halt and its reasons, the end); --follow adds each node's confirmation and soak, and a
progress line — the time left in the window or the soak, and whose heartbeat it waits for once a
soak is over — when that changes, else every 10s; --json writes the same as one JSON event per
line. Stopped by a signal (Ctrl-C,
SIGTERM) it stops driving and releases its lease: the rollout pauses (nodes already targeted
carry on) and ` + "`mesh-release rollout resume`" + ` continues it; that exits 1, so that a script
waiting for the rollout does not take a pause for its end.`

const startAbout = `VERSION (vX.Y.Z) must be published and not withdrawn. The fleet is every node heard from
within --alive, except nodes whose known-good is already VERSION or newer. Canaries go first
(--canary-nodes, else --canary nodes chosen by sha256(VERSION/node), the same on every run):
at least one node of every platform the rollout targets (--canary below their number is
refused; by default it is raised to it), then nodes of OS versions and kernels no canary runs yet;
then each --steps share of the fleet. A version with no build for the platform of a node it
would target (its heartbeat's machine profile), or of manifest schema 4 while a node's host
cannot read it, is refused, naming the platforms and how many nodes each, unless those nodes are
left out explicitly with --skip-platform (--skip-old-hosts); status reports them as left out. A batch's nodes get their own target and must
run VERSION confirmed within --window, then keep it for --soak without restarting; after the
last batch the fleet target is set to VERSION and the nodes' own targets are removed. A node
that goes silent, rolls back, restarts, refuses VERSION or does not confirm halts the rollout
at once: its batch's targets are set back to what each node ran, the fleet target is
untouched, and the report names each node and why. A node silent for --silent-after when its
batch begins is left out. A rollout already running is refused unless --supersede. --policy
immediate sets the fleet target at once (for labs). Nodes whose hosts read rollout plans are
told by one signed plan that each evaluates for itself (one write per batch; --salt orders
them; ` + "`rollout plan`" + ` prints the batches beforehand, and start prints them again).` + driveAbout + "\n" + exitsAbout

const planAbout = `Plans a rollout of VERSION as ` + "`rollout start`" + ` with the same flags would, from the
heartbeats on the bus now, and prints which nodes each batch will hold; nothing is written, and
no key is needed. The plan is deterministic: the same fleet, flags and --salt give the same
batches, and start prints them again. A rollout to hosts that read plans (their heartbeats say
plans) is one signed plan on the bus that each node evaluates for itself (decision 0047): the
canaries by id, then each --steps share as a wave of the hash of --salt and the node id
(docs/wire.md "Rollout plan"), so a batch holds about its share of the fleet, not exactly; hosts
that do not read plans are listed as getting a target of their own. --json writes the planned
state.`

const resumeAbout = `Continues the current rollout where it stopped, never repeating a finished batch nor
skipping a pending one (a batch in progress starts its soak again). Another controller that
still holds its lease is named, with when its lease ends (exit 1); one on this host whose
process is gone is taken over at once. A halted or aborted rollout whose targets were not yet
set back is set back.` + driveAbout + "\n" + exitsAbout

const statusAbout = `Shows the current rollout, or the one named ID (like 20261129T131200Z-v1.2.0, as its events
print it): its status and controller, what it was asked, each batch and its nodes (by
platform), the nodes left out (silent, or by platform), and for a halt how each platform fared
and each node and why, with the last lines of a rolled-back version's output. --json writes the
stored state. Exits 1 when no rollout was ever started on the bus.`

const abortAbout = `Marks the current rollout aborted (by "<user>@<host>") and sets the targets of its batch in
progress back to what each node ran, signed with --key; the controller driving it stops at its
next step. Nodes that already run the release keep it. Exits 1, saying why, when no rollout
runs.`

const watchAbout = `Fleet upgrade by build announcement: follows the releases published on the bus and, for
each version newer than the fleet target and every completed rollout, starts a rollout of it
with these flags (superseding a running rollout of an older version). A version that halted,
was aborted or is withdrawn (` + "`mesh-release withdraw`" + `) is skipped, saying so. On start it
resumes the current rollout if its controller is gone, and considers the newest published
version that is not withdrawn. It prints what start prints, for each rollout, and runs until
stopped by a signal (exit 0; a rollout it drives pauses, and the next
` + "`rollout watch` or `rollout resume`" + ` continues it).`

// rolloutCommands are the subcommands of `mesh-release rollout`; each answers as a command
// does (its own --help, usage errors and exit statuses).
var rolloutCommands = []command{
	{"rollout plan", "VERSION", "print which nodes each batch of a rollout of VERSION would hold", planAbout, rolloutPlanCmd},
	{"rollout start", "VERSION", "start a staged rollout of VERSION and drive it to the end", startAbout, rolloutStartCmd},
	{"rollout resume", "", "continue the current rollout where it stopped", resumeAbout, rolloutResumeCmd},
	{"rollout status", "[ID]", "show the current rollout (or rollout ID)", statusAbout, rolloutStatusCmd},
	{"rollout abort", "", "stop the current rollout and set its batch in progress back", abortAbout, rolloutAbortCmd},
	{"rollout watch", "", "roll out each newly published release", watchAbout, rolloutWatchCmd},
}

func rolloutCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	return dispatch(ctx, s, fs, args, "rollout", rolloutCommands)
}

// rolloutFlags are the flags of the subcommands that drive a rollout.
type rolloutFlags struct {
	bus                         busFlags
	key                         keyFlags
	canary                      int
	canaryNodes, steps, policy  string
	window, soak, alive, silent time.Duration
	lease                       time.Duration
	supersede, follow, asJSON   bool
	urgent, includeMetered      bool
	skipPlatforms               platformList
	skipOldHosts                bool
	salt                        string
	fs                          *flag.FlagSet
}

// registerOutput adds what every driving subcommand takes: the bus, --lease, --follow, --json.
func (f *rolloutFlags) registerOutput(fs *flag.FlagSet, getenv func(string) string) {
	f.fs = fs
	f.key.register(fs, true, getenv)
	f.bus.register(fs, getenv)
	fs.DurationVar(&f.lease, "lease", rollout.DefaultLease, "hold the rollout this long without renewing; another controller may take it over after")
	fs.BoolVar(&f.follow, "follow", false, "also print each node's confirmation and soak, and the batch's progress when it changes (at least every 10s)")
	fs.BoolVar(&f.asJSON, "json", false, "write one JSON event per line instead of text")
}

// registerOptions adds the options of a rollout (start's and watch's).
func (f *rolloutFlags) registerOptions(fs *flag.FlagSet) {
	fs.StringVar(&f.policy, "policy", string(rollout.PolicyCanary), "canary (staged, halting on trouble) or immediate (the fleet target at once, for labs)")
	fs.IntVar(&f.canary, "canary", rollout.DefaultCanary, "how many canaries go first, chosen by sha256(VERSION/node): at least one of every platform (default 2, or one per platform when more)")
	fs.StringVar(&f.canaryNodes, "canary-nodes", "", "the canaries, named: comma-separated node `ids` (instead of --canary)")
	fs.StringVar(&f.steps, "steps", rollout.FormatSteps(rollout.DefaultSteps), "cumulative `shares` of the whole fleet (canaries included) that each batch ends at, the last 100%")
	fs.DurationVar(&f.window, "window", rollout.DefaultWindow, "a batch's nodes must confirm within this of their target being set")
	fs.DurationVar(&f.soak, "soak", rollout.DefaultSoak, "and then keep running it, without restarting, for this long")
	fs.DurationVar(&f.alive, "alive", rollout.DefaultAlive, "the fleet is every node heard from within this when the rollout starts")
	fs.DurationVar(&f.silent, "silent-after", rollout.DefaultSilentAfter, "leave out a node unheard this long when its batch begins")
	fs.BoolVar(&f.includeMetered, "include-metered", false, "plan nodes on metered links (host.json link_class) as any other; by default they are never canaries and wait for the last batch")
	registerSkips(fs, &f.skipPlatforms, &f.skipOldHosts, "the rollout")
	fs.StringVar(&f.salt, "salt", "", "order the fleet's waves by this `salt` (32 lowercase hex digits); default: one derived from VERSION, the same on every run")
}

// registerSkips adds --skip-platform and --skip-old-hosts: the nodes a command leaves out of
// what it targets by platform, explicitly (decision 0043).
func registerSkips(fs *flag.FlagSet, platforms *platformList, old *bool, what string) {
	fs.Var(platforms, "skip-platform", "leave the nodes of `PLATFORM` (linux/arm/v7) out of "+what+", explicitly: a version with no build for a node's platform is refused without it (repeatable)")
	fs.BoolVar(old, "skip-old-hosts", false, "leave out of "+what+" the nodes whose hosts cannot read the version's manifest schema (their heartbeats say no manifest_schema of it); without it such a version is refused")
}

// platformList is a repeatable flag of platforms, each checked (wire.ParsePlatform); a value
// may also list several, comma-separated.
type platformList []string

func (l *platformList) String() string { return strings.Join(*l, ",") }

func (l *platformList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		p, err := wire.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		if slices.Contains(*l, p.String()) {
			return fmt.Errorf("%s is named twice", p)
		}
		*l = append(*l, p.String())
	}
	return nil
}

// options are the rollout the flags ask for; a bad one is a usage error naming the flag.
func (f *rolloutFlags) options(version string) (rollout.Options, error) {
	o := rollout.Options{Version: version, Policy: rollout.Policy(f.policy), Canary: f.canary,
		Window: f.window, Soak: f.soak, Alive: f.alive, SilentAfter: f.silent, Supersede: f.supersede, Urgent: f.urgent, IncludeMetered: f.includeMetered,
		SkipPlatforms: f.skipPlatforms, SkipOldHosts: f.skipOldHosts, Salt: f.salt}
	switch o.Policy {
	case rollout.PolicyCanary, rollout.PolicyImmediate:
	default:
		return o, usagef("--policy %q: want canary or immediate", text.Cut(text.Printable(f.policy), 40))
	}
	steps, err := rollout.ParseSteps(f.steps)
	if err != nil {
		return o, usagef("--steps: %v", err)
	}
	o.Steps = steps
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if set["canary"] && set["canary-nodes"] {
		return o, usagef("give --canary N or --canary-nodes a,b, not both")
	}
	o.CanaryGiven = set["canary"]
	if f.canaryNodes != "" {
		for _, node := range strings.Split(f.canaryNodes, ",") {
			node = strings.TrimSpace(node)
			if err := wire.ValidNode(node); err != nil {
				return o, usagef("--canary-nodes: %v", err)
			}
			o.CanaryNodes = append(o.CanaryNodes, node)
		}
		o.Canary = len(o.CanaryNodes)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"window", f.window}, {"soak", f.soak}, {"alive", f.alive}, {"silent-after", f.silent}, {"lease", f.lease}} {
		if d.v <= 0 {
			return o, usagef("--%s is %s; it must be positive", d.name, d.v)
		}
	}
	if f.canary < 1 {
		return o, usagef("--canary is %d; it must be at least 1 (or name the canaries with --canary-nodes)", f.canary)
	}
	check := o
	if check.Version == "" {
		check.Version = "v0.0.0" // watch: each announcement names the version; check the rest now
	}
	if err := check.Validate(); err != nil {
		return o, usageError{err.Error()}
	}
	return o, nil
}

// controller connects with a connection that outlives a NATS server restart and makes the
// controller that prints to s.
func (f *rolloutFlags) controller(ctx context.Context, s *stdio, p *eventPrinter, holder string) (*bus.Conn, *rollout.Controller, error) {
	signer, err := f.key.signer()
	if err != nil {
		return nil, nil, err
	}
	log := logkey.Text(s.err, &slog.HandlerOptions{Level: slog.LevelWarn}).With("component", "rollout")
	c, err := f.bus.connect(ctx, bus.Lasting(log))
	if err != nil {
		return nil, nil, err
	}
	cfg := rollout.Config{JS: c.JS, Names: f.bus.names(), Events: p.print, Log: log, Lease: f.lease, Holder: holder,
		Key: signer.Key, MoreKeys: signer.More, TargetTTL: signer.TTL}
	if f.follow {
		cfg.Progress = progressEvery
	}
	ctl, err := rollout.New(cfg)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, ctl, nil
}

func rolloutStartCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var f rolloutFlags
	f.registerOptions(fs)
	fs.BoolVar(&f.supersede, "supersede", false, "replace a rollout that is running (it is marked superseded) instead of refusing to start")
	fs.BoolVar(&f.urgent, "urgent", false, "sign every target urgent: nodes stand aside for VERSION as soon as they stage it, without waiting for their maintenance windows")
	f.registerOutput(fs, s.getenv)
	o, err := f.versionOptions(fs, args)
	if err != nil {
		return err
	}
	p := &eventPrinter{s: s, follow: f.follow, json: f.asJSON}
	c, ctl, err := f.controller(ctx, s, p, "")
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := ctl.Start(ctx, o)
	if err != nil {
		if ctx.Err() != nil && st.ID != "" {
			return paused(st.ID)
		}
		return err
	}
	if !f.asJSON && st.Policy != rollout.PolicyImmediate && len(st.Batches) > 0 {
		if err := rollout.WritePlan(s.out, st); err != nil {
			return err
		}
	}
	if !st.Status.Final() {
		st, err = ctl.Run(ctx, st.ID)
	}
	return p.outcome(ctx, st, err)
}

// versionOptions parses the flags and the one VERSION argument of `rollout plan` and `start`
// into the rollout they ask for; a bad one is a usage error.
func (f *rolloutFlags) versionOptions(fs *flag.FlagSet, args []string) (rollout.Options, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return rollout.Options{}, err
	}
	if len(pos) != 1 {
		return rollout.Options{}, usagef("want VERSION, got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	if !wire.ValidVersion(pos[0]) {
		return rollout.Options{}, usagef("%q is not a version; want vX.Y.Z", text.Cut(text.Printable(pos[0]), 64))
	}
	return f.options(pos[0])
}

func rolloutPlanCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	f := rolloutFlags{lease: rollout.DefaultLease}
	f.registerOptions(fs)
	f.fs = fs
	f.bus.register(fs, s.getenv)
	fs.BoolVar(&f.asJSON, "json", false, "write the planned state as JSON")
	o, err := f.versionOptions(fs, args)
	if err != nil {
		return err
	}
	c, err := f.bus.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := rollout.PreviewOn(ctx, c.JS, f.bus.names(), o)
	if err != nil {
		return err
	}
	if f.asJSON {
		return rollout.WriteStatusJSON(s.out, st)
	}
	return rollout.WritePlan(s.out, st)
}

func rolloutResumeCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var f rolloutFlags
	f.registerOutput(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	if f.lease <= 0 {
		return usagef("--lease is %s; it must be positive", f.lease)
	}
	p := &eventPrinter{s: s, follow: f.follow, json: f.asJSON}
	c, ctl, err := f.controller(ctx, s, p, "")
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := ctl.Resume(ctx)
	return p.outcome(ctx, st, err)
}

func rolloutWatchCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var f rolloutFlags
	f.registerOptions(fs)
	f.registerOutput(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	o, err := f.options("")
	if err != nil {
		return err
	}
	p := &eventPrinter{s: s, follow: f.follow, json: f.asJSON}
	c, ctl, err := f.controller(ctx, s, p, "watch")
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ctl.Watch(ctx, o); err != nil && ctx.Err() == nil {
		return err
	}
	return nil // stopped by a signal: what watch is for
}

func rolloutStatusCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	asJSON := fs.Bool("json", false, "write the stored state as JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("want at most one rollout ID, got %d arguments", len(pos))
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var st rollout.State
	if len(pos) == 1 {
		st, err = rollout.Get(ctx, c.JS, b.names(), pos[0])
	} else {
		var ok bool
		st, ok, err = rollout.Current(ctx, c.JS, b.names())
		if err == nil && !ok {
			err = rollout.ErrNoRollout
		}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return rollout.WriteStatusJSON(s.out, st)
	}
	return rollout.WriteStatus(s.out, st, time.Now())
}

func rolloutAbortCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var k keyFlags
	k.register(fs, true, s.getenv)
	var b busFlags
	b.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	signer, err := k.signer()
	if err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := rollout.Abort(ctx, c.JS, b.names(), operator(s.getenv), signer)
	if err != nil {
		return err
	}
	s.println(rollout.Summary(st, time.Now()))
	s.println(setBack(st))
	return nil
}

// setBack says what aborting st set back: the targets of the batch in progress, each to the
// version its node ran.
func setBack(st rollout.State) string {
	i := st.Current
	if i < 0 || i >= len(st.Batches) || st.Batches[i].Started.IsZero() {
		return "No target had been set by it in the batch in progress; nothing was set back."
	}
	ran := make(map[string]string, len(st.Nodes))
	for j, node := range st.Nodes {
		if j < len(st.Ran) {
			ran[node] = st.Ran[j]
		}
	}
	nodes := st.BatchNodes(i)
	parts := make([]string, 0, shownNodes+1)
	for j, node := range nodes {
		if j == shownNodes {
			parts = append(parts, fmt.Sprintf("and %d more", len(nodes)-shownNodes))
			break
		}
		parts = append(parts, fmt.Sprintf("%s to %s", printable(node), printable(orNone(ran[node]))))
	}
	verb := "were set back"
	if !st.Restored {
		verb = "are being set back (`mesh-release rollout status` says when it is done)"
	}
	return fmt.Sprintf("The targets of batch %d/%d (%s) %s: %s.", i+1, len(st.Batches), printable(st.Batches[i].Name), verb, strings.Join(parts, ", "))
}

func printable(s string) string { return text.Cut(text.Printable(s), shownNodeBytes) }

func orNone(v string) string {
	if v == "" {
		return "none (no version)"
	}
	return v
}

// operator names who aborts: "<user>@<host>".
func operator(getenv func(string) string) string {
	user := getenv("USER")
	if user == "" {
		user = getenv("LOGNAME")
	}
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return user + "@" + host
}

// paused is the error of a controller stopped by a signal: exit 1, and how to continue.
func paused(id string) error {
	return fmt.Errorf("stopped by a signal: rollout %s is paused (nodes already targeted carry on); `mesh-release rollout resume` continues it", printable(id))
}

// eventPrinter writes a controller's events to stdout, as text or JSON lines. Without --follow
// it writes only milestones, not each node's confirmation nor progress.
type eventPrinter struct {
	s            *stdio
	follow, json bool
	final        bool // an event saying the rollout ended was written
}

func (p *eventPrinter) print(e rollout.Event) {
	switch e.Kind {
	case rollout.EventConfirmed, rollout.EventSoaked, rollout.EventProgress:
		if !p.follow {
			return
		}
	case rollout.EventCompleted, rollout.EventHalted, rollout.EventAborted, rollout.EventSuperseded:
		p.final = true
	}
	if p.json {
		rollout.WriteEventJSON(p.s.out, e)
	} else {
		rollout.WriteEvent(p.s.out, e)
	}
}

// outcome is the exit of a controller that drove st: nil when completed, exitHalted,
// exitStopped, or the error (a signal pauses the rollout). The end is said once on stdout: if
// the controller emitted no event for it, a line made from the state says it.
func (p *eventPrinter) outcome(ctx context.Context, st rollout.State, err error) error {
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			if st.ID == "" {
				return errors.New("stopped by a signal; `mesh-release rollout resume` continues the rollout, if one was started")
			}
			return paused(st.ID)
		}
		return err
	}
	if !p.final && st.Status.Final() {
		p.final = true
		e := rollout.Event{Time: time.Now(), Kind: string(st.Status), Rollout: st.ID, Version: st.Version, Message: rollout.Summary(st, time.Now())}
		if st.Halt != nil {
			e.Kind, e.Reasons = rollout.EventHalted, st.Halt.Nodes
		}
		if p.json {
			rollout.WriteEventJSON(p.s.out, e)
		} else {
			rollout.WriteEvent(p.s.out, e)
		}
	}
	switch st.Status {
	case rollout.StatusCompleted:
		return nil
	case rollout.StatusHalted:
		return exitStatus(exitHalted)
	case rollout.StatusAborted, rollout.StatusSuperseded:
		return exitStatus(exitStopped)
	}
	return fmt.Errorf("rollout %s ended %s", printable(st.ID), printable(string(st.Status)))
}
