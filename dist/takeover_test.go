package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// An upgrade under a running systemd (issue 19, 5; seed 000: a package upgrade never stops the
// host): the postinst and install.sh reload systemd, then ask the running launcher, through
// /proc/MAINPID/exe, whether it takes the new binary by exec. The scripts run with a fake
// systemctl on PATH that records its calls and answers MainPID, and /proc moved into a temp
// directory whose PID/exe is the launcher being asked and self/cgroup where the script runs.

const fakePID = "4242"

// takeoverCase is one running (or not) launcher and what the script must do about it.
type takeoverCase struct {
	name    string
	mainPID string // what `systemctl show -p MainPID --value` prints: "0" when not running
	// exe is the running launcher's image: "real" is the launcher built from this tree, else a
	// script body that records its arguments in DIR/exe.calls and ends as given.
	exe         string
	cgroup      string // /proc/self/cgroup of the script
	enabled     string // `systemctl is-enabled`
	wantRestart bool
	wantAsked   bool // the running image was asked `supports takeover`
	wantSays    string
}

// olderLauncher answers as every launcher before the `supports` word: an unknown command, exit 2.
const olderLauncher = `echo 'mesh-launcher: unknown command "supports"' >&2; exit 2`

var outsideTheUnit = "0::/user.slice/user-0.slice/session-3.scope\n"

var takeoverCases = []takeoverCase{
	{name: "a launcher that takes the new binary is left running", mainPID: fakePID, exe: "real",
		cgroup: outsideTheUnit, enabled: "enabled", wantSays: "keeps running (pid 4242)"},
	{name: "a launcher that takes the new binary is left running when the host applies the package", mainPID: fakePID,
		exe: "exit 0", cgroup: "0::/system.slice/mesh-launcher.service\n", enabled: "enabled", wantAsked: true,
		wantSays: "keeps running (pid 4242)"},
	{name: "a launcher older than the question is restarted", mainPID: fakePID, exe: olderLauncher,
		cgroup: outsideTheUnit, enabled: "enabled", wantRestart: true, wantAsked: true},
	{name: "a launcher that has not the feature is restarted", mainPID: fakePID, exe: "exit 1",
		cgroup: outsideTheUnit, enabled: "enabled", wantRestart: true, wantAsked: true},
	{name: "an older launcher is not restarted from inside its own unit", mainPID: fakePID, exe: olderLauncher,
		cgroup: "12:pids:/system.slice/mesh-launcher.service\n0::/system.slice/mesh-launcher.service\n", enabled: "enabled",
		wantAsked: true, wantSays: "not restarting it"},
	{name: "a unit not running is started", mainPID: "0", exe: "exit 0", cgroup: outsideTheUnit, enabled: "disabled",
		wantRestart: true},
	{name: "a unit whose MainPID is unreadable is started", mainPID: "", exe: "exit 0", cgroup: outsideTheUnit,
		enabled: "enabled", wantRestart: true},
}

// fakeSystemd makes, under dir, a systemctl that records its calls in dir/systemctl.calls and
// answers show and is-enabled, and a /proc with PID/exe and self/cgroup. launcher is the built
// launcher, for the "real" image.
func fakeSystemd(t *testing.T, dir, bin, launcher string, tc takeoverCase) {
	t.Helper()
	write := func(p, body string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(bin, "systemctl"), `#!/bin/sh
echo "$*" >> '`+dir+`/systemctl.calls'
case "$1" in
show) echo '`+tc.mainPID+`' ;;
is-enabled) echo '`+tc.enabled+`' ;;
esac
exit 0
`, 0o755)
	exe := filepath.Join(dir, "proc", fakePID, "exe")
	if tc.exe == "real" {
		b, err := os.ReadFile(launcher)
		if err != nil {
			t.Fatal(err)
		}
		write(exe, string(b), 0o755)
	} else {
		write(exe, "#!/bin/sh\necho \"$*\" >> '"+dir+"/exe.calls'\n"+tc.exe+"\n", 0o755)
	}
	write(filepath.Join(dir, "proc/self/cgroup"), tc.cgroup, 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "run-systemd-system"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// checkTakeover fails unless the script reloaded systemd, enabled the unit, asked for its
// MainPID, asked the running image and restarted the unit as tc wants.
func checkTakeover(t *testing.T, dir string, tc takeoverCase, code int, out string) {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, out)
	}
	calls, _ := os.ReadFile(filepath.Join(dir, "systemctl.calls"))
	want := "daemon-reload\nis-enabled mesh-launcher.service\nenable mesh-launcher.service\nshow -p MainPID --value mesh-launcher.service\n"
	if tc.wantRestart {
		want += "restart mesh-launcher.service\n"
	}
	if string(calls) != want {
		t.Errorf("systemctl was called\n%s\nwant\n%s\nthe script said:\n%s", calls, want, out)
	}
	asked, _ := os.ReadFile(filepath.Join(dir, "exe.calls"))
	if got := string(asked) == "supports takeover\n"; got != tc.wantAsked {
		t.Errorf("the running image was asked %q; want it asked `supports takeover`: %v", asked, tc.wantAsked)
	}
	if !strings.Contains(out, tc.wantSays) {
		t.Errorf("the script said %q, want %q", out, tc.wantSays)
	}
}

func TestPostinstLeavesALauncherThatTakesTheNewBinaryRunning(t *testing.T) {
	a := built(t)
	launcher := filepath.Join(unpack(t, a), "mesh-launcher")
	src, err := os.ReadFile("deb/postinst")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range takeoverCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			fakeSystemd(t, dir, bin, launcher, tc)
			if err := os.WriteFile(filepath.Join(bin, "mesh-launcher"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			script := replaceAll(t, string(src), map[string]string{
				"/usr/bin/mesh-launcher install": filepath.Join(bin, "mesh-launcher") + " install",
				"/var/lib/mesh-host":             filepath.Join(dir, "state"),
				"/run/systemd/system":            filepath.Join(dir, "run-systemd-system"),
				"/proc/":                         filepath.Join(dir, "proc") + "/",
			})
			p := filepath.Join(dir, "postinst")
			if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", p, "configure", "1.2.2")
			cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
			b, err := cmd.CombinedOutput()
			checkTakeover(t, dir, tc, exitCode(t, err), string(b))
		})
	}
}

func TestInstallShLeavesALauncherThatTakesTheNewBinaryRunning(t *testing.T) {
	a := built(t)
	for _, tc := range takeoverCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := unpack(t, a)
			launcher := filepath.Join(t.TempDir(), "mesh-launcher")
			if err := os.Rename(filepath.Join(dir, "mesh-launcher"), launcher); err != nil {
				t.Fatal(err)
			}
			stubLauncher(t, dir)
			fake := t.TempDir()
			path := toolsPath(t, false)
			fakeSystemd(t, fake, path, launcher, tc)
			src, err := os.ReadFile(filepath.Join(dir, "install.sh"))
			if err != nil {
				t.Fatal(err)
			}
			// Files go under --root; systemd is taken as running there, as on the machine itself.
			script := replaceAll(t, string(src), map[string]string{
				`systemd_running() { [ -z "$root" ] && [ -d /run/systemd/system ]; }`: `systemd_running() { true; }`,
				"/proc/": filepath.Join(fake, "proc") + "/",
			})
			if err := os.WriteFile(filepath.Join(dir, "install.sh"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			r := installSh(t, dir, dir, path, nil, "--root", t.TempDir())
			checkTakeover(t, fake, tc, r.code, r.stdout+r.stderr)
		})
	}
}

// replaceAll replaces each key of with by its value in s, failing when one is not there: a
// script changed under the test fails it rather than escaping the fakes.
func replaceAll(t *testing.T, s string, with map[string]string) string {
	t.Helper()
	for old, repl := range with {
		if !strings.Contains(s, old) {
			t.Fatalf("the script no longer holds %q", old)
		}
		s = strings.ReplaceAll(s, old, repl)
	}
	return s
}

// exitCode is the exit status err reports, failing the test when the command did not run.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}
