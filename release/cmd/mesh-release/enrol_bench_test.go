package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkEnrolToFirstHeartbeat is issue 11's figure: from a token handed to a node with its
// first version installed (as the package leaves it) to its first heartbeat on the bus — the
// built `mesh-host enrol` (its key made, the bus's CA pinned, its user signed by the enrolment
// service, its files written), then `mesh-launcher run` starting the host, which links with its
// own user over TLS through the nodes account. Each iteration is a new node.
func BenchmarkEnrolToFirstHeartbeat(b *testing.B) {
	bus := startTrustedBus(b)
	pubFile := filepath.Join(b.TempDir(), "release.pub")
	if err := os.WriteFile(pubFile, []byte(build.PublicKeyString(meshtest.ReleaseKey.Public)+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	bus.startEnrolService(b, "--key-pub", pubFile)
	hostBin := goBuild(b, "github.com/novox/mesh-host/host/cmd/mesh-host", "v1.0.0")
	launcherBin := goBuild(b, "github.com/novox/mesh-host/launcher/cmd/mesh-launcher", "v0.0.0-bench")
	var enrolTotal, firstTotal time.Duration
	for i := 0; b.Loop(); i++ {
		node := "bench-" + strconv.Itoa(i)
		root := b.TempDir()
		if out, err := exec.Command(launcherBin, "install", "--root", root, hostBin).CombinedOutput(); err != nil {
			b.Fatalf("mesh-launcher install: %v\n%s", err, out)
		}
		sub, err := bus.admin.NC.SubscribeSync(wire.NamesFor("").Heartbeat(node))
		if err != nil {
			b.Fatal(err)
		}
		bus.admin.NC.Flush()
		token := bus.token(b, "--node", node, "--url", bus.url)
		began := time.Now()
		if code, _, errOut := hostEnrol(b, hostBin, "--root", root, token); code != 0 {
			b.Fatalf("mesh-host enrol: exit %d: %s", code, errOut)
		}
		enrolTotal += time.Since(began)
		launcher := exec.Command(launcherBin, "run", "--root", root)
		launcher.Env = []string{"PATH=" + os.Getenv("PATH")}
		if err := launcher.Start(); err != nil {
			b.Fatal(err)
		}
		if _, err := sub.NextMsg(30 * time.Second); err != nil {
			b.Fatalf("no heartbeat from %s: %v", node, err)
		}
		firstTotal += time.Since(began)
		sub.Unsubscribe()
		launcher.Process.Signal(syscall.SIGTERM)
		launcher.Wait()
	}
	b.ReportMetric(float64(enrolTotal.Milliseconds())/float64(b.N), "ms-enrol/op")
	b.ReportMetric(float64(firstTotal.Milliseconds())/float64(b.N), "ms-to-heartbeat/op")
}
