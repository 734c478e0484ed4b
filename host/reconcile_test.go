package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A declaration naming a path inside this host's configured root (not the default one, which
// the parser knows) is refused when it arrives, reported, and the held declaration stays;
// nothing is written into the root.
func TestADeclarationIntoTheConfiguredRootIsRefusedOnArrival(t *testing.T) {
	b, hbs, th := linkedHost(t)
	good := b.Declare("n1", decl("n1", ""))
	meshtest.WaitHeartbeat(t, hbs, "the good declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == good })
	into := filepath.Join(th.root, "versions", "v9.9.9", "mesh-host")
	rev := b.Declare("n1", decl("n1", fmt.Sprintf(`{"type": "file", "id": %q, "spec": {"content": "#!/bin/sh\n"}}`, into)))
	hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", func(hb wire.Heartbeat) bool { return hb.Refused != nil && hb.Refused.Revision == rev })
	if !strings.Contains(hb.Refused.Error, "resources[0]") || !strings.Contains(hb.Refused.Error, th.root) {
		t.Errorf("refusal %q; want it to name the resource and the root", hb.Refused.Error)
	}
	if hb.DeclarationRevision != good {
		t.Errorf("held revision %d, want %d kept", hb.DeclarationRevision, good)
	}
	if _, err := os.Stat(filepath.Dir(into)); err == nil {
		t.Errorf("%s was made", filepath.Dir(into))
	}
}
