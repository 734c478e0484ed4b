package host

import (
	"fmt"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/internal/meshtest"
	"github.com/novox/mesh-host/wire"
)

// The reproduction: a valid 429 KB declaration of 11,000 file resources. The reconcile
// error joined one message per resource with no cap, the host logged it as one line, and every
// heartbeat after it failed with "maximum payload exceeded": the node went silent. Now the error
// names the first failures and counts the rest, and the heartbeat keeps coming.
func TestHostWithElevenThousandFailingResourcesKeepsHeartbeatingWithABoundedError(t *testing.T) {
	b, hbs, th := linkedHost(t)
	const n = 11000
	res := make([]string, n)
	for i := range res {
		res[i] = fmt.Sprintf(`{"type":"file","id":"/srv/app/data/file-%05d.conf","spec":{}}`, i)
	}
	value := decl("n1", strings.Join(res, ","))
	if len(value) < 400_000 {
		t.Fatalf("declaration is %d bytes; the reproduction needs the issue's ~429 KB", len(value))
	}
	rev := b.Declare("n1", value)
	hb := meshtest.WaitHeartbeat(t, hbs, "the declaration reconciled", func(hb wire.Heartbeat) bool {
		return hb.DeclarationRevision == rev && hb.LastReconcile != nil && hb.LastReconcile.Trigger == "declaration"
	})
	e := hb.LastReconcile.Error
	if len(e) > wire.MaxErrorBytes {
		t.Errorf("the reconcile error is %d bytes, over %d", len(e), wire.MaxErrorBytes)
	}
	for _, want := range []string{"11000 of 11000 resources failed", `resources[0] file "/srv/app/data/file-00000.conf"`, `resources[9] file`, "and 10990 more"} {
		if !strings.Contains(e, want) {
			t.Errorf("the reconcile error does not say %q:\n%s", want, e)
		}
	}
	if strings.Contains(e, "resources[10] ") {
		t.Errorf("the reconcile error names more than the first %d failures", maxFailuresNamed)
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
	if len(hb.Refused.Error) > wire.MaxErrorBytes || !strings.Contains(hb.Refused.Error, "unknown field") || !strings.Contains(hb.Refused.Error, "…[cut ") {
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

func TestReconcileErrorNamesTheFirstFailuresAndCountsTheRest(t *testing.T) {
	fail := func(n, total int) string {
		f := failures{total: total}
		for i := 0; i < n; i++ {
			f.add(i, wire.Resource{Type: "file", ID: fmt.Sprintf("/f%d", i)}, fmt.Errorf("no"))
		}
		if err := f.err(); err != nil {
			return err.Error()
		}
		return ""
	}
	if got := fail(0, 5); got != "" {
		t.Errorf("nothing failed: %q", got)
	}
	if got, want := fail(2, 5), `2 of 5 resources failed: resources[0] file "/f0": no; resources[1] file "/f1": no`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := fail(1, 1), `1 of 1 resource failed: resources[0] file "/f0": no`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := fail(maxFailuresNamed, 20); strings.Contains(got, "more") {
		t.Errorf("exactly %d failures: %q", maxFailuresNamed, got)
	}
	if got := fail(maxFailuresNamed+3, 20); !strings.HasSuffix(got, `resources[9] file "/f9": no; and 3 more`) {
		t.Errorf("got %q", got)
	}
	f := failures{total: 1}
	f.add(0, wire.Resource{Type: "file", ID: strings.Repeat("x", 100_000)}, fmt.Errorf("no"))
	if got := f.err().Error(); len(got) > maxFailureBytes+64 {
		t.Errorf("one failure naming a 100 KB id is %d bytes", len(got))
	}
}

// A declaration over the host's limit is refused by size, before it is parsed; the refusal says
// both sizes and the setting, and the held declaration stays.
func TestHostRefusesADeclarationOverItsLimitAndKeepsTheHeldOne(t *testing.T) {
	b, hbs, th := linkedHost(t, func(c *config.Config) { c.MaxDeclarationBytes = 10_000 })
	good := b.Declare("n1", decl("n1", `{"type":"file","id":"/etc/motd"}`))
	meshtest.WaitHeartbeat(t, hbs, "the good declaration", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == good })
	big := decl("n1", `{"type":"file","id":"/etc/motd","spec":{"content":"`+strings.Repeat("x", 20_000)+`"}}`)
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
	pad := 10_000 - len(decl("n1", `{"type":"file","id":"/etc/motd","spec":{"content":""}}`))
	at := decl("n1", `{"type":"file","id":"/etc/motd","spec":{"content":"`+strings.Repeat("y", pad)+`"}}`)
	if len(at) != 10_000 {
		t.Fatalf("built %d bytes, want 10,000", len(at))
	}
	rev = b.Declare("n1", at)
	meshtest.WaitHeartbeat(t, hbs, "the declaration at the limit held", func(hb wire.Heartbeat) bool { return hb.DeclarationRevision == rev })
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
