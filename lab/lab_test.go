package lab

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

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
	code := m.Run()
	os.RemoveAll(out)
	os.Exit(code)
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
