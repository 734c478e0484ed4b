package launcher

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/sqlitefile"
	"github.com/novox/mesh-host/rollback"
)

// floorVersion is the package's launcher in these tests: the image the unit starts.
const floorVersion = "v1.1.0"

// trialRig is a root with real records and launcher versions on disk, and the floor started by
// the unit on it: enough to test how the floor judges the image the unit ran last.
type trialRig struct {
	root string
	r    *rollback.Records
}

func newTrialRig(t *testing.T) *trialRig {
	t.Helper()
	root := t.TempDir()
	r, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &trialRig{root: root, r: r}
}

// launcher records launcher v as a release delivered it, and confirms it when asked.
func (g *trialRig) launcher(t *testing.T, v string, confirmed bool) {
	t.Helper()
	ctx := context.Background()
	content := []byte("launcher " + v)
	if err := os.MkdirAll(rollback.LauncherDir(g.root, v), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rollback.LauncherPath(g.root, v), content, 0o755); err != nil {
		t.Fatal(err)
	}
	lv := rollback.LauncherVersion{Version: v, Digest: digest.FromBytes(content), Size: int64(len(content)),
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered}, CarriedBy: "v2.0.0"}
	if err := g.r.RecordLauncher(ctx, lv); err != nil {
		t.Fatal(err)
	}
	if confirmed {
		if err := g.r.ConfirmLauncher(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
}

// execs records launcher v as the image running, as the image that execs it does; it is then
// left not ended (it crashed, hung or exited) unless the test ends it.
func (g *trialRig) execs(t *testing.T, v string, floor, trial bool) {
	t.Helper()
	if err := g.r.SetCurrentLauncher(context.Background(), v, floor, trial); err != nil {
		t.Fatal(err)
	}
}

// unitStarts is the unit starting the floor again: a new process on the same records.
func (g *trialRig) unitStarts(t *testing.T) {
	t.Helper()
	cfg := Config{Root: g.root, Floor: filepath.Join(g.root, "floor-mesh-launcher"), Logger: slog.New(slog.DiscardHandler)}.withDefaults()
	l := &Launcher{cfg: cfg, log: cfg.Logger, records: g.r, self: floorVersion, saidSkipped: map[string]bool{}}
	if err := l.unitStarted(context.Background()); err != nil {
		t.Fatalf("unitStarted: %v", err)
	}
	if !l.isFloor || l.floorVersion != floorVersion {
		t.Errorf("after the unit's start: floor %v, floor version %q", l.isFloor, l.floorVersion)
	}
}

func (g *trialRig) output(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g.root, outputName), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// goPanic is what a Go launcher prints as it dies of a panic, after its log lines.
const goPanic = `time=2026-12-02T01:00:00.000Z level=INFO msg="took over as launcher; the host keeps running" root=/var/lib/mesh-host from=v1.1.0 exec_gap=412µs host_pid=4242 version=v2.0.0 trial=true
time=2026-12-02T01:00:00.100Z level=INFO msg="connecting to the bus" url=nats://mesh:hunter2@bus.example:4222
panic: assignment to entry in nil map

goroutine 1 gp=0xc000002380 m=0 mp=0x9c6b40 [running]:
panic({0x6a3e20?, 0x7b9c10?})
	/usr/local/go/src/runtime/panic.go:802 +0x168
github.com/novox/mesh-host/launcher.(*Launcher).loop(0xc0001a2000, {0x7c1e28, 0xc0000a4000})
	/build/launcher/loop.go:88 +0x2f4
github.com/novox/mesh-host/launcher.Run({0x7c1e28, 0xc0000a4000}, {{0x7ffd3a0c4e5e, 0x13}, {0x5, 0x34630b8a000, 0x2540be400, 0x12a05f200}, ...})
	/build/launcher/launcher.go:206 +0x8c5
main.main()
	/build/cmd/mesh-launcher/main.go:97 +0x6b4

goroutine 18 gp=0xc000102a80 m=nil [select]:
github.com/novox/mesh-host/launcher.startWatchdog.func1()
	/build/launcher/notify.go:61 +0x10f
created by github.com/novox/mesh-host/launcher.startWatchdog in goroutine 1
	/build/launcher/notify.go:55 +0x1b0
`

// goAbort is a Go launcher killed by the watchdog's SIGABRT: the signal, every goroutine, then
// the registers.
var goAbort = `time=2026-12-02T01:00:00.000Z level=INFO msg="took over as launcher" root=/var/lib/mesh-host from=v1.1.0 trial=true
SIGABRT: abort
PC=0x4732e1 m=0 sigcode=0

goroutine 0 gp=0x9c5f20 m=0 mp=0x9c6b40 [idle]:
runtime.futex(0x9c6c80, 0x80, 0x0, 0x0, 0x0, 0x0)
	/usr/local/go/src/runtime/sys_linux_amd64.s:557 +0x21 fp=0x7ffd3a0c3e50 sp=0x7ffd3a0c3e48 pc=0x4732e1
runtime.futexsleep(0x7ffd3a0c3ec8?, 0x4481f3?, 0x7ffd3a0c3ec8?)
	/usr/local/go/src/runtime/lock_futex.go:69 +0x30 fp=0x7ffd3a0c3ea0 sp=0x7ffd3a0c3e50 pc=0x4096f0
runtime.notesleep(0x9c6c80)
	/usr/local/go/src/runtime/lock_futex.go:171 +0x87 fp=0x7ffd3a0c3ed8 sp=0x7ffd3a0c3ea0 pc=0x409bc7
runtime.mPark(...)
	/usr/local/go/src/runtime/proc.go:1887
runtime.stopm()
	/usr/local/go/src/runtime/proc.go:2907 +0x8c fp=0x7ffd3a0c3f08 sp=0x7ffd3a0c3ed8 pc=0x44274c

goroutine 1 gp=0xc000002380 m=nil [sleep, 14 minutes]:
time.Sleep(0x34630b8a000)
	/usr/local/go/src/runtime/time.go:338 +0x167
main.main()
	/build/cmd/mesh-launcher/main.go:40 +0x2a5
` + registers()

func registers() string {
	var b strings.Builder
	for _, r := range []string{"rax", "rbx", "rcx", "rdx", "rdi", "rsi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip", "rflags", "cs", "fs", "gs"} {
		fmt.Fprintf(&b, "%-6s 0x%x\n", r, len(r)*0x1111)
	}
	return b.String()
}

const recordsError = `time=2026-12-02T01:00:00.000Z level=INFO msg="took over as launcher" root=/var/lib/mesh-host from=v1.1.0 trial=true
time=2026-12-02T01:00:00.200Z level=ERROR msg="mesh-launcher cannot run" err="records /var/lib/mesh-host/records.db: open: database is locked" bus=nats://mesh:hunter2@bus.example:4222
`

func TestLastOutputSaysHowTheLauncherEnded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		file    *string // nil: no file
		how     string  // how must equal it
		has     []string
		hasNot  []string
		maxSize int
	}{
		{name: "a Go panic", file: ptr(goPanic), how: "it crashed: panic: assignment to entry in nil map",
			has:    []string{"took over as launcher", "panic: assignment to entry in nil map", "(*Launcher).loop", "main.main()"},
			hasNot: []string{"goroutine 18", "startWatchdog", "hunter2"}},
		{name: "a SIGABRT from the watchdog, registers left out", file: ptr(goAbort), how: "it hung and the watchdog killed it (SIGABRT)",
			has: []string{"took over as launcher", "SIGABRT: abort", "PC=0x4732e1"}, hasNot: []string{"rflags", "rax "}},
		{name: "a fatal error", file: ptr("level=INFO msg=x\nfatal error: concurrent map writes\n\ngoroutine 7 [running]:\n"),
			how: "it crashed: fatal error: concurrent map writes", has: []string{"level=INFO msg=x", "fatal error: concurrent map writes"}},
		{name: "an ERROR log line, its URL's password redacted", file: ptr(recordsError),
			how:    `it failed: time=2026-12-02T01:00:00.200Z level=ERROR msg="mesh-launcher cannot run" err="records /var/lib/mesh-host/records.db: open: database is locked" bus=nats://mesh:xxxxx@bus.example:4222`,
			has:    []string{"database is locked", "nats://mesh:xxxxx@bus.example:4222"},
			hasNot: []string{"hunter2"}},
		{name: "the last ERROR line is the one said", file: ptr("level=ERROR msg=first\nlevel=INFO msg=between\nlevel=ERROR msg=last\nlevel=INFO msg=after\n"),
			how: "it failed: level=ERROR msg=last"},
		{name: "only INFO lines say nothing of how", file: ptr("level=INFO msg=one\nlevel=INFO msg=two\n"), how: howUnknown,
			has: []string{"msg=one\nlevel=INFO msg=two"}},
		{name: "an empty file", file: ptr(""), how: howUnknown},
		{name: "no file", how: howUnknown},
		{name: "a crash after a flood of long lines is found, the output bounded",
			file: ptr(strings.Repeat("level=INFO msg="+strings.Repeat("y", 10<<10)+"\n", 20) + goPanic),
			how:  "it crashed: panic: assignment to entry in nil map", has: []string{"panic: assignment"}, maxSize: 2 * tailLines * 520},
		{name: "a crash after a line longer than any log line is still found",
			file: ptr("level=INFO msg=" + strings.Repeat("z", 200<<10) + "\n" + goPanic),
			how:  "it crashed: panic: assignment to entry in nil map", has: []string{"panic: assignment"}, maxSize: 2 * tailLines * 520},
		{name: "a crash line too long is cut", file: ptr("panic: " + strings.Repeat("p", 10<<10) + "\n"),
			has: []string{"panic: ppp"}, maxSize: 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != nil {
				if err := os.WriteFile(filepath.Join(root, outputName), []byte(*tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out, how := lastOutput(root)
			if tc.how != "" && how != tc.how {
				t.Errorf("how = %q\nwant   %q", how, tc.how)
			}
			if len(how) > 300 {
				t.Errorf("how is %d bytes: unbounded", len(how))
			}
			for _, s := range tc.has {
				if !strings.Contains(out, s) {
					t.Errorf("output does not have %q:\n%s", s, out)
				}
			}
			for _, s := range tc.hasNot {
				if strings.Contains(out, s) || strings.Contains(how, s) {
					t.Errorf("output has %q:\n%s", s, out)
				}
			}
			if tc.file == nil || *tc.file == "" {
				if out != "" {
					t.Errorf("output %q of nothing", out)
				}
			} else if out != strings.TrimSpace(out) || strings.Contains(out, "\n\n\n") {
				t.Errorf("output has blank lines at its ends or a run of them: %q", out)
			}
			if tc.maxSize > 0 && len(out) > tc.maxSize {
				t.Errorf("output is %d bytes, want at most %d", len(out), tc.maxSize)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// crashEnv makes TestCrashingLauncherHelper, run in a child test binary, die as the mode says
// after CaptureOutput: how a delivered launcher leaves launcher.out.
const crashEnv = "MESH_LAUNCHER_TEST_CRASH"

func TestCrashingLauncherHelper(t *testing.T) {
	mode, root, ok := strings.Cut(os.Getenv(crashEnv), ":")
	if !ok {
		t.Skip("run as a child by TestLastOutputOfARealGoCrash")
	}
	log := CaptureOutput(root, slog.New(slog.DiscardHandler))
	log.Info("took over as launcher", "from", floorVersion, "bus", "nats://mesh:hunter2@bus:4222")
	switch mode {
	case "panic":
		// As the runtime says it for a nil map (staticcheck refuses the real assignment).
		panic("assignment to entry in nil map")
	case "abort":
		syscall.Kill(os.Getpid(), syscall.SIGABRT)
		time.Sleep(time.Minute)
	case "error":
		log.Error("mesh-launcher cannot run", "err", "records.db: database is locked")
		os.Exit(1)
	}
}

// What the Go runtime really writes through CaptureOutput as a launcher dies is read for how it
// ended.
func TestLastOutputOfARealGoCrash(t *testing.T) {
	for _, tc := range []struct{ mode, how string }{
		{"panic", "it crashed: panic: assignment to entry in nil map"},
		{"abort", "it hung and the watchdog killed it (SIGABRT)"},
		{"error", `it failed: time=`},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			root := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashingLauncherHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), crashEnv+"="+tc.mode+":"+root, "GOTRACEBACK=single")
			b, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the crashing launcher exited 0:\n%s", b)
			}
			out, how := lastOutput(root)
			t.Logf("how: %s\n%s", how, out)
			if !strings.HasPrefix(how, tc.how) {
				t.Errorf("how = %q, want it to begin %q\noutput:\n%s", how, tc.how, out)
			}
			if !strings.Contains(out, "took over as launcher") || strings.Contains(out+how, "hunter2") {
				t.Errorf("output lacks the log line before the end, or has the password:\n%s", out)
			}
		})
	}
}

func TestCappedFileStartsAgainPastItsCap(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"writes within the cap are kept", []string{"0123456789\n", "abcdefghij\n"}, "0123456789\nabcdefghij\n"},
		{"a write past the cap starts the file again with it", []string{strings.Repeat("a", 60), strings.Repeat("b", 50)}, strings.Repeat("b", 50)},
		{"a write exactly to the cap is kept", []string{strings.Repeat("a", 60), strings.Repeat("b", 40)}, strings.Repeat("a", 60) + strings.Repeat("b", 40)},
		{"a write longer than the cap is cut to its beginning within the cap", []string{"x", "level=ERROR " + strings.Repeat("c", 150) + "\n"}, "level=ERROR " + strings.Repeat("c", 87) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), outputName))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c := &cappedFile{f: f, max: 100}
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Errorf("Write = %d, %v; want %d, nil", n, err, len(w))
				}
				if fi, _ := f.Stat(); fi.Size() > c.max {
					t.Errorf("file is %d bytes, past its cap %d", fi.Size(), c.max)
				}
			}
			got, _ := os.ReadFile(f.Name())
			if string(got) != tc.want {
				t.Errorf("file holds %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFloorJudgesTheLauncherTheUnitRanLast(t *testing.T) {
	type rb struct{ from, to string }
	for _, tc := range []struct {
		name string
		// confirmed and trial are the launcher versions recorded on disk besides the floor.
		confirmed, trial []string
		before           []rb   // launcher rollbacks recorded before
		output           string // ROOT/launcher.out as the image left it
		// left is the image the unit ran last; leftTrial and leftFloor say how it ran.
		left                 string
		leftTrial, leftFloor bool
		ended                bool   // it recorded its end as a launcher should
		otherBoot            bool   // it ran on another boot
		unitExit             string // systemd's word, as the unit's ExecStopPost records it ("result code status")
		confirmedRun         bool   // it saw its host pulse before it was left
		times                int    // the unit starts the floor this many times, left each time (default 1)
		bad                  string // the version marked bad (only it), "" for none
		badSays              []string
		rollbacks            []rb // what was recorded, newest first (besides before)
		pinned               bool
		runsNext             string // what ChooseLauncher names for the floor after the judgement
	}{
		{
			name:      "a trial launcher left not ended is marked bad with its output and rolled back to the confirmed launcher",
			confirmed: []string{"v1.2.0"}, trial: []string{"v1.3.0"}, output: goPanic,
			left: "v1.3.0", leftTrial: true,
			bad:       "v1.3.0",
			badSays:   []string{"launcher v1.3.0 ended on trial without confirming: it crashed: panic: assignment to entry in nil map"},
			rollbacks: []rb{{"v1.3.0", "v1.2.0"}},
			runsNext:  "v1.2.0",
		},
		{
			name:  "a trial launcher left not ended with nothing else on disk rolls back to the floor",
			trial: []string{"v1.3.0"}, output: goAbort,
			left: "v1.3.0", leftTrial: true,
			bad:       "v1.3.0",
			badSays:   []string{"it hung and the watchdog killed it (SIGABRT)"},
			rollbacks: []rb{{"v1.3.0", floorVersion}},
		},
		{
			name:  "a trial launcher that left no output is bad for ending without saying why",
			trial: []string{"v1.3.0"}, confirmed: []string{"v1.2.0"},
			left: "v1.3.0", leftTrial: true,
			bad:       "v1.3.0",
			badSays:   []string{howUnknown},
			rollbacks: []rb{{"v1.3.0", "v1.2.0"}},
			runsNext:  "v1.2.0",
		},
		{
			name:  "a trial launcher left not ended rolls back to the newest launcher not bad, even one not yet tried (design.md: the newest good launcher)",
			trial: []string{"v1.2.0", "v1.3.0"}, output: goPanic,
			left: "v1.3.0", leftTrial: true,
			bad:       "v1.3.0",
			rollbacks: []rb{{"v1.3.0", "v1.2.0"}},
			runsNext:  "v1.2.0",
		},
		{
			name:      "a trial launcher left not ended rolls back to the floor when the only confirmed one is older than the floor",
			confirmed: []string{"v1.0.5"}, trial: []string{"v1.3.0"}, output: goPanic,
			left: "v1.3.0", leftTrial: true,
			bad:       "v1.3.0",
			rollbacks: []rb{{"v1.3.0", floorVersion}},
		},
		{
			name:      "a confirmed launcher left not ended once runs again",
			confirmed: []string{"v1.2.0"}, output: goPanic,
			left:     "v1.2.0",
			runsNext: "v1.2.0",
		},
		{
			name:      "a confirmed launcher left not ended twice in a row pins the floor",
			confirmed: []string{"v1.2.0"}, output: goPanic,
			left: "v1.2.0", times: 2,
			rollbacks: []rb{{"v1.2.0", floorVersion}},
			pinned:    true,
		},
		{
			name:      "the launcher rolled back to left not ended pins the floor at once",
			confirmed: []string{"v1.2.0"}, trial: []string{"v1.3.0"},
			before: []rb{{"v1.3.0", "v1.2.0"}}, output: recordsError,
			left:      "v1.2.0",
			rollbacks: []rb{{"v1.2.0", floorVersion}},
			pinned:    true,
		},
		{
			name:  "a trial launcher SIGKILLed from outside (systemd's word) is not judged and runs again on trial",
			trial: []string{"v1.3.0"}, confirmed: []string{"v1.2.0"}, output: goPanic,
			left: "v1.3.0", leftTrial: true, unitExit: "signal killed KILL",
			runsNext: "v1.3.0",
		},
		{
			name:  "a trial launcher the OOM killer took is not judged",
			trial: []string{"v1.3.0"},
			left:  "v1.3.0", leftTrial: true, unitExit: "oom-kill killed KILL",
			runsNext: "v1.3.0",
		},
		{
			name:  "a trial launcher systemd's watchdog killed is bad, in systemd's words",
			trial: []string{"v1.3.0"}, confirmed: []string{"v1.2.0"},
			left: "v1.3.0", leftTrial: true, unitExit: "watchdog dumped ABRT",
			bad:       "v1.3.0",
			badSays:   []string{"it hung and systemd's watchdog killed it (systemd: result watchdog, dumped ABRT)"},
			rollbacks: []rb{{"v1.3.0", "v1.2.0"}},
			runsNext:  "v1.2.0",
		},
		{
			name:  "a trial launcher that exited with a status is bad, and the reason adds systemd's word",
			trial: []string{"v1.3.0"}, output: recordsError,
			left: "v1.3.0", leftTrial: true, unitExit: "exit-code exited 1",
			bad:       "v1.3.0",
			badSays:   []string{"it failed:", "(systemd: result exit-code, exited 1)"},
			rollbacks: []rb{{"v1.3.0", floorVersion}},
		},
		{
			name:      "the launcher rolled back to that ran a host before it was left runs again once",
			confirmed: []string{"v1.2.0"},
			before:    []rb{{"v1.3.0", "v1.2.0"}}, output: recordsError,
			left: "v1.2.0", confirmedRun: true,
			runsNext: "v1.2.0",
		},
		{
			name:  "a trial launcher left not ended on another boot is not judged",
			trial: []string{"v1.3.0"}, output: goPanic,
			left: "v1.3.0", leftTrial: true, otherBoot: true,
			runsNext: "v1.3.0",
		},
		{
			name:      "the floor left not ended is not judged",
			confirmed: []string{"v1.2.0"}, output: goPanic,
			left: floorVersion, leftFloor: true,
			runsNext: "v1.2.0",
		},
		{
			name:  "a trial launcher that ended as a launcher should is not judged",
			trial: []string{"v1.3.0"}, output: goPanic,
			left: "v1.3.0", leftTrial: true, ended: true,
			runsNext: "v1.3.0",
		},
		{
			name:     "the first start of the unit has nothing to judge",
			trial:    []string{"v1.3.0"},
			runsNext: "v1.3.0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := newTrialRig(t)
			for _, v := range tc.confirmed {
				g.launcher(t, v, true)
			}
			for _, v := range tc.trial {
				g.launcher(t, v, false)
			}
			for _, b := range tc.before {
				if err := g.r.RecordLauncherRollback(ctx, rollback.LauncherRollback{From: b.from, To: b.to, Reason: "before"}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.output != "" {
				g.output(t, tc.output)
			}
			for range max(tc.times, 1) {
				if tc.left != "" {
					// The unit's start, then the floor exec'ing the image that is left.
					g.execs(t, tc.left, tc.leftFloor, tc.leftTrial)
				}
				if tc.ended {
					if err := g.r.EndCurrentLauncher(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if tc.otherBoot {
					setCurrentBoot(t, g.root, "a boot before this one")
				}
				if tc.confirmedRun {
					if err := g.r.ConfirmLauncher(ctx, tc.left); err != nil {
						t.Fatal(err)
					}
				}
				if tc.unitExit != "" {
					w := strings.Fields(tc.unitExit)
					env := map[string]string{"SERVICE_RESULT": w[0], "EXIT_CODE": w[1], "EXIT_STATUS": w[2]}
					if err := RecordUnitExit(ctx, g.root, func(k string) string { return env[k] }); err != nil {
						t.Fatal(err)
					}
				}
				g.unitStarts(t)
			}

			all, err := g.r.Launchers(ctx, g.root)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range all {
				isBad := !l.Bad.IsZero()
				if isBad != (l.Version == tc.bad) {
					t.Errorf("%s: bad %v (%q), want bad %v", l.Version, isBad, l.BadReason, l.Version == tc.bad)
				}
				if !isBad {
					continue
				}
				for _, s := range tc.badSays {
					if !strings.Contains(l.BadReason, s) {
						t.Errorf("%s is bad because %q; want it to say %q", l.Version, l.BadReason, s)
					}
				}
				if tc.output != "" && (l.BadOutput == "" || !strings.Contains(tc.output, strings.SplitN(l.BadOutput, "\n", 2)[0])) {
					t.Errorf("%s's bad output %q is not what it left in launcher.out", l.Version, l.BadOutput)
				}
				if strings.Contains(l.BadReason+l.BadOutput, "hunter2") {
					t.Errorf("%s's bad mark keeps a password", l.Version)
				}
			}
			rbs, err := g.r.LauncherRollbacks(ctx, 100)
			if err != nil {
				t.Fatal(err)
			}
			rbs = rbs[:len(rbs)-len(tc.before)]
			if len(rbs) != len(tc.rollbacks) {
				t.Errorf("rollbacks recorded %+v, want %+v", rbs, tc.rollbacks)
			}
			for i := range min(len(rbs), len(tc.rollbacks)) {
				if got := (rb{rbs[i].From, rbs[i].To}); got != tc.rollbacks[i] || rbs[i].Reason == "" {
					t.Errorf("rollback %d: %+v (reason %q), want %+v", i, got, rbs[i].Reason, tc.rollbacks[i])
				}
				if tc.bad != "" && rbs[i].Output == "" && tc.output != "" {
					t.Errorf("rollback %d keeps no output", i)
				}
			}

			cur, err := g.r.CurrentLauncher(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if cur.Version != floorVersion || !cur.Floor || cur.Trial || cur.Ended || cur.FloorVersion != floorVersion || cur.UnitStarted.IsZero() {
				t.Errorf("after the unit's start the records say %+v; want the floor %s running", cur, floorVersion)
			}
			if (cur.FloorPinned != "") != tc.pinned {
				t.Errorf("floor pinned %q, want pinned %v", cur.FloorPinned, tc.pinned)
			}
			c, err := g.r.ChooseLauncher(ctx, g.root, floorVersion)
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != tc.runsNext {
				t.Errorf("the floor runs %q next (skipped %+v), want %q", c.Version, c.Skipped, tc.runsNext)
			}
		})
	}
}

// setCurrentBoot rewrites the boot the records say the image running started on, as records a
// machine that rebooted since would hold.
func setCurrentBoot(t *testing.T, root, boot string) {
	t.Helper()
	db, _, err := sqlitefile.Open(context.Background(), rollback.RecordsPath(root))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE launcher SET current_boot = ? WHERE id = 1`, boot); err != nil {
		t.Fatal(err)
	}
}
