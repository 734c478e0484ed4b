package rollback

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/sqlitefile"
)

// launcherModel drives the records one start at a time as launcher/loop.go does (Choose,
// Standing, BeginStart, EndStart, then the policy's verdict and what it records), without
// processes: the injected clock stands in for time passing, so a restart's backoff moves the
// clock and nothing sleeps. A real launcher loop forks a host per start; 100,000 of them would
// take the better part of an hour on a loaded machine, and the records see the same calls.
type launcherModel struct {
	t       *testing.T
	r       *Records
	c       *clock
	root    string
	p       Policy
	failed  bool // the launcher stopped in its failed state; the next start is an operator's restart
	release int  // releases staged so far (v1.<n>.0)
	// every is how many starts apart releases come in the patterns that make them: often in
	// the short comparisons, rarely in the long runs, where versions would otherwise be what
	// grows (each version's own records stay; docs/design.md).
	every int
}

// run is what the host does in one start.
type run struct {
	confirm bool          // completes a reconcile (Confirm) early in its run
	dur     time.Duration // how long it runs
	end     Outcome       // OutcomeFailed (exit 1), OutcomeStoodAside (exit 0), OutcomeDeadline, OutcomeHung
	stage   bool          // a new release is staged while it runs (it then exits 0 to stand aside)
	reboot  bool          // the machine reboots after this start
}

// observed is everything the launcher decides and shows after one start: the policy's view
// before and after (runOnce, afterFailure), its verdict, the STATUS= line's inputs, the
// heartbeat's rollbacks and known-good, and `mesh-launcher status --json`.
type observed struct {
	Version   string
	Before    Standing
	End       Outcome
	After     Standing
	Verdict   Verdict
	Confirmed bool
	Rollbacks []Rollback
	KnownGood string
	Status    string
}

// pattern is how the host behaves in start i of version v (i counts every start of the run).
type pattern struct {
	name  string
	setup func(m *launcherModel)
	host  func(m *launcherModel, rng *rand.Rand, i int, v string, confirmed bool) run
}

// output is a host's last words: longer than a start keeps, different every start.
func output(i int, v string) string {
	return fmt.Sprintf("start %d of %s\n", i, v) + strings.Repeat("x", 10<<10) + fmt.Sprintf("\npanic: machine fault %d", i)
}

func (m *launcherModel) stageNext() {
	m.release++
	stage(m.t, m.root, fmt.Sprintf("v1.%d.0", m.release), "")
}

// start runs one start of the version Choose names and returns what the launcher would
// decide and show; observe adds the status report (costly, so only when compared).
func (m *launcherModel) start(ctx context.Context, pat pattern, rng *rand.Rand, i int, observe bool) observed {
	t := m.t
	if m.failed { // an operator restarted the launcher out of its failed state (Launcher.prepare)
		if _, err := m.r.EndInterrupted(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := m.r.ClearFailed(ctx); err != nil {
			t.Fatal(err)
		}
		m.failed = false
	}
	ch, err := m.r.Choose(ctx, m.root)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Version == "" {
		t.Fatalf("start %d: nothing to run (%+v)", i, ch)
	}
	var o observed
	o.Version = ch.Version
	if observe {
		if o.Before, err = m.r.Standing(ctx, m.root, o.Version, m.p); err != nil {
			t.Fatal(err)
		}
	} else if err := m.r.db.QueryRowContext(ctx, `SELECT confirmed_at IS NOT NULL FROM versions WHERE version = ?`, o.Version).Scan(&o.Before.Confirmed); err != nil {
		t.Fatal(err) // all the start needs to know of its standing, read the cheap way for 100,000 starts
	}
	h := pat.host(m, rng, i, o.Version, o.Before.Confirmed)
	id, err := m.r.BeginStart(ctx, o.Version)
	if err != nil {
		t.Fatal(err)
	}
	if h.confirm {
		m.c.advance(time.Second)
		if _, err := m.r.Confirm(ctx, m.root, o.Version, id); err != nil {
			t.Fatal(err)
		}
	}
	if observe {
		if o.Confirmed, err = m.r.StartConfirmed(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if h.stage {
		m.stageNext()
	}
	m.c.advance(h.dur)
	e := End{Outcome: h.end, ExitCode: 1, Output: output(i, o.Version)}
	switch h.end {
	case OutcomeDeadline, OutcomeHung:
		e.ExitCode, e.Signal = -1, "killed"
	case OutcomeStoodAside: // exit 0: standing aside only if Choose names another (judgeExit)
		e.ExitCode, e.Outcome = 0, OutcomeFailed
		if now, err := m.r.Choose(ctx, m.root); err != nil {
			t.Fatal(err)
		} else if now.Version != o.Version {
			e.Outcome = OutcomeStoodAside
		}
	}
	o.End = e.Outcome
	if err := m.r.EndStart(ctx, id, e); err != nil {
		t.Fatal(err)
	}
	if e.Outcome != OutcomeStoodAside {
		m.afterFailure(ctx, &o, e)
	}
	if h.reboot {
		m.c.reboot()
	}
	if !observe {
		return o
	}
	if o.Rollbacks, err = m.r.Rollbacks(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if o.KnownGood, err = m.r.KnownGood(ctx, m.root); err != nil {
		t.Fatal(err)
	}
	st, err := m.r.Status(ctx, m.root, m.p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	o.Status = string(b)
	return o
}

// afterFailure is the launcher's: judge, and record what the verdict says; a restart's delay
// passes on the injected clock.
func (m *launcherModel) afterFailure(ctx context.Context, o *observed, e End) {
	t := m.t
	s, err := m.r.Standing(ctx, m.root, o.Version, m.p)
	if err != nil {
		t.Fatal(err)
	}
	o.After, o.Verdict = s, m.p.Judge(s)
	switch o.Verdict.Action {
	case Restart:
		m.c.advance(o.Verdict.Delay)
	case RollBack:
		reason := fmt.Sprintf("%s failed %d times without confirming (last: %s)", o.Version, s.Failures, e.Describe())
		if err := m.r.MarkBad(ctx, o.Version, reason); err != nil {
			t.Fatal(err)
		}
		ch, err := m.r.Choose(ctx, m.root)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.r.RecordRollback(ctx, Rollback{From: o.Version, To: ch.Version, Reason: reason, Output: e.Output}); err != nil {
			t.Fatal(err)
		}
	case StopRolledBack:
		rbs, err := m.r.Rollbacks(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(rbs) == 1 && rbs[0].To == o.Version {
			if _, err := m.r.WithdrawBad(ctx, rbs[0].From); err != nil {
				t.Fatal(err)
			}
		}
		m.stop(ctx, "the machine is the problem")
	case StopNoKnownGood:
		m.stop(ctx, "nothing to roll back to")
	}
}

func (m *launcherModel) stop(ctx context.Context, reason string) {
	if err := m.r.SetFailed(ctx, reason); err != nil {
		m.t.Fatal(err)
	}
	m.failed = true
	m.c.advance(time.Minute) // an operator, or systemd, starts the launcher again
}

// crashLoopPatterns are the ways a node restarts forever that the records must survive.
var crashLoopPatterns = []pattern{
	{
		// A confirmed version that crashes for a machine reason: restarted after the capped
		// backoff forever, now and then recovering for an hour, and rebooting.
		name:  "confirmed version crash-looping",
		setup: func(m *launcherModel) { m.stageNext() },
		host: func(_ *launcherModel, _ *rand.Rand, i int, _ string, _ bool) run {
			if i%200 == 0 {
				return run{confirm: true, dur: time.Hour, end: OutcomeFailed}
			}
			return run{dur: 2 * time.Second, end: OutcomeFailed, reboot: i%301 == 300}
		},
	},
	{
		// A confirmed version that works; releases that crash on start reach the limit, are
		// marked bad and rolled back from; the known-good one runs until the next release.
		name:  "unconfirmed versions reaching the limit",
		setup: func(m *launcherModel) { m.stageNext() },
		host: func(m *launcherModel, _ *rand.Rand, i int, v string, confirmed bool) run {
			if confirmed || m.release == 1 {
				if i%m.every == 0 {
					return run{confirm: true, dur: time.Hour, end: OutcomeStoodAside, stage: true}
				}
				return run{confirm: true, dur: 10 * time.Minute, end: OutcomeFailed}
			}
			return run{dur: time.Second, end: OutcomeFailed}
		},
	},
	{
		// A release rolled back from, then the version rolled back to fails too: the launcher
		// stops, the bad mark is lifted, an operator restarts it, and it all happens again.
		name: "rollback, and the version rolled back to failing",
		setup: func(m *launcherModel) {
			m.stageNext()
			ctx := m.t.Context()
			see(m.t, m.r, m.root)
			id, err := m.r.BeginStart(ctx, "v1.1.0")
			if err != nil {
				m.t.Fatal(err)
			}
			if _, err := m.r.Confirm(ctx, m.root, "v1.1.0", id); err != nil {
				m.t.Fatal(err)
			}
			if err := m.r.EndStart(ctx, id, End{Outcome: OutcomeStoodAside}); err != nil {
				m.t.Fatal(err)
			}
			m.stageNext()
		},
		host: func(_ *launcherModel, _ *rand.Rand, _ int, _ string, _ bool) run {
			return run{dur: time.Second, end: OutcomeFailed}
		},
	},
	{
		// The only version never confirms: the launcher stops with nothing to roll back to,
		// an operator restarts it, again and again; now a crash, now the confirm deadline.
		name:  "failed state, nothing to roll back to",
		setup: func(m *launcherModel) { m.stageNext() },
		host: func(_ *launcherModel, _ *rand.Rand, i int, _ string, _ bool) run {
			if i%7 == 3 {
				return run{dur: 5 * time.Minute, end: OutcomeDeadline}
			}
			return run{dur: time.Second, end: OutcomeFailed}
		},
	},
	{
		// Everything at once, at random (seeded): every outcome, confirmations, releases,
		// reboots and the wall clock stepped.
		name:  "mixed",
		setup: func(m *launcherModel) { m.stageNext() },
		host: func(m *launcherModel, rng *rand.Rand, i int, _ string, confirmed bool) run {
			if i%997 == 500 {
				m.c.stepWall(time.Duration(rng.IntN(48)-24) * time.Hour)
			}
			h := run{dur: time.Duration(rng.IntN(300)) * time.Second, reboot: rng.IntN(2000) == 0}
			h.confirm = rng.IntN(10) == 0
			switch n := rng.IntN(20); {
			case n == 0 && !confirmed:
				h.end = OutcomeDeadline
			case n == 1:
				h.end = OutcomeHung
			case n == 2:
				h.end = OutcomeStoodAside
			default:
				h.end = OutcomeFailed
			}
			if i%m.every == 0 {
				h.end, h.stage = OutcomeStoodAside, true
			}
			return h
		},
	},
}

func newModel(t *testing.T, pat pattern, every int) *launcherModel {
	t.Helper()
	root := fastRoot(t)
	r, c := openRecords(t, root)
	m := &launcherModel{t: t, r: r, c: c, root: root, p: DefaultPolicy, every: every}
	pat.setup(m)
	return m
}

// Pruning keeps what the launcher decides by and what it shows: over every crash-loop
// pattern, a pruned and an unpruned run of the same starts make the same decisions and the
// same STATUS= inputs, heartbeat and `status --json`, start by start.
func TestPruningLeavesEveryDecisionAndReportUnchanged(t *testing.T) {
	t.Parallel()
	skipUnderRace(t) // each pattern has roots of its own; the package's longest two run side by side
	const starts = 500
	for _, pat := range crashLoopPatterns {
		t.Run(pat.name, func(t *testing.T) {
			ctx := t.Context()
			pruned, unpruned := newModel(t, pat, 50), newModel(t, pat, 50)
			unpruned.r.unpruned = true
			rngP, rngU := rand.New(rand.NewPCG(1, 2)), rand.New(rand.NewPCG(1, 2))
			actions := map[Action]int{}
			for i := range starts {
				got := pruned.start(ctx, pat, rngP, i, true)
				want := unpruned.start(ctx, pat, rngU, i, true)
				if !reflect.DeepEqual(got, want) {
					gj, _ := json.MarshalIndent(got, "", " ")
					wj, _ := json.MarshalIndent(want, "", " ")
					t.Fatalf("start %d: pruned records decide or show otherwise than unpruned ones:\npruned:   %s\nunpruned: %s", i, gj, wj)
				}
				if got.End != OutcomeStoodAside {
					actions[got.Verdict.Action]++
				}
			}
			p, u := countStarts(t, pruned.r), countStarts(t, unpruned.r)
			t.Logf("%d starts: verdicts %v; starts kept %d pruned, %d unpruned", starts, actions, p, u)
			if p >= u {
				t.Errorf("the pruned records keep %d starts, the unpruned %d: nothing was pruned", p, u)
			}
		})
	}
}

// The patterns make every verdict the comparison is meant to cover.
func TestCrashLoopPatternsReachEveryVerdict(t *testing.T) {
	seen := map[Action]bool{}
	for _, pat := range crashLoopPatterns {
		m := newModel(t, pat, 50)
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 300 {
			o := m.start(t.Context(), pat, rng, i, false)
			if o.End != OutcomeStoodAside {
				seen[o.Verdict.Action] = true
			}
		}
	}
	for _, a := range []Action{Restart, RollBack, StopRolledBack, StopNoKnownGood} {
		if !seen[a] {
			t.Errorf("no pattern reached the verdict %q", a)
		}
	}
}

// fastRoot is an empty root on a tmpfs where there is one: the records are a real SQLite file
// all the same, but its fsyncs (synchronous=FULL, every commit) cost nothing, which is what lets
// 100,000 starts run in seconds, not the better part of an hour on a shared disk.
func fastRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "records-test-*")
	if err != nil {
		return newRoot(t)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(VersionsDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func countStarts(t *testing.T, r *Records) int {
	t.Helper()
	var n int
	if err := r.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM starts`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// recordsSize is records.db and its -wal after a checkpoint that truncates the WAL, and the
// WAL's size before it (its high-water mark since the last truncation).
func recordsSize(t *testing.T, r *Records) (total, walBefore int64) {
	t.Helper()
	walBefore = fileSize(t, r.path+"-wal")
	if _, err := r.db.ExecContext(t.Context(), `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	return fileSize(t, r.path) + fileSize(t, r.path+"-wal"), walBefore
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A node whose host crash-loops restarts up to 1,440 times a day; each start kept ~10 KiB of
// output for ever (5 GB a year). 100,000 starts leave records.db (with its -wal, after a
// checkpoint) under 2 MiB. The starts go through the start/outcome API (BeginStart, EndStart)
// as the launcher records a confirmed version crash-looping: each restart after the backoff the
// policy gives the failures within its interval, on the injected clock (nothing sleeps); now and
// then a start that confirms, a reboot, a release that fails to its limit and is rolled back
// (Standing, Judge, MarkBad, RecordRollback), and the failed state left by an operator. The
// model above, with Standing and Judge at every start, makes the same calls and is compared
// with unpruned records in TestPruningLeavesEveryDecisionAndReportUnchanged; at 100,000 starts
// it would take minutes on a shared machine, so this drives the calls directly.
func TestRecordsStayUnderTwoMiBOverAHundredThousandStarts(t *testing.T) {
	t.Parallel()
	skipUnderRace(t)
	const starts, limit, every = 100_000, 2 << 20, 10_000
	ctx := t.Context()
	root := fastRoot(t)
	r, c := openRecords(t, root)
	p := DefaultPolicy
	stage(t, root, "v1.0.0", "")
	see(t, r, root)
	startOf := func(v string, i int, e End) int64 {
		id, err := r.BeginStart(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		e.Output = output(i, v)
		if e.Outcome == OutcomeFailed {
			e.ExitCode = 1
		}
		if err := r.EndStart(ctx, id, e); err != nil {
			t.Fatal(err)
		}
		return id
	}
	var recent []time.Duration // the boot-clock ends of the failures within the interval
	releases, walHigh := 0, int64(0)
	for i := 0; i < starts; i++ {
		switch {
		case i%500 == 0: // recovered for an hour: confirms, then crashes again
			id, err := r.BeginStart(ctx, "v1.0.0")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Confirm(ctx, root, "v1.0.0", id); err != nil {
				t.Fatal(err)
			}
			c.advance(time.Hour)
			if err := r.EndStart(ctx, id, End{Outcome: OutcomeFailed, ExitCode: 1, Output: output(i, "v1.0.0")}); err != nil {
				t.Fatal(err)
			}
			recent = nil
		case i%every == 250: // a release that crashes on start: three trials, then rolled back
			releases++
			v := fmt.Sprintf("v1.%d.0", releases)
			stage(t, root, v, "")
			see(t, r, root)
			for n := 0; ; n++ {
				startOf(v, i, End{Outcome: OutcomeFailed})
				i++
				s, err := r.Standing(ctx, root, v, p)
				if err != nil {
					t.Fatal(err)
				}
				if verdict := p.Judge(s); verdict.Action == RollBack {
					if err := r.MarkBad(ctx, v, "failed 3 times"); err != nil {
						t.Fatal(err)
					}
					if err := r.RecordRollback(ctx, Rollback{From: v, To: "v1.0.0", Reason: "failed 3 times", Output: output(i, v)}); err != nil {
						t.Fatal(err)
					}
					break
				} else if verdict.Action != Restart || n > p.Limit {
					t.Fatalf("%s after %d failures: %v, want a restart, then a rollback", v, n+1, verdict.Action)
				}
				c.advance(p.Backoff(s.Failures))
			}
			continue
		case i%every == 5000: // the launcher stopped failed; an operator starts it again
			if err := r.SetFailed(ctx, "the machine is the problem"); err != nil {
				t.Fatal(err)
			}
			if _, err := r.ClearFailed(ctx); err != nil {
				t.Fatal(err)
			}
		}
		c.advance(2 * time.Second)
		startOf("v1.0.0", i, End{Outcome: OutcomeFailed})
		now := c.boot().Since
		recent = append(recent, now)
		for len(recent) > 0 && recent[0] < now-p.Interval {
			recent = recent[1:]
		}
		c.advance(p.Backoff(len(recent))) // what Judge says for a confirmed version: restart after it
		if i%3001 == 3000 {
			c.reboot()
			recent = nil
		}
		if (i+1)%every == 0 {
			found := fileSize(t, r.path) + fileSize(t, r.path+"-wal") // as the disk holds them now
			size, wal := recordsSize(t, r)
			walHigh = max(walHigh, wal)
			if found >= limit || size >= limit {
				t.Fatalf("after %d starts records.db and its -wal are %d bytes (%.1f MiB; %d after a checkpoint), want under 2 MiB; %d starts kept",
					i+1, found, float64(found)/(1<<20), size, countStarts(t, r))
			}
		}
	}
	size, _ := recordsSize(t, r)
	st, err := r.Status(ctx, root, p)
	if err != nil {
		t.Fatal(err)
	}
	var total int
	for _, v := range st.Versions {
		total += v.FailuresTotal
	}
	if total < starts {
		t.Errorf("failures_total over all versions = %d after %d failed starts, want every one counted", total, starts)
	}
	t.Logf("after %d starts: records.db %d bytes (%.2f MiB) with its -wal after a checkpoint; %d starts kept; failures_total %d; the -wal reached %d bytes between checkpoints",
		starts, size, float64(size)/(1<<20), countStarts(t, r), total, walHigh)
}

// failures_total is every failed start of a version, all time: it reads the same on a schema-3
// file an older launcher made (nothing pruned, no counter), after the launcher migrates it, and
// after pruning has deleted most of those starts.
func TestFailuresTotalStaysAllTimeAcrossTheMigrationAndPruning(t *testing.T) {
	ctx := t.Context()
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	db, _, err := sqlitefile.Create(ctx, RecordsPath(root), migrations[:pruneSchema-1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO versions (version, digest, first_seen, confirmed_at) VALUES ('v1.0.0', ?, 1, 1)`, sha256Of("binary v1.0.0")); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := db.ExecContext(ctx, `INSERT INTO starts (version, started_at, ended_at, exit_code, outcome, output) VALUES ('v1.0.0', ?, ?, 1, 'failed', 'x')`, i, i); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	total := func(r *Records) int {
		t.Helper()
		st, err := r.Status(ctx, root, DefaultPolicy)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range st.Versions {
			if v.Version == "v1.0.0" {
				return v.FailuresTotal
			}
		}
		t.Fatal("v1.0.0 not in status")
		return 0
	}
	host, err := OpenForHost(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	if got := total(host); got != 20 {
		t.Errorf("failures_total on the schema-3 file = %d, want 20", got)
	}
	host.Close()

	r, c := openRecords(t, root)
	if got := total(r); got != 20 {
		t.Errorf("failures_total after the migration = %d, want 20", got)
	}
	for range 10 {
		c.advance(time.Hour) // each outside the interval: nothing keeps them but their count
		startEnded(t, r, c, "v1.0.0", OutcomeFailed)
	}
	if n := countStarts(t, r); n > keepStarts+1 {
		t.Errorf("%d starts kept, want at most %d", n, keepStarts+1)
	}
	if got := total(r); got != 30 {
		t.Errorf("failures_total after pruning = %d, want 30", got)
	}
}

// skipUnderRace skips a long test of one goroutine's SQLite work in a -race build: it finds no
// race there and takes ten times as long. `make test` runs these without -race.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if raceBuild {
		t.Skip("one goroutine's SQLite work, ten times slower under -race: make test runs it without -race")
	}
}
