package lab

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Reproduced against main: a valid 429 KB declaration of 11,000 file resources made the host
// log a one-line reconcile error of over 1 MB; the launcher's relay gave up, the host died of
// SIGPIPE on every start, a v1.2.0 delivered beside it was marked bad, the rollback failed too
// and the launcher stopped in its failed state; heartbeats exceeded the server's max payload, so
// the node also went silent. Now the node takes it in its stride: every version confirms, the
// reconcile error is bounded, and heartbeats keep coming.
func TestLargeValidDeclarationNeverBricksTheNode(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 180*time.Second)
	b, rel, n, hbs := deliveringNode(t, ctx, "v1.1.0")

	// Every file's directory is missing (never declared), so the apply fails at the first and
	// names it: the error stays bounded however many resources follow.
	// A short path keeps the declaration under the 1 MiB limit: t.TempDir's are long.
	short, err := os.MkdirTemp("", "m")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	missing := filepath.Join(short, "x")
	decl := wire.Declaration{Version: 1, Node: "lab"}
	for i := range 11000 {
		decl.Resources = append(decl.Resources, wire.Resource{Type: wire.KindFile, ID: fmt.Sprintf("%s/f%05d", missing, i), Spec: json.RawMessage(`{"content":""}`)})
	}
	file := filepath.Join(t.TempDir(), "lab.json")
	if err := os.WriteFile(file, decl.Marshal(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := rel.Run(ctx, "declare", "lab", file, "--nats", b.URL()); err != nil {
		t.Fatal(err)
	}
	hb := meshtest.WaitHeartbeat(t, hbs, "the large declaration reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision > 0 && hb.LastReconcile != nil && hb.LastReconcile.Trigger == wire.TriggerDeclaration
	})
	if e := hb.LastReconcile.Error; len(e) > 8<<10 || !strings.Contains(e, "resources[0]") || hb.LastReconcile.OK {
		t.Errorf("reconcile ok=%v, error of %d bytes, want it failed at resources[0] and bounded: %.300s", hb.LastReconcile.OK, len(e), e)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("%s exists after the failed apply (err %v); a missing parent is never made implicitly", missing, err)
	}

	if err := rel.Ship(ctx, "v1.2.0", build(t, PkgHost, "v1.2.0")); err != nil {
		t.Fatal(err)
	}
	if err := rel.Target(ctx, "v1.2.0", "lab"); err != nil {
		t.Fatal(err)
	}
	meshtest.WaitHeartbeat(t, hbs, "v1.2.0 confirmed with the large declaration held", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.2.0" && hb.KnownGood == "v1.2.0" && hb.DeclarationRevision > 0
	})
	rep, code, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.Versions {
		if v.Bad || v.FailuresTotal > 0 {
			t.Errorf("%s: bad %v, %d failures; a declaration must never cost a version", v.Version, v.Bad, v.FailuresTotal)
		}
	}
	if code != 0 || rep.Failed {
		t.Errorf("status exit %d, failed %v (%s)", code, rep.Failed, rep.FailedReason)
	}
}
