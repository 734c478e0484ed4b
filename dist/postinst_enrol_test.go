package dist

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// postinst runs the package's postinst under sh with its absolute paths moved into a temp
// directory: mesh-launcher and the seeded mesh-host are scripts that record how they were
// called (mesh-host enrol exits with enrolExit), systemctl is a no-op on PATH, and systemd is
// not running (the chroot path). It returns the script's exit status and output, and what the
// fake mesh-host was given.
func postinst(t *testing.T, token string, enrolled bool, enrolExit string) (code int, out, calls, stdin string) {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "var/lib/mesh-host")
	share := filepath.Join(dir, "usr/share/mesh-host")
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{state, share, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if enrolled {
		os.WriteFile(filepath.Join(state, "node.creds"), []byte("creds"), 0o600)
	}
	write := func(p, body string) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(share, "mesh-host"), `echo "$*" >> `+dir+`/calls
cat > `+dir+`/stdin
echo "mesh-host enrol: the enrolment service refused (409): token was already used" >&2
exit `+enrolExit+"\n")
	write(filepath.Join(bin, "mesh-launcher"), "exit 0\n")
	write(filepath.Join(bin, "systemctl"), "exit 0\n")
	src, err := os.ReadFile("deb/postinst")
	if err != nil {
		t.Fatal(err)
	}
	script := strings.NewReplacer(
		"/usr/bin/mesh-launcher", filepath.Join(bin, "mesh-launcher"),
		"/usr/share/mesh-host", share,
		"/var/lib/mesh-host", state,
		"/run/systemd/system", filepath.Join(dir, "no-systemd"),
	).Replace(string(src))
	p := filepath.Join(dir, "postinst")
	write(p, strings.TrimPrefix(script, "#!/bin/sh\n"))
	cmd := exec.Command("sh", p, "configure")
	cmd.Env = []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
	if token != "" {
		cmd.Env = append(cmd.Env, "MESH_ENROL_TOKEN="+token)
	}
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	c, _ := os.ReadFile(filepath.Join(dir, "calls"))
	in, _ := os.ReadFile(filepath.Join(dir, "stdin"))
	return code, string(b), strings.ReplaceAll(string(c), state, "STATE"), string(in)
}

// MESH_ENROL_TOKEN enrols the node with the seeded host, the token on stdin (not in a command
// line others can read); a node already enrolled keeps its credentials; a failed enrolment is
// said and the package still installs.
func TestPostinstEnrolsWithMESH_ENROL_TOKEN(t *testing.T) {
	const tok = "mesh-enrol-1.eyJzZWNyZXQiOiJ4In0"
	code, out, calls, stdin := postinst(t, tok, false, "0")
	if code != 0 || calls != "enrol --root STATE -\n" || stdin != tok+"\n" {
		t.Fatalf("exit %d, calls %q, stdin %q\n%s", code, calls, stdin, out)
	}
	if strings.Contains(calls, tok) {
		t.Fatal("the token was on the command line")
	}

	code, out, calls, _ = postinst(t, tok, false, "1")
	if code != 0 || !strings.Contains(out, "refused (409)") || !strings.Contains(out, "enrolment with MESH_ENROL_TOKEN failed") ||
		!strings.Contains(out, "is enabled and starts at boot") {
		t.Fatalf("a failed enrolment: exit %d, calls %q\n%s", code, calls, out)
	}

	code, out, calls, _ = postinst(t, tok, true, "0")
	if code != 0 || calls != "" || !strings.Contains(out, "enrolled already") {
		t.Fatalf("an enrolled node: exit %d, calls %q\n%s", code, calls, out)
	}

	code, out, calls, _ = postinst(t, "", false, "0")
	if code != 0 || calls != "" || strings.Contains(out, "enrol") {
		t.Fatalf("no token: exit %d, calls %q\n%s", code, calls, out)
	}
}
