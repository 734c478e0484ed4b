package lab

import (
	"os/exec"
	"strings"
	"testing"
)

// The launcher has no network code: nothing from NATS, the link, or net/http may be linked in.
// (go-systemd's sd_notify uses a unix datagram socket through package net; that is the one
// exception, and it never leaves the machine.)
func TestLauncherLinksNoNetworkCode(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", PkgLauncher)
	cmd.Dir = bins.Src
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/nats-io/", "/host/link", "/host/deliver", "net/http", "crypto/tls"} {
			if strings.Contains(dep, banned) {
				t.Errorf("mesh-launcher depends on %s", dep)
			}
		}
	}
}
