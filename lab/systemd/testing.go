package systemd

import (
	"context"
	"errors"
	"os"
	"testing"
)

// EnvRun turns the suite on. Booting containers needs root and takes a minute the first time,
// so a plain `go test ./...` skips it, saying so; `make lab-systemd` sets it.
const EnvRun = "MESH_LAB_SYSTEMD"

// Start is a Lab for a test: skipped (with the reason) when the suite is off or cannot run here,
// failed when it should run and does not, and torn down when the test ends — pass or fail —
// with a check that nothing was left behind.
func Start(t testing.TB, ctx context.Context) *Lab {
	t.Helper()
	return StartWith(t, ctx, Options{})
}

// withTestDefaults returns o with Dir and Logf, when zero, a temporary directory and t.Logf;
// New fills the rest.
func (o Options) withTestDefaults(t testing.TB) Options {
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	return o
}

// StartWith is Start with options; Dir and Logf default to a temporary directory and t.Logf.
func StartWith(t testing.TB, ctx context.Context, opts Options) *Lab {
	t.Helper()
	RequireLab(t, ctx)
	l, err := New(ctx, opts.withTestDefaults(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("lab teardown: %v", err)
		}
		if err := l.CheckGone(); err != nil {
			t.Errorf("lab teardown left things behind: %v", err)
		}
	})
	return l
}

// RequireLab skips t, saying why, when the suite is off or cannot run here, and fails it when
// the lab's tools should be there and cannot be installed: what a test calls before it starts
// anything of its own for the lab (Start calls it).
func RequireLab(t testing.TB, ctx context.Context) {
	t.Helper()
	if os.Getenv(EnvRun) == "" {
		t.Skipf("the real-systemd lab is off: set %s=1 or run `make lab-systemd` (as root)", EnvRun)
	}
	if err := EnsureTools(ctx); errors.Is(err, ErrCannotRun) {
		t.Skip(err)
	} else if err != nil {
		t.Fatal(err)
	}
}
