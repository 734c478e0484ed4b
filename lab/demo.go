package lab

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/novox/mesh-host/release/rollout"

	"github.com/novox/mesh-host/internal/emulator"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// PkgCrashRun passes preflight and exits 1 when run: a bad release only rollback catches.
const PkgCrashRun = "./lab/fixtures/crashrun"

// DemoWatchArgs are the demo's `mesh-release rollout` flags: two canaries, then half the fleet,
// then all of it, with the clocks scaled down (a batch must confirm within 30s and then run 4s
// without restarting).
var DemoWatchArgs = []string{"--canary", "2", "--steps", "50%,100%", "--window", "30s", "--soak", "4s",
	"--alive", "1m", "--silent-after", "10s", "--lease", "6s"}

// PkgCrashArm64 is the real host except on linux/arm64, where it passes preflight and exits 1 when
// run: a release broken on one platform only.
const PkgCrashArm64 = "./lab/fixtures/crasharm64"

// DemoForeignArch is the architecture of the demo's two foreign nodes when this machine is amd64
// and runs linux/arm64 binaries (qemu-user).
const DemoForeignArch = "arm64"

// demoPlan is the fleet the demo runs and the broken release it publishes: a mixed fleet where
// the machine runs linux/arm64 binaries, its own platform alone where it does not.
type demoPlan struct {
	arches   []string // each node's GOARCH, node-1 first
	broken   string   // the package published as v1.2.0
	brokenOn string   // the GOARCH v1.2.0 crashes on; "" for every one
	note     string   // what the demo says of its fleet, and what to install for the mixed one
}

// planDemo is the fleet for a machine of architecture native whose ability to run another
// architecture's binaries runs reports (emulator.Runs).
func planDemo(ctx context.Context, native string, runs func(context.Context, string) error) demoPlan {
	const nodes, foreign = 6, 2
	p := demoPlan{arches: slices.Repeat([]string{native}, nodes), broken: PkgCrashRun}
	if native != "amd64" {
		p.note = fmt.Sprintf("this machine is linux/%s, and the demo's mixed fleet is amd64 and arm64 nodes on an amd64 machine: all six nodes run linux/%s", native, native)
		return p
	}
	if err := runs(ctx, DemoForeignArch); err != nil {
		p.note = fmt.Sprintf("this machine cannot run linux/%s binaries (%v). To see a mixed fleet (four linux/amd64 and two linux/arm64 nodes, the arm64 ones run by qemu-user), install qemu-user-static binfmt-support (Debian: apt-get install qemu-user-static binfmt-support). Now all six nodes run linux/%s, and v1.2.0 is broken on every platform",
			DemoForeignArch, oneLine(err.Error()), native)
		return p
	}
	for i := nodes - foreign; i < nodes; i++ {
		p.arches[i] = DemoForeignArch
	}
	p.broken, p.brokenOn = PkgCrashArm64, DemoForeignArch
	p.note = fmt.Sprintf("a mixed fleet: node-1 … node-4 run linux/amd64, node-5 and node-6 linux/%s (real %s launchers and hosts, their CPU emulated by qemu-user under binfmt_misc)", DemoForeignArch, DemoForeignArch)
	return p
}

// brokenWords says how v1.2.0 is broken.
func (p demoPlan) brokenWords() string {
	if p.brokenOn == "" {
		return "everywhere: it passes preflight, then crashes when run"
	}
	return "on linux/" + p.brokenOn + " only: it passes preflight everywhere, then crashes when run on " + p.brokenOn + " and runs well elsewhere"
}

// Demo tells the fleet's story with real processes: an embedded NATS server and six nodes, each
// a mesh-launcher process with its own root on v1.0.0, and `mesh-release rollout watch` running
// as a child process. Where the machine runs linux/arm64 binaries (qemu-user) the fleet is mixed:
// four amd64 nodes and two arm64 ones, each version one release for both platforms. v1.1.0 is
// built and published, and the watch rolls it out through two canaries, then half, then all of
// the fleet; then a v1.2.0 broken on arm64 only (it passes preflight and crashes when run there)
// is published: the rollout halts in its canary batch, which held an arm64 node (a canary on
// every platform), the canaries go back to v1.1.0, and no other node fetches it. On a machine
// without the emulator all six nodes run its own platform and v1.2.0 is broken on every one. It
// prints the fleet table and a canary's `mesh-launcher status` at each step, the watch's lines as
// they come, and a summary; it returns an error if anything does not happen as it says.
func Demo(ctx context.Context, w io.Writer, src string) (err error) {
	return runDemo(ctx, w, src, planDemo(ctx, runtime.GOARCH, emulator.Runs))
}

// long: the story, told in order; each step is a helper of demo's.
func runDemo(ctx context.Context, w io.Writer, src string, p demoPlan) (err error) {
	began := time.Now()
	work, err := os.MkdirTemp("", "mesh-lab-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	d := &demo{w: &syncWriter{w: w}, began: began, plan: p}

	d.say("%s", p.note)
	if p.brokenOn == "" {
		d.say("building the launcher, mesh-release and three host versions from this tree, for %s (v1.2.0 is broken %s)",
			strings.Join(platformNames(FleetOptions{Nodes: len(p.arches), Arches: p.arches}.Platforms()), " and "), p.brokenWords())
	} else {
		d.say("building mesh-release, and the launcher and host v1.0.0 for %s, from this tree; v1.1.0 and v1.2.0 are built for both by `mesh-release build --platforms` as they are published (v1.2.0 is broken %s)",
			strings.Join(platformNames(FleetOptions{Nodes: len(p.arches), Arches: p.arches}.Platforms()), " and "), p.brokenWords())
	}
	b, err := NewBuilder(ctx, src, filepath.Join(work, "bin"))
	if err != nil {
		return err
	}
	b.Progress = d.w
	// Everything is built before the clocks start: a cold build takes minutes.
	platforms := FleetOptions{Nodes: len(p.arches), Arches: p.arches}.Platforms()
	if err := b.BuildStory(ctx, platforms, p.broken, len(platforms) == 1 && platforms[0] == runtime.GOARCH); err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	f, err := StartFleet(fctx, FleetOptions{Dir: filepath.Join(work, "fleet"), Builder: b, Nodes: len(p.arches), Arches: p.arches})
	if err != nil {
		return err
	}
	d.f = f
	defer f.Close()
	defer func() {
		if err != nil {
			d.failed(err)
		}
	}()
	d.say("bus: NATS with JetStream on %s; six nodes (node-1 … node-6, %s), each a mesh-launcher process with its own root, heartbeating every second, all confirmed on v1.0.0",
		f.Bus.URL(), platformWords(p.arches))
	if err := d.platforms(ctx); err != nil {
		return err
	}
	if err := d.table(ctx); err != nil {
		return err
	}

	if err := d.applyAndKeep(ctx, filepath.Join(work, "srv")); err != nil {
		return err
	}

	d.say("mesh-release rollout watch %s: fleet upgrade by build announcement — it rolls out each newly published version", strings.Join(DemoWatchArgs, " "))
	watch := f.Rollout(append([]string{"watch"}, DemoWatchArgs...)...)
	watch.OnLine = func(line string) { d.line("  watch │ " + line) }
	if err := watch.Start(); err != nil {
		return err
	}

	// v1.1.0: canaries, then 50%, then 100%.
	d.say("mesh-release build + publish v1.1.0 (signed; one release for %s)", strings.Join(platformNames(f.Opts.Platforms()), " and "))
	good, err := d.publish(ctx, "v1.1.0", PkgHost)
	if err != nil {
		return err
	}
	st, err := d.rollout(ctx, "v1.1.0", "started", func(st rollout.State) bool { return len(st.Batches) > 0 })
	if err != nil {
		return err
	}
	canaries, goodBatches := BatchNodes(st, 0), len(st.Batches)
	d.say("the watch started rollout %s: %s", st.ID, plan(st))
	if err := d.all(ctx, canaries, "the canaries "+strings.Join(canaries, ", ")+" run v1.1.0, confirmed; they soak while the rest wait on v1.0.0", RunningConfirmed("v1.1.0")); err != nil {
		return err
	}
	if err := d.table(ctx); err != nil {
		return err
	}
	d.status(ctx, canaries[0])
	if _, err := d.rollout(ctx, "v1.1.0", "completed", func(st rollout.State) bool {
		return st.Version == "v1.1.0" && st.Status == rollout.StatusCompleted
	}); err != nil {
		return err
	}
	if err := d.all(ctx, f.Names(), "v1.1.0 completed: every node runs it, confirmed ("+platformWords(p.arches)+")", RunningConfirmed("v1.1.0")); err != nil {
		return err
	}
	if err := d.inBatchOrder(st, "v1.1.0"); err != nil {
		return err
	}
	if v, _, err := f.Target(ctx, wire.FleetTargetKey); err != nil || v != "v1.1.0" {
		return fmt.Errorf("after the rollout completed, the fleet target is %q (%v), want v1.1.0", v, err)
	}
	d.ok("batches went in order (from the heartbeats: no node of a batch was targeted before the one before it confirmed), and the fleet key names v1.1.0")
	goodDone := time.Since(good)
	if err := d.table(ctx); err != nil {
		return err
	}

	// v1.2.0: halted after the canaries.
	d.say("mesh-release build + publish v1.2.0 — broken %s", p.brokenWords())
	bad, err := d.publish(ctx, "v1.2.0", p.broken)
	if err != nil {
		return err
	}
	st, err = d.rollout(ctx, "v1.2.0", "started", func(st rollout.State) bool { return st.Version == "v1.2.0" && len(st.Batches) > 0 })
	if err != nil {
		return err
	}
	canaries = BatchNodes(st, 0)
	rest := slices.DeleteFunc(f.Names(), func(n string) bool { return slices.Contains(canaries, n) })
	d.say("the watch started rollout %s: %s", st.ID, plan(st))
	st, err = d.rollout(ctx, "v1.2.0", "halted", func(st rollout.State) bool {
		return st.Version == "v1.2.0" && st.Status.Final()
	})
	if err != nil {
		return err
	}
	if st.Status != rollout.StatusHalted || st.Halt == nil || st.Halt.Batch != 0 {
		return fmt.Errorf("the rollout of v1.2.0 ended %s (halt %+v), want halted in the canary batch", st.Status, st.Halt)
	}
	if err := d.halted(st, canaries); err != nil {
		return err
	}
	// The halt set the canary batch's targets back to v1.1.0. A canary that staged v1.2.0 where it
	// crashes rolled back by itself; one where it runs well (another platform) keeps running it,
	// confirmed: a node runs the newest good version it has, whatever its target.
	var crashed, kept []string
	for _, n := range canaries {
		if p.breaks(d.f.Node(n).Arch) {
			crashed = append(crashed, n)
		} else {
			kept = append(kept, n)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := f.Beats.WaitAll(wctx, crashed, "v1.1.0 again, rolled back from v1.2.0 if it ran it", func(b Beat) bool {
		// A canary that staged v1.2.0 ran it; one the halt reached first never did.
		return RunningConfirmed("v1.1.0")(b) && b.Target == "v1.1.0" && (rolledBackFrom(b, "v1.2.0") || d.f.Node(b.Node).Staged("v1.2.0") == 0)
	}); err != nil {
		return err
	}
	if err := f.Beats.WaitAll(wctx, kept, "its target set back to v1.1.0", func(b Beat) bool { return b.Target == "v1.1.0" }); err != nil {
		return err
	}
	var back []string
	why := ""
	for _, n := range crashed {
		b, _ := f.Beats.Last(n)
		for _, rb := range b.Rollbacks {
			if rb.From == "v1.2.0" {
				back = append(back, n)
				why, _, _ = strings.Cut(rb.Reason, " (last:")
				break
			}
		}
	}
	if len(back) == 0 {
		return fmt.Errorf("no canary rolled back from v1.2.0, yet the rollout halted")
	}
	if len(kept) == 0 {
		d.ok("the canaries run v1.1.0 again: %s rolled back from v1.2.0 by themselves, their launchers' judgement: %s", strings.Join(back, " and "), oneLine(why))
	} else {
		d.ok("%s rolled back from v1.2.0 by itself, its launcher's judgement: %s", d.namedAll(back), oneLine(why))
		d.ok("%s, where v1.2.0 runs well, keeps what it runs (%s): the halt set its target back to v1.1.0, and a node runs the newest good version it has; `mesh-release withdraw v1.2.0` would step it down",
			d.namedAll(kept), d.running(kept))
	}
	d.status(ctx, back[0])
	if err := d.table(ctx); err != nil {
		return err
	}
	// Two heartbeats later, the rest still never fetched it.
	time.Sleep(2 * f.Opts.Interval)
	for _, n := range rest {
		if d.touched(n, "v1.2.0") {
			return fmt.Errorf("%s, not a canary, was targeted at or fetched v1.2.0", n)
		}
	}
	reads, err := f.Reads.Count(ctx, "v1.2.0")
	if err != nil {
		return err
	}
	if reads > len(canaries) {
		return fmt.Errorf("the v1.2.0 archive was read %d times; only the %d canaries may have", reads, len(canaries))
	}
	if v, _, err := f.Target(ctx, wire.FleetTargetKey); err != nil || v != "v1.1.0" {
		return fmt.Errorf("after the halt, the fleet target is %q (%v), want v1.1.0 untouched", v, err)
	}
	d.ok("%s never fetched v1.2.0 (no target, no fetch in their heartbeats, nothing staged on their disks); the object store served it %d times, to canaries only; the fleet key still names v1.1.0",
		strings.Join(rest, ", "), reads)
	badDone := time.Since(bad)

	d.say("stopping the watch (SIGTERM)")
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if code, err := watch.Stop(sctx); err != nil || code != 0 {
		return fmt.Errorf("the watch did not stop cleanly: exit %d, %v", code, err)
	}
	d.say("done in %s: v1.1.0 reached all six nodes (%s) in %d batches in %s; v1.2.0 halted in its canary batch (%s) in %s and reached no other node",
		time.Since(began).Round(time.Second), platformWords(p.arches), goodBatches, goodDone.Round(100*time.Millisecond),
		d.namedAll(canaries), badDone.Round(100*time.Millisecond))
	return nil
}

// breaks reports whether v1.2.0 crashes on a node of arch ("" is this machine's).
func (p demoPlan) breaks(arch string) bool {
	if arch == "" {
		arch = runtime.GOARCH
	}
	return p.brokenOn == "" || p.brokenOn == arch
}

// halted checks and says why the rollout of the broken release halted: its canary batch held a
// node of the platform it is broken on, and only such nodes showed trouble.
func (d *demo) halted(st rollout.State, canaries []string) error {
	p := d.plan
	var on, off []string
	for _, n := range canaries {
		if p.breaks(d.f.Node(n).Arch) {
			on = append(on, n)
		} else {
			off = append(off, n)
		}
	}
	if len(on) == 0 {
		return fmt.Errorf("the canary batch of v1.2.0 (%s) held no linux/%s node, yet the rollout halted", d.namedAll(canaries), p.brokenOn)
	}
	for _, r := range st.Halt.Nodes {
		if !slices.Contains(on, r.Node) {
			return fmt.Errorf("%s showed trouble (%s: %s) with v1.2.0, which is broken on linux/%s only", d.named(r.Node), r.Why, oneLine(r.Detail), p.brokenOn)
		}
	}
	switch {
	case p.brokenOn == "":
		d.ok("the rollout of v1.2.0 halted in its canary batch, by itself:")
	case len(off) == 0:
		d.ok("the rollout of v1.2.0 halted in its canary batch, by itself, because that batch held linux/%s nodes (%s): %d of %d showed trouble",
			p.brokenOn, strings.Join(on, ", "), len(st.Halt.Nodes), len(on))
	default:
		confirmed := "had not confirmed it yet"
		if _, ok := d.f.Beats.First(func(b Beat) bool { return b.Node == off[0] && RunningConfirmed("v1.2.0")(b) }); ok {
			confirmed = "had confirmed it"
		}
		d.ok("the rollout of v1.2.0 halted in its canary batch, by itself, because that batch held a linux/%s node (%s): %d of %d linux/%s canaries showed trouble; the other canary, %s, %s",
			p.brokenOn, strings.Join(on, ", "), len(st.Halt.Nodes), len(on), p.brokenOn, d.named(off[0]), confirmed)
	}
	for _, r := range st.Halt.Nodes {
		d.line(fmt.Sprintf("      %s %s: %s", d.named(r.Node), r.Why, oneLine(r.Detail)))
	}
	return nil
}

// platforms checks that each node heartbeats the architecture it was built for: a node run by
// qemu-user says arm64, the kernel's machine as the emulator shows it being aarch64.
func (d *demo) platforms(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := d.f.Beats.WaitAll(wctx, d.f.Names(), "a machine profile in the heartbeat", func(b Beat) bool { return b.Profile != nil }); err != nil {
		return err
	}
	var foreign []string
	for _, n := range d.f.Nodes {
		b, _ := d.f.Beats.Last(n.Name)
		if want := cmp.Or(n.Arch, runtime.GOARCH); b.Profile.Arch != want {
			return fmt.Errorf("%s runs binaries built for linux/%s but heartbeats machine arch %q", n.Name, want, b.Profile.Arch)
		}
		if n.Arch != runtime.GOARCH {
			foreign = append(foreign, n.Name)
		}
	}
	if len(foreign) > 0 {
		d.ok("%s heartbeat machine arch %s: their hosts run as linux/%s (under qemu-user, uname -m says %s)",
			strings.Join(foreign, " and "), d.f.Node(foreign[0]).Arch, d.f.Node(foreign[0]).Arch, kernelMachine(d.f.Node(foreign[0]).Arch))
	}
	return nil
}

// kernelMachine is uname -m's word for a GOARCH.
func kernelMachine(goarch string) string {
	switch goarch {
	case "arm64":
		return "aarch64"
	case "amd64":
		return "x86_64"
	case "arm":
		return "armv7l"
	}
	return goarch
}

// running says what each node last heartbeat it runs: "node-2 v1.2.0, confirmed".
func (d *demo) running(nodes []string) string {
	var parts []string
	for _, n := range nodes {
		b, _ := d.f.Beats.Last(n)
		confirmed := ""
		if RunningConfirmed(b.Running)(b) {
			confirmed = ", confirmed"
		}
		parts = append(parts, n+" "+cmp.Or(b.Running, "nothing")+confirmed)
	}
	return strings.Join(parts, "; ")
}

// named is a node's name with its platform when the fleet is mixed: "node-5 (linux/arm64)".
func (d *demo) named(node string) string {
	if d.plan.brokenOn == "" {
		return node
	}
	return node + " (linux/" + cmp.Or(d.f.Node(node).Arch, runtime.GOARCH) + ")"
}

func (d *demo) namedAll(nodes []string) string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = d.named(n)
	}
	return strings.Join(out, ", ")
}

// platformWords counts the nodes of each architecture: "four linux/amd64, two linux/arm64", or
// "all linux/amd64".
func platformWords(arches []string) string {
	if len(slices.Compact(slices.Clone(arches))) == 1 {
		return "all linux/" + arches[0]
	}
	var parts []string
	for _, a := range (FleetOptions{Nodes: len(arches), Arches: arches}).Platforms() {
		n := 0
		for _, x := range arches {
			if x == a {
				n++
			}
		}
		parts = append(parts, fmt.Sprintf("%s linux/%s", numberWord(n), a))
	}
	return strings.Join(parts, ", ")
}

func platformNames(arches []string) []string {
	out := make([]string, len(arches))
	for i, a := range arches {
		out[i] = "linux/" + a
	}
	return out
}

func numberWord(n int) string {
	if words := []string{"no", "one", "two", "three", "four", "five", "six"}; n < len(words) {
		return words[n]
	}
	return strconv.Itoa(n)
}

// demo is the demo's narration and its checks.
type demo struct {
	w     *syncWriter
	began time.Time
	f     *Fleet
	plan  demoPlan
}

func (d *demo) say(format string, args ...any) {
	d.w.print(fmt.Sprintf("\n[%5.1fs] %s\n", time.Since(d.began).Seconds(), fmt.Sprintf(format, args...)))
}

func (d *demo) ok(format string, args ...any) { d.say("✓ "+format, args...) }

func (d *demo) line(s string) { d.w.print(s + "\n") }

func (d *demo) indent(text string) {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	d.w.print(b.String())
}

func (d *demo) table(ctx context.Context) error {
	out, err := d.f.FleetTable(ctx)
	if err != nil {
		return err
	}
	d.say("mesh-release fleet")
	d.indent(out)
	return nil
}

func (d *demo) status(ctx context.Context, node string) {
	n := d.f.Node(node)
	d.say("mesh-launcher status --root %s   (%s, a canary)", n.Root, d.named(node))
	d.indent(n.StatusText(ctx))
}

func (d *demo) publish(ctx context.Context, version, pkg string) (time.Time, error) {
	dir, err := d.f.BuildRelease(ctx, version, pkg)
	if err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	return at, d.f.Release.Publish(ctx, dir)
}

func (d *demo) rollout(ctx context.Context, version, what string, ok func(rollout.State) bool) (rollout.State, error) {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return d.f.WaitRollout(wctx, version+" "+what, func(st rollout.State) bool { return st.Version == version && ok(st) })
}

func (d *demo) all(ctx context.Context, nodes []string, what string, ok func(Beat) bool) error {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := d.f.Beats.WaitAll(wctx, nodes, what, ok); err != nil {
		return err
	}
	d.ok("%s", what)
	return nil
}

// applyAndKeep shows the host's own job: each node is declared a directory and a file (under
// srv, the lab's stand-in for /srv), applies them, and puts back the file deleted by hand.
func (d *demo) applyAndKeep(ctx context.Context, srv string) error {
	if err := os.Mkdir(srv, 0o755); err != nil {
		return err
	}
	d.say("declaring each node a directory and a file under %s (KV mesh_declarations; the lab's stand-in for /srv)", srv)
	for _, n := range d.f.Names() {
		dir := filepath.Join(srv, n)
		doc := wire.Declaration{Version: wire.DeclarationVersion, Node: n, Resources: []wire.Resource{
			{Type: wire.KindDirectory, ID: dir, Spec: json.RawMessage(`{"mode": "0755"}`)},
			{Type: wire.KindFile, ID: filepath.Join(dir, "motd"), Spec: json.RawMessage(fmt.Sprintf(`{"content": "served by %s\n", "mode": "0644"}`, n))},
		}}
		if _, err := d.f.Bus.Declare(ctx, n, doc.Marshal()); err != nil {
			return err
		}
	}
	if err := d.all(ctx, d.f.Names(), "every node applied its declaration and owns 2 resources (inventory.owned in its heartbeat)", func(b Beat) bool {
		return b.Inventory != nil && b.Inventory.Owned.Total == 2 && b.LastReconcile != nil && b.LastReconcile.OK
	}); err != nil {
		return err
	}
	node := d.f.Names()[0]
	motd := filepath.Join(srv, node, "motd")
	if err := os.Remove(motd); err != nil {
		return err
	}
	d.say("someone deletes %s by hand", motd)
	if err := d.all(ctx, []string{node}, node+"'s drift timer put it back, and its heartbeat names it in drift", func(b Beat) bool {
		for _, dr := range b.Drift {
			if dr.ID == motd && dr.Restored {
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	if got, err := os.ReadFile(motd); err != nil || string(got) != "served by "+node+"\n" {
		return fmt.Errorf("after the drift was reported, %s holds %q (%v), want it as declared", motd, got, err)
	}
	d.ok("%s is back as declared", motd)
	return nil
}

// touched reports whether node was ever targeted at version, fetched it or staged it.
func (d *demo) touched(node, version string) bool {
	for _, b := range d.f.Beats.Of(node) {
		if b.Target == version || b.Fetch != nil && b.Fetch.Version == version || slices.Contains(b.Staged, version) {
			return true
		}
	}
	n := d.f.Node(node)
	return n.Has(version) || n.Staged(version) > 0
}

// inBatchOrder checks, from the heartbeat history, that no node of a batch heard of version as
// its target before every node of the batch before it had confirmed it.
func (d *demo) inBatchOrder(st rollout.State, version string) error {
	for i := 1; i < len(st.Batches); i++ {
		var confirmed time.Time
		for _, n := range BatchNodes(st, i-1) {
			b, ok := d.f.Beats.First(func(b Beat) bool { return b.Node == n && RunningConfirmed(version)(b) })
			if !ok {
				return fmt.Errorf("%s (batch %s) never heartbeat %s confirmed", n, st.Batches[i-1].Name, version)
			}
			confirmed = later(confirmed, b.At)
		}
		for _, n := range BatchNodes(st, i) {
			if b, ok := d.f.Beats.First(func(b Beat) bool { return b.Node == n && b.Target == version }); ok && b.At.Before(confirmed) {
				return fmt.Errorf("%s (batch %s) was targeted at %s before batch %s had confirmed it", n, st.Batches[i].Name, version, st.Batches[i-1].Name)
			}
		}
	}
	return nil
}

func (d *demo) failed(err error) {
	d.w.print(fmt.Sprintf("\nFAILED: %v\n", err))
	if d.f == nil {
		return
	}
	for _, n := range d.f.Nodes {
		if b, ok := d.f.Beats.Last(n.Name); ok {
			d.w.print(fmt.Sprintf("  %s last heartbeat: %s\n", n.Name, Describe(b.Heartbeat)))
		}
	}
}

// plan says a rollout's batches: "canary node-3, node-5 → 50% node-1 → 100% node-2, node-4, node-6".
func plan(st rollout.State) string {
	var parts []string
	for i, b := range st.Batches {
		parts = append(parts, b.Name+" "+strings.Join(BatchNodes(st, i), ", "))
	}
	return strings.Join(parts, " → ")
}

func rolledBackFrom(b Beat, version string) bool {
	for _, rb := range b.Rollbacks {
		if rb.From == version {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// oneLine is the first line of a text from the bus, bounded and printable.
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return text.Printable(text.Cut(s, 400))
}

// syncWriter lets the narration and the watch's lines share one output.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) print(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	io.WriteString(s.w, text)
}

// Write lets the builder's progress lines go through the same lock as the narration.
func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
