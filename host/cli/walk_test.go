package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A newcomer's walk (issue 18, item 4): the built mesh-host on a root that does not exist, a
// node id taken from somewhere the operator did not look, and plan's exit status.

// runHost runs the built mesh-host with args and env (MESH_HOST_ROOT and MESH_HOST_NODE unset
// unless env sets them) and returns its exit status and output.
func runHost(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), meshHost(t), args...)
	cmd.Env = append(append(os.Environ(), "MESH_HOST_ROOT=", "MESH_HOST_NODE="), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errOut.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

// owned and profile on a root that does not exist name the root and where it was given, and
// exit 2 (refused), whether the root came from --root or MESH_HOST_ROOT; they create nothing.
func TestOwnedAndProfileOnAMissingRootSayThereIsNoRootAndExit2(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "root")
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"owned --root", nil, []string{"owned", "--root", missing}},
		{"owned --json --root", nil, []string{"owned", "--json", "--root", missing}},
		{"owned MESH_HOST_ROOT", []string{"MESH_HOST_ROOT=" + missing}, []string{"owned"}},
		{"profile --root", nil, []string{"profile", "--root", missing}},
		{"profile --json MESH_HOST_ROOT", []string{"MESH_HOST_ROOT=" + missing}, []string{"profile", "--json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runHost(t, tc.env, tc.args...)
			want := fmt.Sprintf("no mesh-host root at %s (--root or MESH_HOST_ROOT)", missing)
			if code != 2 || out != "" || !strings.Contains(errOut, want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2, nothing on stdout, stderr saying %q", code, out, errOut, want)
			}
			if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the missing root was created: %v", err)
			}
		})
	}
}

// The first node's path: apply and plan of a bundle on a root that does not exist yet work;
// apply makes the root (0700, its missing parents 0755), plan changes nothing.
func TestApplyAndPlanOfABundleWorkOnAFreshRoot(t *testing.T) {
	dir := t.TempDir()
	bundle := t.TempDir()
	lock := filepath.Join(bundle, "substrate.lock")
	if err := os.WriteFile(lock, fmt.Appendf(nil, `{"version": 1, "resources": [{"type": "directory", "id": %q}]}`, filepath.Join(dir, "app")), 0o600); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	root := filepath.Join(base, "var", "lib", "mesh-host")
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"plan", "--bundle", lock}, 3, "plan: 1 would change (1 changed)"},
		{[]string{"apply", "--bundle", lock}, 0, "applied: 1 created"},
		{[]string{"plan", "--bundle", lock}, 0, "plan: nothing would change (1 unchanged)"},
		{[]string{"owned"}, 0, "in state  directory " + filepath.Join(dir, "app")},
	} {
		code, out, errOut := runHost(t, []string{"MESH_HOST_ROOT=" + root}, tc.args...)
		if code != tc.code || !strings.Contains(out, tc.out) {
			t.Errorf("%q on a fresh root: exit %d\n%s%s\nwant exit %d saying %q", tc.args, code, out, errOut, tc.code, tc.out)
		}
	}
	for p, want := range map[string]os.FileMode{root: 0o700, filepath.Dir(root): 0o755, filepath.Dir(filepath.Dir(root)): 0o755} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v; want mode %#o", p, fi, err, want)
		}
	}
}

// A declaration for another node is refused saying where this node's id came from, so the
// operator knows what to change.
func TestARefusalForAnotherNodeSaysWhereTheNodeIDCameFrom(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	short, _, _ := strings.Cut(host, ".")
	decl := filepath.Join(t.TempDir(), "web-01.json")
	if err := os.WriteFile(decl, []byte(`{"version": 1, "node": "web-01", "resources": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	withJSON, bare := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(withJSON, "host.json"), []byte(`{"node": "vm"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"host.json", nil, []string{"plan", decl, "--root", withJSON},
			fmt.Sprintf(`addressed to node "web-01", but this is node "vm" (the node id of host.json at %s)`, filepath.Join(withJSON, "host.json"))},
		{"MESH_HOST_NODE", []string{"MESH_HOST_NODE=vm2"}, []string{"apply", decl, "--root", withJSON},
			`addressed to node "web-01", but this is node "vm2" (the node id MESH_HOST_NODE sets)`},
		{"the hostname", nil, []string{"plan", decl, "--root", bare},
			fmt.Sprintf(`addressed to node "web-01", but this is node %q (the short hostname, as there is no host.json at %s; set "node" there or MESH_HOST_NODE)`, short, filepath.Join(bare, "host.json"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if short == "web-01" {
				t.Skip("this machine is called web-01")
			}
			code, _, errOut := runHost(t, tc.env, tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 saying %q", code, errOut, tc.want)
			}
		})
	}
}

// plan's exit status says whether anything would change, as `terraform plan -detailed-exitcode`
// does: 0 nothing, 3 something, 1 a resource could not be inspected, 2 refused.
func TestPlanExitsZeroWithNothingToChangeAndThreeWithChanges(t *testing.T) {
	n := newNode(t)
	applied := n.write("d.json", appDecl)
	if code, out, errOut := n.run("apply", applied); code != 0 {
		t.Fatalf("apply: exit %d %s%s", code, out, errOut)
	}
	other := filepath.Join(t.TempDir(), "other.json")
	os.WriteFile(other, []byte(`{"version": 1, "node": "n2", "resources": []}`), 0o600)
	if err := os.WriteFile(filepath.Join(n.dir, "afile"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"nothing to change", []string{"plan", applied}, 0, "plan: nothing would change (2 unchanged)"},
		{"nothing to change, --json", []string{"plan", "--json", applied}, 0, `"changed": 0`},
		{"a change", []string{"plan", n.write("d2.json", appDecl+`, {"type": "directory", "id": "DIR/data"}`)}, 3, "plan: 1 would change (1 changed, 2 unchanged)"},
		{"a change, --json", []string{"plan", "--json", n.write("d3.json", `{"type": "directory", "id": "DIR/app", "spec": {"mode": "0750"}}`)}, 3, `"changed": 1`},
		{"a resource that cannot be inspected", []string{"plan", n.write("d4.json", `{"type": "file", "id": "DIR/afile/x", "spec": {"content": "x"}}`)}, 1, ""},
		{"refused input", []string{"plan", other}, 2, ""},
		{"usage", []string{"plan"}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := n.run(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("exit %d\n%s%s\nwant exit %d saying %q", code, out, errOut, tc.code, tc.out)
			}
		})
	}
}

// plan's help and the README say what its exit statuses mean.
func TestPlanHelpSaysItsExitStatuses(t *testing.T) {
	var out bytes.Buffer
	command("v1.2.3", []string{"plan", "--help"}, &out, &bytes.Buffer{})
	if want := "Exit 0 nothing would change, 3 something would change,"; !strings.Contains(strings.Join(strings.Fields(out.String()), " "), want) {
		t.Errorf("plan --help does not say %q:\n%s", want, out.String())
	}
}
