package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/emulator"
	"github.com/novox/mesh-host/launcher"
)

// bins is built once per test run (TestMain); every test places copies in its own root.
var bins *Builder

func TestMain(m *testing.M) {
	out, err := os.MkdirTemp("", "mesh-lab-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins, err = NewBuilder(context.Background(), ".", out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := prebuild(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(out)
	os.Exit(code)
}

// prebuild compiles, before any test starts, every package the tests build (filling go's build
// cache) and builds the binaries most tests start with. A cold build's time is the machine's
// (minutes on a loaded 2-core one): done here, it is bounded by go test's -timeout alone, and a
// test's own budget, which begins before its first build, is left to what it tests; a build in a
// test is then a link.
func prebuild(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"./launcher/cmd/...", "./host/cmd/...", "./release/cmd/...", "./lab/cmd/...", "./lab/fixtures/...", pkgStockServer)
	cmd.Dir = bins.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("compile what the lab's tests build: %w\n%s", err, out)
	}
	// The mixed fleet's arm64 nodes (the demo): compiled only where they can run, as the tests
	// that run them are skipped elsewhere (and fail under CI, which installs the emulator).
	if emulator.Runs(ctx, DemoForeignArch) == nil {
		if err := goBuild(ctx, bins.Src, DemoForeignArch, []string{"build", "-trimpath", "-buildvcs=false",
			PkgLauncher, PkgHost, PkgCrashArm64}); err != nil {
			return fmt.Errorf("compile the lab's linux/%s nodes: %w", DemoForeignArch, err)
		}
	}
	for _, b := range []struct{ pkg, version string }{
		{PkgLauncher, "v0.0.0-lab"}, {PkgLauncher, ToolVersion}, {PkgRelease, "v0.0.0-lab"}, {PkgRelease, ToolVersion},
	} {
		if _, err := bins.Build(ctx, b.pkg, b.version); err != nil {
			return err
		}
	}
	_, err := bins.BuildX(ctx, pkgStockServer, "nats-server")
	return err
}

// build returns pkg built at version, failing the test if it cannot be built.
func build(t testing.TB, pkg, version string) string {
	t.Helper()
	p, err := bins.Build(context.Background(), pkg, version)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newNode makes a node with its own root and the real launcher; hosts reconcile every 200ms so
// a test sees several reconciles in a second.
func newNode(t *testing.T, env ...string) *Node {
	t.Helper()
	n := &Node{
		Name:     t.Name(),
		Root:     t.TempDir(),
		Launcher: build(t, PkgLauncher, "v0.0.0-lab"),
		Env:      append([]string{"MESH_HOST_RECONCILE_INTERVAL=200ms", "MESH_HOST_NODE=lab"}, env...),
	}
	t.Cleanup(func() {
		if n.PID() == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		n.Signal(9)
		n.Wait(ctx)
		if t.Failed() {
			t.Logf("launcher log of %s:\n%s", n.Name, n.Log())
		}
	})
	return n
}

func place(t *testing.T, n *Node, version, pkg string) {
	t.Helper()
	if err := n.PlaceVersion(version, build(t, pkg, version)); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, n *Node, args ...string) {
	t.Helper()
	if err := n.Start(args...); err != nil {
		t.Fatal(err)
	}
}

func runningConfirmedReport(version string) func(launcher.Report) bool {
	return func(rep launcher.Report) bool {
		v, ok := Version(rep, version)
		return Running(rep) == version && ok && v.Confirmed
	}
}
