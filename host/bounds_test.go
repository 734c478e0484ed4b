package host

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The reproduction: a valid 429 KB declaration of 11,000 file resources, failing. The
// reconcile error once joined one message per resource with no cap and the node went silent.
// Now the apply stops at the first failed step and names it, bounded, and the heartbeat keeps
// coming. (The files' directory does not exist, so the first step fails however it is applied.)
func TestHostWithThousandsOfFailingResourcesKeepsHeartbeatingWithABoundedError(t *testing.T) {
	b, hbs, th := linkedHost(t)
	dir := filepath.Join(t.TempDir(), "not-there")
	// As many as make the issue's ~429 KB (the temp dir's name makes each id longer than the
	// issue's /srv/app/data/… ones).
	var res []string
	for size := 0; size < 429_000; {
		res = append(res, fmt.Sprintf(`{"type":"file","id":"%s/file-%05d.conf","spec":{"content":"x"}}`, dir, len(res)))
		size += len(res[len(res)-1]) + 1
	}
	value := decl("n1", strings.Join(res, ","))
	rev := b.Declare("n1", value)
	hb := meshtest.WaitHeartbeat(t, hbs, "the declaration reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision == rev && hb.LastReconcile != nil && hb.LastReconcile.Trigger == "declaration"
	})
	e := hb.LastReconcile.Error
	if len(e) > wire.MaxErrorBytes {
		t.Errorf("the reconcile error is %d bytes, over %d", len(e), wire.MaxErrorBytes)
	}
	if want := fmt.Sprintf(`resources[0] file "%s/file-00000.conf"`, dir); !strings.HasPrefix(e, want) || strings.Contains(e, "resources[1]") {
		t.Errorf("the reconcile error does not name just the first failed step %q:\n%s", want, e)
	}
	for _, line := range strings.Split(th.logs.String(), "\n") {
		if len(line) > 2*wire.MaxErrorBytes {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}

// A refusal quotes the input: a declaration whose unknown key is 900,000 '<' (each written
// \u003c in JSON) made a refusal that no heartbeat could carry. The refusal is bounded in the
// store, the log and the heartbeat, and the held declaration stays.
func TestHostBoundsARefusalThatQuotesAHugeKey(t *testing.T) {
	b, hbs, th := linkedHost(t)
	good := b.Declare("n1", decl("n1", ""))
	meshtest.WaitHeartbeat(t, hbs, "the good declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == good })
	rev := b.Declare("n1", []byte(`{"version":1,"node":"n1","resources":[],"`+strings.Repeat("<", 900_000)+`":1}`))
	hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", func(hb wire.Heartbeat) bool { return hb.Refused != nil && hb.Refused.Revision == rev })
	if len(hb.Refused.Error) > wire.MaxErrorBytes || !strings.Contains(hb.Refused.Error, "unknown field") || !strings.Contains(hb.Refused.Error, "…") {
		t.Errorf("refusal of %d bytes, want at most %d, naming the unknown field and saying it was cut: %.200s", len(hb.Refused.Error), wire.MaxErrorBytes, hb.Refused.Error)
	}
	if hb.DeclarationRevision != good {
		t.Errorf("held revision %d, want %d kept", hb.DeclarationRevision, good)
	}
	for _, line := range strings.Split(th.logs.String(), "\n") {
		if len(line) > 2*wire.MaxErrorBytes {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}

// A declaration over the host's limit is refused by size, before it is parsed; the refusal says
// both sizes and the setting, and the held declaration stays.
func TestHostRefusesADeclarationOverItsLimitAndKeepsTheHeldOne(t *testing.T) {
	b, hbs, th := linkedHost(t, func(c *config.Config) { c.MaxDeclarationBytes = 10_000 })
	// A path of this test's own: a host applies what it holds, and tests run as root.
	motd := strconv.Quote(filepath.Join(t.TempDir(), "motd"))
	good := b.Declare("n1", decl("n1", `{"type":"file","id":`+motd+`,"spec":{"content":"hi"}}`))
	meshtest.WaitHeartbeat(t, hbs, "the good declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == good })
	big := decl("n1", `{"type":"file","id":`+motd+`,"spec":{"content":"`+strings.Repeat("x", 20_000)+`"}}`)
	rev := b.Declare("n1", big)
	hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", func(hb wire.Heartbeat) bool { return hb.Refused != nil && hb.Refused.Revision == rev })
	want := fmt.Sprintf("declaration is %s bytes, over the 10,000-byte limit", commas(len(big)))
	if !strings.Contains(hb.Refused.Error, want) || !strings.Contains(hb.Refused.Error, "max_declaration_bytes") {
		t.Errorf("refusal %q, want it to say %q and name max_declaration_bytes", hb.Refused.Error, want)
	}
	if hb.DeclarationRevision != good {
		t.Errorf("held revision %d, want %d kept", hb.DeclarationRevision, good)
	}
	// Exactly at the limit is accepted.
	pad := 10_000 - len(decl("n1", `{"type":"file","id":`+motd+`,"spec":{"content":""}}`))
	at := decl("n1", `{"type":"file","id":`+motd+`,"spec":{"content":"`+strings.Repeat("y", pad)+`"}}`)
	if len(at) != 10_000 {
		t.Fatalf("built %d bytes, want 10,000", len(at))
	}
	rev = b.Declare("n1", at)
	// Held comes before its reconcile ends: wait for the reconcile the good one triggers.
	meshtest.WaitHeartbeat(t, hbs, "the declaration at the limit reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision == rev && th.reconciles().Count("declaration") >= 2
	})
	if n := th.reconciles().Count("declaration"); n != 2 {
		t.Errorf("%d declaration reconciles, want 2 (the refused one triggers none)", n)
	}
}

func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
