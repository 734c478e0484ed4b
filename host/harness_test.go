package host

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/profile"
	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// testHost is one host run loop in this process, with its own root, as the lab's fleets run them.
type testHost struct {
	t      testing.TB
	root   string
	node   string
	cancel context.CancelFunc
	done   chan struct{}
	res    Result
	err    error
	logs   *meshtest.Buffer
	h      *Host
}

// newRoot makes a root as the launcher leaves it: records.db with its schema, and the version's
// directory (any bytes stand in for the binary; Choose only hashes it).
func newRoot(t testing.TB, version string) string {
	t.Helper()
	root := t.TempDir()
	r, _, err := rollback.OpenForLauncher(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	placeFake(t, root, version)
	// The launcher chose it, recording its digest, before it ran.
	if ch, err := r.Choose(context.Background(), root); err != nil || ch.Version != version {
		t.Fatalf("choose %q, %v", ch.Version, err)
	}
	return root
}

func placeFake(t testing.TB, root, version string) {
	t.Helper()
	dir := rollback.VersionDir(root, version)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), rollback.StagingPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, rollback.BinaryName), []byte("fake mesh-host "+version), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
}

type hostOpt func(*config.Config)

func startHost(t testing.TB, root, node, url string, opts ...hostOpt) *testHost {
	t.Helper()
	return startHostAs(t, root, node, url, "v1.0.0", opts...)
}

// startHostAs starts a host that is version (its directory must be on root).
func startHostAs(t testing.TB, root, node, url, version string, opts ...hostOpt) *testHost {
	t.Helper()
	return startHostWith(t, root, node, url, version, nil, opts...)
}

// startHostWith is startHostAs with more options (a clock) set by with.
func startHostWith(t testing.TB, root, node, url, version string, with func(*Options), opts ...hostOpt) *testHost {
	t.Helper()
	cfg := config.Config{
		Root: root, Node: node, Prefix: "mesh",
		ReconcileInterval: config.Duration(time.Hour), HeartbeatInterval: config.Duration(time.Hour),
		// Test hosts take the targets and withdrawal lists the test release key signs.
		TrustedTargetKeys: []string{base64.StdEncoding.EncodeToString(meshtest.ReleaseKey.Public)},
	}
	if url != "" {
		cfg.NATSURLs = []string{url}
	}
	for _, o := range opts {
		o(&cfg)
	}
	logs := &meshtest.Buffer{}
	o := Options{Config: cfg, Version: version, Detector: testDetector, Logger: slog.New(slog.NewTextHandler(logs, nil))}
	if with != nil {
		with(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &testHost{t: t, root: root, node: node, cancel: cancel, done: make(chan struct{}), logs: logs, h: h}
	go func() {
		defer close(th.done)
		th.res, th.err = h.Run(ctx)
	}()
	t.Cleanup(func() {
		th.stop()
		// Each key once per line: a sub-component's logger replaces its owner's component.
		for _, line := range strings.Split(logs.String(), "\n") {
			if keys := logkey.Repeated(line); len(keys) > 0 {
				t.Errorf("host %s logged %q more than once in a line:\n%s", node, keys, line)
			}
		}
		if t.Failed() {
			t.Logf("host %s log:\n%s", node, logs.String())
		}
	})
	return th
}

func (th *testHost) stop() {
	th.cancel()
	select {
	case <-th.done:
	case <-time.After(30 * time.Second):
		th.t.Errorf("host %s did not stop", th.node)
	}
}

// reconciles reads the host's store.db directly (read-only) to see every reconcile it ran.
// linkedHost starts a bus, subscribes to node n1's heartbeats, and starts host n1 on a new root
// of v1.0.0, linked to the bus.
func linkedHost(t testing.TB, opts ...hostOpt) (*meshtest.Bus, <-chan wire.Heartbeat, *testHost) {
	t.Helper()
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	return b, hbs, startHost(t, newRoot(t, "v1.0.0"), "n1", b.URL(), opts...)
}

// heartbeatNow is the heartbeat the host would send now, built as its heartbeat loop builds it.
// Call it once a heartbeat of this host has arrived: the host's mutex, which building that one
// took, then orders this read after Run opened the link, records and store.
func (th *testHost) heartbeatNow() wire.Heartbeat {
	return th.h.heartbeat(context.Background(), wire.StateRunning, "")
}

// reconciles are the reconciles the host recorded in its store.db.
func (th *testHost) reconciles() meshtest.Reconciles {
	th.t.Helper()
	return meshtest.ReadReconciles(th.t, th.root)
}

func decl(node string, resources string) []byte {
	return []byte(fmt.Sprintf(`{"version": 1, "node": %q, "resources": [%s]}`, node, resources))
}

// testDetector is shared by every host these tests start: they run on one machine, and
// hundreds of hosts probing container runtimes at once would read a slow runtime as broken.
var testDetector = profile.NewDetector(time.Hour)
