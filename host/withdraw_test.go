package host

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// goBuild builds pkg (relative to the module root) with version stamped as main.version, static,
// as releases are built, into dir.
func goBuild(t *testing.T, dir, pkg, version string) string {
	t.Helper()
	out := filepath.Join(dir, filepath.Base(pkg)+"-"+version)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, pkg)
	cmd.Dir = ".." // the module root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// realNode is one machine: a root with host.json, run by the real mesh-launcher.
type realNode struct {
	t        *testing.T
	name     string
	root     string
	launcher string
	mu       sync.Mutex
	log      bytes.Buffer
	cmd      *exec.Cmd
	done     chan struct{}
}

func newRealNode(t *testing.T, name, launcherBin, url string, first string, firstBin string) *realNode {
	t.Helper()
	root := t.TempDir()
	cfg := map[string]any{
		"node": name, "nats_urls": []string{url},
		"trusted_keys":       []string{base64.StdEncoding.EncodeToString(meshtest.ReleaseKey.Public)},
		"heartbeat_interval": "500ms", "reconcile_interval": "1h",
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(root, "host.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Placed as a stager does: a staging directory renamed into place.
	versions := rollback.VersionsDir(root)
	if err := os.MkdirAll(versions, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(versions, rollback.StagingPrefix)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(firstBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, rollback.BinaryName), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, rollback.VersionDir(root, first)); err != nil {
		t.Fatal(err)
	}
	n := &realNode{t: t, name: name, root: root, launcher: launcherBin}
	t.Cleanup(func() {
		n.stop()
		// The real binaries' log lines carry each key once (issue 18: component=host …
		// component=link, and a staged version= beside the host's own).
		for _, line := range strings.Split(n.output(), "\n") {
			if keys := logkey.Repeated(line); len(keys) > 0 {
				t.Errorf("node %s logged %q more than once in a line:\n%s", name, keys, line)
			}
		}
		if t.Failed() {
			t.Logf("node %s (launcher and hosts):\n%s", name, n.output())
		}
	})
	return n
}

func (n *realNode) Write(p []byte) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.Write(p)
}

func (n *realNode) output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

func (n *realNode) start() {
	n.t.Helper()
	cmd := exec.Command(n.launcher, "run", "--root", n.root)
	cmd.Stdout, cmd.Stderr = io.Writer(n), io.Writer(n)
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); close(done) }(n.done)
}

// stop stops the launcher (and so its host) the way systemd does, with SIGTERM.
func (n *realNode) stop() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(30 * time.Second):
		n.cmd.Process.Kill()
		<-n.done
	}
	n.cmd = nil
}

// status is `mesh-launcher status --json` of the node.
func (n *realNode) status() launcher.Report {
	n.t.Helper()
	out, err := exec.Command(n.launcher, "status", "--root", n.root, "--json").Output()
	if err != nil && len(out) == 0 {
		n.t.Fatalf("mesh-launcher status: %v", err)
	}
	var rep launcher.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		n.t.Fatalf("status JSON: %v\n%s", err, out)
	}
	return rep
}

func versionStatus(rep launcher.Report, v string) (rollback.VersionStatus, bool) {
	for _, vs := range rep.Versions {
		if vs.Version == v {
			return vs, true
		}
	}
	return rollback.VersionStatus{}, false
}

// A release that starts fine but is wrong is pulled back: nodes that confirmed v1.1.0 over
// v1.0.0, real launchers running real hosts, step down to v1.0.0 when v1.1.0 is withdrawn — no
// failure counted, no rollback recorded, v1.1.0 marked bad as withdrawn — and a node that was
// off at the time does so when it returns. The withdrawn release published again is refused
// and never fetched.
func TestAWithdrawnReleaseStepsRealNodesDownToTheVersionBefore(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real launcher and hosts")
	}
	bins := t.TempDir()
	launcherBin := goBuild(t, bins, "./launcher/cmd/mesh-launcher", "v0.0.0-test")
	v100 := goBuild(t, bins, "./host/cmd/mesh-host", "v1.0.0")
	v110 := goBuild(t, bins, "./host/cmd/mesh-host", "v1.1.0")

	b := meshtest.StartBus(t)
	withdrawalsBucket(t, b)
	nodes := []*realNode{
		newRealNode(t, "n1", launcherBin, b.URL(), "v1.0.0", v100),
		newRealNode(t, "n2", launcherBin, b.URL(), "v1.0.0", v100),
	}
	hbs := map[string]<-chan wire.Heartbeat{}
	for _, n := range nodes {
		hbs[n.name] = b.Heartbeats(n.name)
		n.start()
	}
	for _, n := range nodes {
		meshtest.WaitHeartbeat(t, hbs[n.name], n.name+" confirmed v1.0.0", func(hb wire.Heartbeat) bool {
			return hb.Running == "v1.0.0" && hb.KnownGood == "v1.0.0"
		})
	}

	// v1.1.0 is released and targeted; both nodes fetch it, stand aside for it and confirm it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rel, err := build.Build(ctx, build.Options{Version: "v1.1.0", Key: meshtest.ReleaseKey.Private, OutDir: filepath.Join(t.TempDir(), "v1.1.0"), Binary: v110, NoLauncher: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Publish(ctx, b.Conn.JS, b.Names, filepath.Dir(rel.ManifestPath)); err != nil {
		t.Fatal(err)
	}
	tg, err := wire.NewTarget(wire.FleetTargetKey, "v1.1.0", 0, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	putTarget(b, wire.FleetTargetKey, tg.Marshal())
	for _, n := range nodes {
		meshtest.WaitHeartbeat(t, hbs[n.name], n.name+" confirmed v1.1.0", func(hb wire.Heartbeat) bool {
			return hb.Running == "v1.1.0" && hb.KnownGood == "v1.1.0"
		})
	}

	// n2 is off when v1.1.0 is withdrawn.
	nodes[1].stop()
	_, wRev := withdraw(t, b, "v1.1.0", "starts fine, then corrupts the cache")

	n1 := nodes[0]
	meshtest.WaitHeartbeat(t, hbs["n1"], "n1 stepped down to v1.0.0", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.0.0" && hb.KnownGood == "v1.0.0"
	})
	checkSteppedDown := func(n *realNode) {
		t.Helper()
		var rep launcher.Report
		meshtest.Eventually(t, n.name+" status with v1.0.0 running", func() bool {
			rep = n.status()
			return rep.Running != nil && rep.Running.Version == "v1.0.0" && rep.State == launcher.StateHealthy
		})
		vs, ok := versionStatus(rep, "v1.1.0")
		if !ok || !vs.Bad || vs.BadReason != "withdrawn: starts fine, then corrupts the cache" {
			t.Errorf("%s: v1.1.0 in status %+v, want bad as withdrawn", n.name, vs)
		}
		for _, v := range rep.Versions {
			if v.FailuresTotal != 0 {
				t.Errorf("%s: %s counts %d failures, want none", n.name, v.Version, v.FailuresTotal)
			}
		}
		if len(rep.Rollbacks) != 0 {
			t.Errorf("%s: rollbacks %+v, want none", n.name, rep.Rollbacks)
		}
	}
	checkSteppedDown(n1)

	// The fleet target still names v1.1.0: n1 refuses it as withdrawn and does not fetch it,
	// even when its release is published again (a new manifest revision).
	hb := meshtest.WaitHeartbeat(t, hbs["n1"], "the withdrawn target refused", func(hb wire.Heartbeat) bool {
		return hb.Refused != nil && hb.Refused.What == "target" && strings.Contains(hb.Refused.Error, "v1.1.0 is withdrawn")
	})
	if hb.Fetch != nil {
		t.Errorf("n1 fetches: %+v", hb.Fetch)
	}
	b.Put(b.Names.Releases(), "v1.1.0", rel.Manifest.Marshal())
	putTarget(b, wire.FleetTargetKey, mustTarget(t, wire.FleetTargetKey, "v1.1.0", tg.Seq))
	meshtest.WaitHeartbeat(t, hbs["n1"], "the target signed again refused too", func(hb wire.Heartbeat) bool {
		return hb.Refused != nil && hb.Refused.What == "target" && strings.Contains(hb.Refused.Error, "v1.1.0 is withdrawn") && hb.Refused.Revision > wRev
	})
	for range 4 { // a couple of seconds of heartbeats
		if hb := meshtest.WaitHeartbeat(t, hbs["n1"], "a heartbeat", func(wire.Heartbeat) bool { return true }); hb.Fetch != nil || hb.Running != "v1.0.0" {
			t.Fatalf("n1 after the release was published again: running %s, fetch %+v", hb.Running, hb.Fetch)
		}
	}
	if _, err := os.Stat(rollback.VersionDir(n1.root, "v1.1.0")); !os.IsNotExist(err) {
		t.Errorf("versions/v1.1.0 on n1: %v, want it retired and never fetched again", err)
	}
	if strings.Contains(n1.output(), "host version staged\" version=v1.1.0") || strings.Count(n1.output(), "msg=\"host version staged\"") > 1 {
		t.Errorf("n1 staged v1.1.0 again:\n%s", n1.output())
	}

	// n2 returns: its launcher runs v1.1.0, whose host learns the list from the bus and steps down.
	nodes[1].start()
	meshtest.WaitHeartbeat(t, hbs["n2"], "n2 stepped down to v1.0.0 on its return", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.0.0" && hb.KnownGood == "v1.0.0"
	})
	checkSteppedDown(nodes[1])

}

// mustTarget is a fleet or node target for version numbered after prev, signed with the test key.
func mustTarget(t *testing.T, key, version string, prev uint64) []byte {
	t.Helper()
	tg, err := wire.NewTarget(key, version, prev, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	return tg.Marshal()
}
