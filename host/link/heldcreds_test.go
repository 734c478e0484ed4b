package link

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The creds file replaced under a running link — another node enrolled into the same root, as
// `mesh-host enrol --replace` may — is not taken at the next reconnect: the link reconnects as
// the user it started with, still follows its node's keys and still heartbeats on its subject.
func TestARunningLinkKeepsTheCredentialsItStartedWithWhenTheFileIsReplaced(t *testing.T) {
	b := meshtest.StartOperatorBus(t)
	withdrawalsBucket(t, b.Admin.JS)
	dir := t.TempDir()
	creds, _ := b.NodeCreds(t, dir, "n1", trust.NodePermissions(b.Names, "n1"))
	l, _ := openLogged(t, Options{URLs: []string{b.URL()}, Creds: creds, JSAPIPrefix: wire.NodeJSAPIPrefix})
	n := &legacyNode{bus: b, creds: creds, link: l}
	n.followsDeclaration(t, n.put(t, b.Names.Declarations(), "n1", decl("n1")))

	other, _ := b.NodeCreds(t, t.TempDir(), "n2", trust.NodePermissions(b.Names, "n2"))
	data, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "n1.creds.new")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, creds); err != nil {
		t.Fatal(err)
	}
	if err := l.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	waitFor[Reconnected](t, l, "the reconnect", nil)

	n.followsDeclaration(t, n.put(t, b.Names.Declarations(), "n1", decl("n1")))
	if err := l.PublishHeartbeat(meshtest.Context(t, 30*time.Second), wire.Heartbeat{}); err != nil {
		t.Fatalf("heartbeat after the reconnect: %v", err)
	}
}
