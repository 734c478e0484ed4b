package dist

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// installTools is everything install.sh may run besides a POSIX sh and its builtins (and
// systemctl, when the machine has it). The tests run it with a PATH holding only these, so a
// command added to the script without adding it here fails them: the floor acquires no
// dependency unnoticed.
var installTools = []string{"cat", "chmod", "cp", "id", "mkdir", "mv", "rm", "rmdir", "sync", "uname"}

// toolsPath makes a directory of links to installTools (and systemctl when asked) for PATH.
func toolsPath(t *testing.T, withSystemctl bool) string {
	t.Helper()
	dir := t.TempDir()
	tools := installTools
	if withSystemctl {
		if _, err := exec.LookPath("systemctl"); err != nil {
			meshtest.SkipUnlessCI(t, "systemctl is not installed (Debian's systemd package; .ci/run installs it): `systemctl --root` cannot be tried here")
		}
		tools = append(tools[:len(tools):len(tools)], "systemctl")
	}
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s, which install.sh needs, is not installed here: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(dir, tool)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// stubLauncher replaces the unpacked mesh-launcher with a script that appends its arguments to
// the file it returns, so a test sees exactly how install.sh calls `mesh-launcher install`.
func stubLauncher(t *testing.T, dir string) (calls string) {
	t.Helper()
	calls = filepath.Join(t.TempDir(), "calls")
	script := "#!/bin/sh\necho \"$@\" >> '" + calls + "'\n"
	if err := os.WriteFile(filepath.Join(dir, "mesh-launcher"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return calls
}

type result struct {
	stdout, stderr string
	code           int
}

// installSh runs dir/install.sh from cwd (the script as `./install.sh` when cwd is dir) with
// PATH=path and env added.
func installSh(t *testing.T, dir, cwd, path string, env []string, args ...string) result {
	t.Helper()
	script := filepath.Join(dir, "install.sh")
	if cwd == dir {
		script = "./install.sh"
	}
	cmd := exec.Command(script, args...)
	cmd.Dir = cwd
	cmd.Env = append([]string{"PATH=" + path}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return result{stdout.String(), stderr.String(), exit.ExitCode()}
	case err != nil:
		t.Fatal(err)
	}
	return result{stdout.String(), stderr.String(), 0}
}

const wantsLink = "etc/systemd/system/multi-user.target.wants/mesh-launcher.service"

func TestInstallShPlacesTheFilesAndSeedsTheHostThroughTheLauncher(t *testing.T) {
	a := built(t)
	for _, tc := range []struct {
		name        string
		systemctl   bool
		byEnv       bool // MESH_INSTALL_ROOT rather than --root
		fromItsDir  bool // run as ./install.sh from the unpacked directory
		wantSays    string
		wantEnabled bool
	}{
		{name: "without systemctl it says so and succeeds", wantSays: "systemctl not found"},
		{name: "MESH_INSTALL_ROOT names the root", byEnv: true, wantSays: "systemctl not found"},
		{name: "run from its own directory", fromItsDir: true, wantSays: "systemctl not found"},
		{name: "with systemctl the unit is enabled under the root", systemctl: true,
			wantSays: "enabled under", wantEnabled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := unpack(t, a)
			calls := stubLauncher(t, dir)
			root := t.TempDir()
			cwd := t.TempDir()
			if tc.fromItsDir {
				cwd = dir
			}
			var env, args []string
			if tc.byEnv {
				env = []string{"MESH_INSTALL_ROOT=" + root}
			} else {
				args = []string{"--root", root}
			}
			r := installSh(t, dir, cwd, toolsPath(t, tc.systemctl), env, args...)
			if r.code != 0 {
				t.Fatalf("install.sh exited %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, tc.wantSays) {
				t.Errorf("install.sh said %q, want it to say %q", r.stdout, tc.wantSays)
			}

			sameFile(t, filepath.Join(root, "usr/bin/mesh-launcher"), filepath.Join(dir, "mesh-launcher"), 0o755)
			sameFile(t, filepath.Join(root, "usr/share/mesh-host/mesh-host"), filepath.Join(dir, "mesh-host"), 0o755)
			sameFile(t, filepath.Join(root, "lib/systemd/system/mesh-launcher.service"), filepath.Join(a.repo, "dist/mesh-launcher.service"), 0o644)
			leftovers, _ := filepath.Glob(filepath.Join(root, "*/*/*.install-*"))
			more, _ := filepath.Glob(filepath.Join(root, "*/*/*/*.install-*"))
			if leftovers = append(leftovers, more...); len(leftovers) > 0 {
				t.Errorf("install.sh left temp files: %v", leftovers)
			}

			got, err := os.ReadFile(calls)
			if err != nil {
				t.Fatalf("install.sh never ran the launcher: %v", err)
			}
			want := "install --root " + root + "/var/lib/mesh-host " + root + "/usr/share/mesh-host/mesh-host\n"
			if string(got) != want {
				t.Errorf("install.sh ran `mesh-launcher %s`, want `mesh-launcher %s`", strings.TrimSpace(string(got)), strings.TrimSpace(want))
			}

			target, err := os.Readlink(filepath.Join(root, wantsLink))
			switch {
			case tc.wantEnabled && err != nil:
				t.Errorf("the unit is not enabled under the root: %v", err)
			case tc.wantEnabled && target != "/lib/systemd/system/mesh-launcher.service":
				t.Errorf("the unit's wants link points at %s", target)
			case !tc.wantEnabled && err == nil:
				t.Errorf("the unit was enabled (-> %s) with no systemctl to do it", target)
			}
		})
	}
}

func TestInstallShUninstallRemovesTheFilesAndKeepsTheStateUnlessPurged(t *testing.T) {
	a := built(t)
	for _, tc := range []struct {
		name      string
		systemctl bool
		purge     bool
	}{
		{name: "keeps the state", systemctl: false},
		{name: "purge removes the state", systemctl: false, purge: true},
		{name: "with systemctl disables the unit and keeps the state", systemctl: true},
		{name: "with systemctl purge removes the state", systemctl: true, purge: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := unpack(t, a)
			stubLauncher(t, dir)
			root := t.TempDir()
			path := toolsPath(t, tc.systemctl)
			if r := installSh(t, dir, dir, path, nil, "--root", root); r.code != 0 {
				t.Fatalf("install.sh exited %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			// What a node keeps: the stub launcher placed nothing, so stand in for it.
			state := filepath.Join(root, "var/lib/mesh-host")
			if err := os.MkdirAll(filepath.Join(state, "versions"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(state, "records.db"), []byte("records"), 0o600); err != nil {
				t.Fatal(err)
			}
			if !tc.systemctl {
				// As an earlier install with systemctl (or by hand) would have left it.
				link := filepath.Join(root, wantsLink)
				if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("/lib/systemd/system/mesh-launcher.service", link); err != nil {
					t.Fatal(err)
				}
			}

			args := []string{"--uninstall", "--root", root}
			if tc.purge {
				args = append(args, "--purge")
			}
			r := installSh(t, dir, dir, path, nil, args...)
			if r.code != 0 {
				t.Fatalf("install.sh --uninstall exited %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, gone := range []string{"usr/bin/mesh-launcher", "usr/share/mesh-host", "lib/systemd/system/mesh-launcher.service", wantsLink} {
				if _, err := os.Lstat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s is still there after --uninstall (%v)", gone, err)
				}
			}
			_, err := os.Stat(filepath.Join(state, "records.db"))
			switch {
			case tc.purge && !errors.Is(err, os.ErrNotExist):
				t.Errorf("--purge left %s (%v)", state, err)
			case !tc.purge && err != nil:
				t.Errorf("--uninstall without --purge removed the records: %v", err)
			case !tc.purge && !strings.Contains(r.stdout, "kept "+state):
				t.Errorf("--uninstall said %q; want it to say it kept %s", r.stdout, state)
			}
		})
	}
}

func TestInstallShRefusesAndWritesNothing(t *testing.T) {
	a := built(t)
	for _, tc := range []struct {
		name     string
		args     []string // after --root ROOT
		remove   string   // a file to take out of the unpacked directory first
		wantCode int
		wantSays string
	}{
		{name: "purge without uninstall", args: []string{"--purge"}, wantCode: 1, wantSays: "--purge goes with --uninstall"},
		{name: "an unknown flag", args: []string{"--force"}, wantCode: 2, wantSays: "unknown argument '--force'"},
		{name: "root without a directory", args: []string{"--root"}, wantCode: 1, wantSays: "--root needs a directory"},
		{name: "a binary missing from the tarball", remove: "mesh-host", wantCode: 1, wantSays: "mesh-host is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := unpack(t, a)
			calls := stubLauncher(t, dir)
			if tc.remove != "" {
				if err := os.Remove(filepath.Join(dir, tc.remove)); err != nil {
					t.Fatal(err)
				}
			}
			root := t.TempDir()
			r := installSh(t, dir, dir, toolsPath(t, false), nil, append([]string{"--root", root}, tc.args...)...)
			if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.wantSays) {
				t.Errorf("install.sh exited %d saying %q; want %d saying %q", r.code, r.stderr, tc.wantCode, tc.wantSays)
			}
			if entries, _ := os.ReadDir(root); len(entries) > 0 {
				t.Errorf("install.sh wrote under the root although it refused: %v", entries)
			}
			if _, err := os.Stat(calls); err == nil {
				t.Error("install.sh ran the launcher although it refused")
			}
		})
	}
}

// The real launcher's `install` (issue 10) seeds versions/<v>/; this is what the stub above
// stands in for, end to end.
func TestInstallShSeedsTheHostWithTheRealLauncher(t *testing.T) {
	a := built(t)
	dir := unpack(t, a)
	if err := exec.Command(filepath.Join(dir, "mesh-launcher"), "install", "--help").Run(); err != nil {
		meshtest.SkipUnlessCI(t, "this mesh-launcher has no working `install` command (`mesh-launcher install --help`: %v)", err)
	}
	root := t.TempDir()
	path := toolsPath(t, false)
	for _, run := range []string{"first install", "re-run, as an upgrade to the same version"} {
		if r := installSh(t, dir, dir, path, nil, "--root", root); r.code != 0 {
			t.Fatalf("%s: install.sh exited %d\n%s%s", run, r.code, r.stdout, r.stderr)
		}
		seeded := rollback.BinaryPath(filepath.Join(root, "var/lib/mesh-host"), testVersion)
		got, err := os.ReadFile(seeded)
		if err != nil {
			t.Fatalf("%s: the host was not seeded: %v", run, err)
		}
		want, err := os.ReadFile(filepath.Join(dir, "mesh-host"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %s is not the tarball's mesh-host", run, seeded)
		}
	}
}

// As the package's postinst: MESH_ENROL_TOKEN enrols the node once, the token on stdin, and a
// failed enrolment is said without failing the install; a node with credentials keeps them.
func TestInstallShEnrolsWithMESH_ENROL_TOKEN(t *testing.T) {
	a := built(t)
	for _, tc := range []struct {
		name      string
		token     string
		enrolled  bool
		enrolExit string
		wantCall  bool
		wantSays  string
	}{
		{name: "no token: no enrolment", enrolExit: "0"},
		{name: "a token enrols through stdin", token: "mesh-enrol-1.abc", enrolExit: "0", wantCall: true},
		{name: "a refused token is said and the install goes on", token: "mesh-enrol-1.used", enrolExit: "1", wantCall: true,
			wantSays: "enrolment with MESH_ENROL_TOKEN failed"},
		{name: "an enrolled node keeps its credentials", token: "mesh-enrol-1.abc", enrolled: true, enrolExit: "0",
			wantSays: "enrolled already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := unpack(t, a)
			stubLauncher(t, dir)
			calls := filepath.Join(t.TempDir(), "calls")
			stdin := calls + ".stdin"
			host := "#!/bin/sh\necho \"$@\" >> '" + calls + "'\ncat > '" + stdin + "'\nexit " + tc.enrolExit + "\n"
			if err := os.WriteFile(filepath.Join(dir, "mesh-host"), []byte(host), 0o755); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			if tc.enrolled {
				os.MkdirAll(filepath.Join(root, "var/lib/mesh-host"), 0o700)
				os.WriteFile(filepath.Join(root, "var/lib/mesh-host/node.creds"), []byte("creds"), 0o600)
			}
			var env []string
			if tc.token != "" {
				env = []string{"MESH_ENROL_TOKEN=" + tc.token}
			}
			r := installSh(t, dir, t.TempDir(), toolsPath(t, false), env, "--root", root)
			if r.code != 0 {
				t.Fatalf("install.sh exited %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			got, _ := os.ReadFile(calls)
			want := "enrol --root " + root + "/var/lib/mesh-host -\n"
			if tc.wantCall != (string(got) == want) || (!tc.wantCall && len(got) > 0) {
				t.Errorf("install.sh ran mesh-host %q; want the enrolment %v", got, tc.wantCall)
			}
			if tc.wantCall {
				if in, _ := os.ReadFile(stdin); strings.TrimSpace(string(in)) != tc.token {
					t.Errorf("mesh-host enrol read %q on stdin, want the token", in)
				}
			}
			if !strings.Contains(r.stdout+r.stderr, tc.wantSays) {
				t.Errorf("install.sh said %q%q, want %q", r.stdout, r.stderr, tc.wantSays)
			}
		})
	}
}
