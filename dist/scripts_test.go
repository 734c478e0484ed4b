package dist

import (
	"os/exec"
	"testing"

	"github.com/novox/mesh-host/wire/meshtest"
)

// The maintainer scripts run under dash on Debian and install.sh under whatever /bin/sh a bare
// machine has: POSIX sh, checked as such.
func TestScriptsPassShellcheckAsPOSIXSh(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		meshtest.SkipUnlessCI(t, "shellcheck is not installed (Debian's shellcheck package; .ci/run installs it): the scripts are not linted here")
	}
	for _, script := range []string{"deb/postinst", "deb/prerm", "deb/postrm", "tarball/install.sh",
		"release-deb/postinst", "release-deb/prerm", "release-deb/postrm"} {
		t.Run(script, func(t *testing.T) {
			out, err := exec.Command("shellcheck", "--shell=sh", "--severity=style", script).CombinedOutput()
			if err != nil {
				t.Errorf("shellcheck %s: %v\n%s", script, err, out)
			}
		})
	}
}
