package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// tool is one program the lab runs and the Debian package that ships it.
type tool struct{ bin, pkg string }

var tools = []tool{
	{"systemd-nspawn", "systemd-container"},
	{"debootstrap", "debootstrap"},
	{"nsenter", "util-linux"},
	{"ip", "iproute2"},
	{"tar", "tar"},
}

// ErrCannotRun says the lab cannot run on this machine; the suite skips with its text.
var ErrCannotRun = errors.New("the real-systemd lab cannot run here")

// EnsureTools installs what the lab needs with apt-get when it is missing. It returns an error
// wrapping ErrCannotRun when it cannot (not root, or no apt-get), and a plain error when it tried
// and failed — a broken install is a failure, not a reason to skip.
func EnsureTools(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: it needs root (namespaces, mounts, systemd-nspawn); run `sudo make lab-systemd`", ErrCannotRun)
	}
	var missing []string
	for _, t := range tools {
		if _, err := exec.LookPath(t.bin); err != nil {
			missing = append(missing, t.pkg)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%w: %s missing and no apt-get to install them", ErrCannotRun, strings.Join(missing, ", "))
	}
	apt := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	install := append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)
	if _, err := apt(install...); err == nil {
		return nil
	}
	// The package lists may be absent on a fresh machine: refresh once and retry.
	if out, err := apt("update", "-q"); err != nil {
		return fmt.Errorf("installing %s: apt-get update: %w\n%s", strings.Join(missing, ", "), err, out)
	}
	if out, err := apt(install...); err != nil {
		return fmt.Errorf("installing %s with apt-get: %w\n%s", strings.Join(missing, ", "), err, out)
	}
	return nil
}
