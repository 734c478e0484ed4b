package launcher

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire/meshtest"
)

const unitFile = "../dist/mesh-launcher.service"

// unitLines is the unit's directives, trimmed, comments left out.
func unitLines(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines[l] = true
		}
	}
	return lines
}

// The unit the launcher ships with runs the package's binary on the default root, keeps that
// root the service's alone (systemd creates it 0700 and nothing started under the unit gets a
// umask that lets group or others read what it writes), and leaves the failed state down.
func TestUnitRunsThePackagedLauncherAndKeepsTheRootPrivate(t *testing.T) {
	lines := unitLines(t)
	for _, want := range []string{
		"ExecStart=/usr/bin/mesh-launcher run",
		"Type=notify",
		"NotifyAccess=main",
		"Restart=always",
		"RestartPreventExitStatus=3",
		"KillMode=mixed",
		"StateDirectory=mesh-host",
		"StateDirectoryMode=0700",
		"UMask=0077",
	} {
		if !lines[want] {
			t.Errorf("%s has no line %q", unitFile, want)
		}
	}
	if ExitFailed != 3 {
		t.Errorf("ExitFailed = %d, but the unit's RestartPreventExitStatus= is 3", ExitFailed)
	}
}

// systemd must let the launcher stop its host at a safe point before it kills everything: the
// unit's TimeoutStopSec is longer than the launcher's stop timeout, and the watchdog is longer
// than twice the launcher's ping (it pings at half of it), with room for the slowest tick.
func TestUnitTimeoutsLeaveTheLauncherItsOwn(t *testing.T) {
	lines := unitLines(t)
	get := func(key string) time.Duration {
		for l := range lines {
			if v, ok := strings.CutPrefix(l, key+"="); ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s=%s: %v", key, v, err)
				}
				return d
			}
		}
		t.Fatalf("%s has no %s=", unitFile, key)
		return 0
	}
	if stop := get("TimeoutStopSec"); stop < DefaultStopTimeout+10*time.Second {
		t.Errorf("TimeoutStopSec=%s leaves no room after the launcher's --stop-timeout (%s): systemd would kill the host mid-stop", stop, DefaultStopTimeout)
	}
	if wd := get("WatchdogSec"); wd < 10*time.Second {
		t.Errorf("WatchdogSec=%s is too tight for a launcher busy writing its records", wd)
	}
}

// systemd-analyze verify accepts the unit without a word: any output, warning or error, fails.
// It runs against a temporary root holding the system's units and an executable where ExecStart
// points, so it checks the unit as the package installs it, not this machine's /usr/bin. A unit
// with a mistake shows the check can fail.
func TestUnitPassesSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		meshtest.SkipUnlessCI(t, "systemd-analyze is not installed (package systemd); .ci/run installs it")
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		unit   string
		silent bool
	}{
		{"the shipped unit", string(unit), true},
		{"a misspelt directive", strings.Replace(string(unit), "KillMode=", "KilMode=", 1), false},
		{"an ExecStart that does not exist", strings.Replace(string(unit), "/usr/bin/mesh-launcher run", "/usr/sbin/mesh-launcher run", 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := unitRoot(t)
			dst := filepath.Join(root, "etc/systemd/system/mesh-launcher.service")
			if err := os.WriteFile(dst, []byte(tc.unit), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(analyze, "verify", "--root="+root, "mesh-launcher.service")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			silent := err == nil && out.Len() == 0
			if silent != tc.silent {
				t.Errorf("systemd-analyze verify: %v, output:\n%s", err, out.String())
			}
		})
	}
}

// unitRoot makes a root for systemd-analyze: the system's own units (verify loads the targets the
// unit depends on), an empty /etc/systemd/system, and an executable /usr/bin/mesh-launcher.
func unitRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	var system string
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			system = d
			break
		}
	}
	if system == "" {
		meshtest.SkipUnlessCI(t, "no system unit directory (/usr/lib/systemd/system) for systemd-analyze to load targets from (package systemd; .ci/run installs it)")
	}
	if err := os.CopyFS(filepath.Join(root, "usr/lib/systemd/system"), os.DirFS(system)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"etc/systemd/system", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/mesh-launcher"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}
