package launcher_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
)

// notifyFunc is a launcher.Notifier made of a function: what systemd would be told.
type notifyFunc func(state string)

func (f notifyFunc) Notify(state string) { f(state) }

// place puts a host version in root as a stager does: ROOT/versions/<version>/mesh-host. The
// hosts here are shell scripts; the launcher runs whatever the version's binary is.
func place(root, version, script string) error {
	bin := rollback.BinaryPath(root, version)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	return os.WriteFile(bin, []byte(script), 0o755)
}

// The launcher runs the newest version under its root until it is stopped: the service manager
// cancels the context (SIGTERM), the launcher stops the host at a safe point and exits 0. The
// records say how each start ended.
func ExampleRun() {
	root, err := os.MkdirTemp("", "mesh-root-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	if err := place(root, "v1.0.0", "#!/bin/sh\nexec sleep 60\n"); err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devNull.Close()
	code, err := launcher.Run(ctx, launcher.Config{
		Root:   root,
		Logger: slog.New(slog.DiscardHandler),
		Stdout: devNull, Stderr: devNull, // where the host's output is passed on
		// The launcher tells systemd what it runs; here, the moment it runs the host, stop it.
		Notifier: notifyFunc(func(state string) {
			if strings.HasPrefix(state, "STATUS=running") {
				fmt.Println(state)
				stop()
			}
		}),
	})
	fmt.Println("exit", code, err)

	records, err := rollback.OpenForHost(context.Background(), root)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer records.Close()
	starts, err := records.Starts(context.Background(), "v1.0.0")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range starts {
		fmt.Printf("%s start %d: %s\n", s.Version, s.ID, s.Outcome)
	}

	// Output:
	// STATUS=running v1.0.0 (trial 1/3)
	// exit 0 <nil>
	// v1.0.0 start 1: stopped
}

// A version that exits 1 at every start, with nothing known good to roll back to: after the
// policy's three failures the launcher stops in its failed state with ExitFailed, which the
// unit's RestartPreventExitStatus= names, and status says why.
func ExampleRun_failedState() {
	root, err := os.MkdirTemp("", "mesh-root-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(root)
	if err := place(root, "v1.0.0", "#!/bin/sh\necho 'cannot read /etc/mesh-host/config.json' >&2\nexit 1\n"); err != nil {
		fmt.Println(err)
		return
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devNull.Close()

	policy := rollback.DefaultPolicy // three failures, backoff between them
	policy.BackoffMin, policy.BackoffMax = time.Millisecond, time.Millisecond
	code, err := launcher.Run(context.Background(), launcher.Config{
		Root:   root,
		Policy: policy,
		Logger: slog.New(slog.DiscardHandler),
		Stdout: devNull, Stderr: devNull,
	})
	fmt.Println("exit", code, err)

	rep, err := launcher.ReadStatus(context.Background(), root, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("state", rep.State, "exit", rep.ExitCode())
	fmt.Println(rep.FailedReason)

	// Output:
	// exit 3 <nil>
	// state failed exit 3
	// v1.0.0 failed 3 times without ever confirming (last: exited with status 1: cannot read /etc/mesh-host/config.json) and there is no known-good version to roll back to; fix the machine or stage a working version, then restart mesh-launcher
}
