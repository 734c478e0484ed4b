package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The release tool's maintainer scripts, run under sh with their absolute paths moved into a temp
// directory and every command they call (getent, addgroup, adduser, deluser, systemctl) a script
// on PATH that records how it was called: getent finds the user when userExists, `systemctl
// is-active` says the unit runs when active, and systemd runs when systemd.
func TestReleaseMaintainerScriptsManageTheUserTheDataAndTheUnit(t *testing.T) {
	const adduser = "adduser --system --quiet --ingroup mesh-release --home STATE --no-create-home --shell /usr/sbin/nologin --gecos mesh-release serve mesh-release"
	for _, tc := range []struct {
		name                        string
		script, arg                 string
		userExists, active, systemd bool
		wantCalls                   []string
		wantStateKept               bool
		wantExit                    int
	}{
		{"install makes the group and the user and starts nothing", "postinst", "configure", false, false, true,
			[]string{"getent group mesh-release", "addgroup --system --quiet mesh-release", "getent passwd mesh-release", adduser,
				"systemctl daemon-reload", "systemctl is-active --quiet mesh-release.service"}, true, 0},
		{"an upgrade keeps the user and restarts a running unit", "postinst", "configure", true, true, true,
			[]string{"getent group mesh-release", "getent passwd mesh-release",
				"systemctl daemon-reload", "systemctl is-active --quiet mesh-release.service", "systemctl restart mesh-release.service"}, true, 0},
		{"without systemd (a chroot) only the user is made", "postinst", "configure", false, false, false,
			[]string{"getent group mesh-release", "addgroup --system --quiet mesh-release", "getent passwd mesh-release", adduser}, true, 0},
		{"remove stops and disables the unit", "prerm", "remove", true, true, true,
			[]string{"systemctl disable --now mesh-release.service"}, true, 0},
		{"an upgrade leaves the unit running", "prerm", "upgrade", true, true, true, nil, true, 0},
		{"remove keeps the data and the user", "postrm", "remove", true, false, true,
			[]string{"systemctl daemon-reload"}, true, 0},
		{"purge deletes the data and the user", "postrm", "purge", true, false, true,
			[]string{"getent passwd mesh-release", "deluser --system --quiet mesh-release", "systemctl daemon-reload"}, false, 0},
		{"an unknown argument fails", "postinst", "bogus", false, false, true, nil, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "var/lib/mesh-release")
			bin := filepath.Join(dir, "bin")
			systemd := filepath.Join(dir, "run/systemd/system")
			for _, d := range []string{state, bin} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tc.systemd {
				if err := os.MkdirAll(systemd, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(state, "serve.lock"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			record := `echo "$(basename "$0") $*" >> ` + dir + "/calls\n"
			exit := map[bool]string{true: "exit 0\n", false: "exit 2\n"}
			stubs := map[string]string{
				"getent":    record + exit[tc.userExists],
				"addgroup":  record,
				"adduser":   record,
				"deluser":   record,
				"systemctl": record + `[ "$1" = is-active ] && ` + exit[tc.active] + "exit 0\n",
			}
			for name, body := range stubs {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			src, err := os.ReadFile(filepath.Join("release-deb", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			script := strings.NewReplacer("/var/lib/mesh-release", state, "/run/systemd/system", systemd).Replace(string(src))
			p := filepath.Join(dir, tc.script)
			if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", p, tc.arg)
			cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if got := exitCode(t, err); got != tc.wantExit {
				t.Fatalf("%s %s: exit %d, want %d\n%s", tc.script, tc.arg, got, tc.wantExit, out)
			}
			b, _ := os.ReadFile(filepath.Join(dir, "calls"))
			calls := strings.ReplaceAll(strings.TrimSpace(string(b)), state, "STATE")
			if want := strings.Join(tc.wantCalls, "\n"); calls != want {
				t.Errorf("%s %s called:\n%s\nwant:\n%s", tc.script, tc.arg, calls, want)
			}
			if _, err := os.Stat(filepath.Join(state, "serve.lock")); (err == nil) != tc.wantStateKept {
				t.Errorf("%s %s: the data directory kept is %v, want %v", tc.script, tc.arg, err == nil, tc.wantStateKept)
			}
		})
	}
}
