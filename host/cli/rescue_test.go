package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/rollback"
)

// What `mesh-host rescue` refuses before it touches anything, and the exit status of each: a
// dry run cannot enrol, a root that is not there, the host service holding the root, and a root
// with no bus to derive the node from. The root is left as it was every time.
func TestRescueRefusesBeforeTouchingAnything(t *testing.T) {
	root := t.TempDir()
	held := t.TempDir()
	lock, err := rollback.LockHost(context.Background(), held, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"a dry run with a token", []string{"--root", root, "--dry-run", "--token", "x"}, exitRefused, "--dry-run changes nothing, so it cannot enrol"},
		{"no root there", []string{"--root", filepath.Join(root, "nope")}, exitRefused, "no mesh-host root"},
		{"the service holds the root", []string{"--root", held}, exitRefused, "stop it first (systemctl stop mesh-launcher)"},
		{"no bus configured", []string{"--root", root}, exitFailed, "no bus is configured"},
		{"a stray operand", []string{"--root", root, "extra"}, exitRefused, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"rescue"}, tc.args...)
			code := command("v0.0.0-test", args, &out, &errOut)
			if code != tc.code || !strings.Contains(errOut.String(), tc.says) {
				t.Errorf("mesh-host %s: exit %d, want %d saying %q\n%s%s", strings.Join(args, " "), code, tc.code, tc.says, out.String(), errOut.String())
			}
			for _, dir := range []string{root, held} {
				if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) > 1 || (len(m) == 1 && filepath.Base(m[0]) != "host.lock") {
					t.Errorf("the refused rescue left %v in the root", m)
				}
			}
		})
	}
}
