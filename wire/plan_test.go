package wire_test

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

func testPlan() wire.Plan {
	return wire.Plan{
		Rollout: "20261202T120000Z-v1.4.0", Version: "v1.4.0", Seq: 1764417600000, Expires: "2026-12-09T12:00:00Z",
		Salt: wire.PlanSalt("v1.4.0"), Canaries: []string{"web-01", "arm-07"},
		Waves: []uint32{10000, 100000, 500000, 1000000}, In: 2, State: wire.PlanRunning,
	}
}

func TestPlanSigningTextIsTheDocumentedText(t *testing.T) {
	p := testPlan()
	p.Salt = "0123456789abcdef0123456789abcdef"
	want := "mesh-host plan 1\nkey=plan\nrollout=20261202T120000Z-v1.4.0\nversion=v1.4.0\nseq=1764417600000\n" +
		"expires=2026-12-09T12:00:00Z\nsalt=0123456789abcdef0123456789abcdef\ncanary=web-01\ncanary=arm-07\n" +
		"waves=10000,100000,500000,1000000\nin=2\nstate=running\n"
	if got := string(p.SigningText()); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
}

func TestPlanSignedByATrustedTargetKeyVerifiesAndAnAlteredOneDoesNot(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	otherPub, _, _ := ed25519.GenerateKey(nil)
	p := testPlan()
	if err := p.Sign(priv); err != nil {
		t.Fatal(err)
	}
	read, err := wire.ParsePlan(p.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	if err := read.Verify(wire.LegacyTrust(nil, []ed25519.PublicKey{pub}), now); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if err := read.Verify(wire.LegacyTrust(nil, []ed25519.PublicKey{otherPub}), now); !errors.Is(err, wire.ErrPlanUnknownKey) {
		t.Fatalf("verify with another key: %v, want ErrPlanUnknownKey", err)
	}
	widened := read
	widened.In = 5
	if err := widened.Verify(wire.LegacyTrust(nil, []ed25519.PublicKey{pub}), now); !errors.Is(err, wire.ErrPlanBadSignature) {
		t.Fatalf("verify a widened plan: %v, want ErrPlanBadSignature", err)
	}
}

func TestPlanRefusesFieldsThatAreWrong(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(p *wire.Plan)
	}{
		{"bad salt", "salt", func(p *wire.Plan) { p.Salt = "XYZ" }},
		{"waves not ending at all", "last wave", func(p *wire.Plan) { p.Waves = []uint32{10000, 500000} }},
		{"waves decreasing", "increasing", func(p *wire.Plan) { p.Waves = []uint32{500000, 10000, 1000000} }},
		{"in past the batches", "in is 6", func(p *wire.Plan) { p.In = 6 }},
		{"unknown state", "state", func(p *wire.Plan) { p.State = "paused" }},
		{"canary twice", "twice", func(p *wire.Plan) { p.Canaries = []string{"a", "a"} }},
		{"canary not a node id", "canary", func(p *wire.Plan) { p.Canaries = []string{"a.b"} }},
		{"reason of two lines", "reason", func(p *wire.Plan) { p.Reason = "a\nb" }},
		{"completed but not all in", "completed", func(p *wire.Plan) { p.State = wire.PlanCompleted }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testPlan()
			tc.change(&p)
			if err := p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestPlanBucketIsTheDocumentedHash(t *testing.T) {
	// Computed outside Go by the rule in docs/wire.md, so that the rule cannot drift:
	got := wire.PlanBucket("0123456789abcdef0123456789abcdef", "node-1")
	// python3 -c "import hashlib; h=int.from_bytes(hashlib.sha256(b'0123456789abcdef0123456789abcdef'+b'node-1').digest()[:8],'big'); print(h*1000000>>64)"
	if got != 74647 {
		t.Fatalf("bucket of node-1 = %d, want 74647", got)
	}
}

func TestANodeInABatchStaysInEveryLaterOne(t *testing.T) {
	p := testPlan()
	counts := make([]int, p.Batches()+1)
	for i := 0; i < 100000; i++ {
		n := wire.PlanNode{ID: fmt.Sprintf("node-%d", i)}
		b := p.BatchOf(n)
		if b < 0 {
			t.Fatalf("%s is in no batch", n.ID)
		}
		for in := 0; in <= p.Batches(); in++ {
			p.In = in
			if p.Holds(n) != (b < in) {
				t.Fatalf("%s of batch %d: held %v at in %d", n.ID, b, p.Holds(n), in)
			}
		}
		counts[b]++
		p.State = wire.PlanCompleted
		if p.Holds(n) {
			t.Fatalf("a completed plan holds %s", n.ID)
		}
		p.State = wire.PlanRunning
	}
	// 1 %, 9 %, 40 %, 50 % of 100,000, within a few hundred.
	for k, want := range []int{1000, 9000, 40000, 50000} {
		if got := counts[k+1]; got < want*9/10 || got > want*11/10 {
			t.Errorf("wave %d holds %d of 100,000 nodes, want about %d", k+1, got, want)
		}
	}
}

func TestPlanLeavesOutSkippedPlatformsAndPutsMeteredNodesLast(t *testing.T) {
	p := testPlan()
	p.SkipPlatforms = []string{"linux/riscv64"}
	p.MeteredLast = true
	if b := p.BatchOf(wire.PlanNode{ID: "x", Platform: "linux/riscv64"}); b != -1 {
		t.Errorf("a node of a skipped platform is in batch %d", b)
	}
	if b := p.BatchOf(wire.PlanNode{ID: "x", Metered: true}); b != len(p.Waves) {
		t.Errorf("a metered node is in batch %d, want the last, %d", b, len(p.Waves))
	}
	if b := p.BatchOf(wire.PlanNode{ID: "arm-07", Metered: true}); b != 0 {
		t.Errorf("a named canary on a metered link is in batch %d, want 0", b)
	}
}
