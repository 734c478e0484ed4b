package host

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/truststore"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// putRoot publishes r under the releases bucket's key for version (its own unless given).
func putRoot(b *meshtest.Bus, r wire.Root, version ...uint64) uint64 {
	v := r.Version
	if len(version) > 0 {
		v = version[0]
	}
	return b.Put(b.Names.Releases(), wire.RootKey(v), r.Marshal())
}

// rootV is root version v expiring at expires, signed to follow v-1: v1 by two root keys and
// the test release key (the migration from host.json's keys), later ones by two root keys.
func rootV(t *testing.T, v uint64, expires time.Time, rel, tgt meshtest.KeyPair) wire.Root {
	rk := meshtest.RootKeys
	r := meshtest.NewRoot(t, v, expires, rel, tgt)
	if v == 1 {
		return meshtest.SignRoot(t, r, rk[0], rk[1], meshtest.ReleaseKey)
	}
	return meshtest.SignRoot(t, r, rk[1], rk[2])
}

func trustRootIs(v uint64) func(wire.Heartbeat) bool {
	return func(hb wire.Heartbeat) bool { return hb.TrustRoot == v }
}

func trustedReleaseKey(c *config.Config) {
	c.TrustedKeys = []string{base64.StdEncoding.EncodeToString(meshtest.ReleaseKey.Public)}
}

// A node with host.json's keys takes root v1 once it is signed by one of them, walks the chain
// over the bus as roots are published, storing each under ROOT/trust, and refuses — by name,
// keeping the root it holds — a root signed by one of three root keys and one going back.
func TestANodeWalksTheRootChainAndRefusesWhatDoesNotFollow(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	later := time.Now().Add(24 * time.Hour)
	rel := meshtest.ReleaseKey
	unsigned := meshtest.SignRoot(t, meshtest.NewRoot(t, 1, later, rel, rel), meshtest.RootKeys[0], meshtest.RootKeys[1])
	rev := putRoot(b, unsigned)
	th := startHost(t, newRoot(t, "v1.0.0"), "n1", b.URL())
	hb := meshtest.WaitHeartbeat(t, hbs, "root v1 without a host.json key's signature refused", refusedAt(RefusedRoot, rev))
	if !strings.Contains(hb.Refused.Error, "cannot replace them") || hb.TrustRoot != 0 {
		t.Fatalf("refusal %q, trust_root %d", hb.Refused.Error, hb.TrustRoot)
	}

	for v := uint64(1); v <= 3; v++ {
		putRoot(b, rootV(t, v, later, rel, rel))
	}
	meshtest.WaitHeartbeat(t, hbs, "root v3 walked to", trustRootIs(3))
	for v := uint64(1); v <= 3; v++ {
		if _, err := os.Stat(filepath.Join(truststore.Dir(th.root), truststore.FileName(v))); err != nil {
			t.Errorf("root v%d not stored: %v", v, err)
		}
	}

	for _, tc := range []struct {
		name string
		root wire.Root
		want string
	}{
		{"signed by one of three root keys", meshtest.SignRoot(t, meshtest.NewRoot(t, 4, later, rel, rel), meshtest.RootKeys[0]), "2 of root v3's root keys must sign it; 1 did"},
		{"going back a version", rootV(t, 2, later, rel, rel), "root v2 refused: this node holds root v3 and never goes back a version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := putRoot(b, tc.root, 4)
			hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", refusedAt(RefusedRoot, rev))
			if !strings.Contains(hb.Refused.Error, tc.want) || !strings.Contains(hb.Refused.Error, "this node keeps root v3") || hb.TrustRoot != 3 {
				t.Errorf("refusal %q, trust_root %d; want it to say %q and keep root v3", hb.Refused.Error, hb.TrustRoot, tc.want)
			}
		})
	}
	putRoot(b, rootV(t, 4, later, rel, rel))
	meshtest.WaitHeartbeat(t, hbs, "root v4 taken", trustRootIs(4))
}

// After root v2 rotates the release and target keys, a release signed under v2 — refused
// while the node held v1 — is taken once the node walked to v2; what the removed key signs
// is refused by name and marks nothing bad.
func TestARotationTakesWhatTheNewKeysSignAndRefusesTheRemovedKeyByName(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	later := time.Now().Add(24 * time.Hour)
	old, newRel, newTgt := meshtest.ReleaseKey, meshtest.SecondKey, meshtest.TargetKey
	putRoot(b, rootV(t, 1, later, old, old))
	th := startHost(t, newRoot(t, "v1.0.0"), "n1", b.URL(), trustedReleaseKey)
	meshtest.WaitHeartbeat(t, hbs, "root v1 taken", trustRootIs(1))

	key := wire.NodeTargetKey("n1")
	publishFakeSigned(t, b, "v1.1.0", runtime.GOARCH, newRel)
	rev := putTarget(b, key, signed(t, key, "v1.1.0", 1, later, newTgt.Private).Marshal())
	hb := meshtest.WaitHeartbeat(t, hbs, "a target signed under root v2 refused under v1", refusedAt("target", rev))
	if !strings.Contains(hb.Refused.Error, "which root v1 does not list for targets") {
		t.Errorf("refusal %q", hb.Refused.Error)
	}
	putRoot(b, rootV(t, 2, later, newRel, newTgt))
	// The target is taken, and its manifest (signed by v2's release key) gets past its
	// signature: the fake binary is refused by what follows.
	meshtest.WaitHeartbeat(t, hbs, "the release signed under root v2 past its signature", func(hb wire.Heartbeat) bool {
		return hb.TrustRoot == 2 && hb.Target == "v1.1.0" && hb.Refused != nil && hb.Refused.What == "target" &&
			strings.Contains(hb.Refused.Error, "host v1.1.0") && !strings.Contains(hb.Refused.Error, "(signature)")
	})

	for _, tc := range []struct {
		name, version string
		signer        meshtest.KeyPair // of the target; the manifest is signed by the old key
		want          string
	}{
		{"a target signed by the removed key", "v1.2.0", old, "which root v2 removed from targets"},
		{"a release signed by the removed key", "v1.3.0", newTgt, "(signature): manifest v1.3.0: signed by a key a root removed: signed by key " + wire.ShortKeyID(wire.KeyID(old.Public)) + " which root v2 removed from releases"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			publishFakeSigned(t, b, tc.version, runtime.GOARCH, old)
			seq := map[string]uint64{"v1.2.0": 2, "v1.3.0": 3}[tc.version]
			rev := putTarget(b, key, signed(t, key, tc.version, seq, later, tc.signer.Private).Marshal())
			hb := meshtest.WaitHeartbeat(t, hbs, "the refusal", func(hb wire.Heartbeat) bool {
				return hb.Refused != nil && hb.Refused.What == "target" && hb.Refused.Revision == rev && strings.Contains(hb.Refused.Error, tc.version)
			})
			if !strings.Contains(hb.Refused.Error, tc.want) {
				t.Errorf("refusal %q does not say %q", hb.Refused.Error, tc.want)
			}
			if bad, _, err := records(t, th.root).IsBad(context.Background(), tc.version); err != nil || bad {
				t.Errorf("%s marked bad: %v, %v", tc.version, bad, err)
			}
		})
	}
}

// A node whose newest root has expired keeps running and reconciling, says since when (its
// heartbeat, its log once, ROOT/trust-expired.json for `mesh-launcher status`), and takes no
// new target; a fresh root ends it and the target held is taken.
func TestExpiredTrustKeepsTheHostRunningAndHoldsNewTargetsUntilAFreshRoot(t *testing.T) {
	b := meshtest.StartBus(t)
	hbs := b.Heartbeats("n1")
	clk := &clock{at: time.Now()}
	rel := meshtest.ReleaseKey
	v1 := rootV(t, 1, clk.Now().Add(time.Hour), rel, rel)
	putRoot(b, v1)
	th := startHostWith(t, newRoot(t, "v1.0.0"), "n1", b.URL(), "v1.0.0", func(o *Options) { o.Now = clk.Now })
	meshtest.WaitHeartbeat(t, hbs, "root v1 taken, fresh", func(hb wire.Heartbeat) bool { return hb.TrustRoot == 1 && hb.TrustExpiredSince == nil })

	clk.Set(clk.Now().Add(2 * time.Hour))
	th.h.heartbeatSoon()
	hb := meshtest.WaitHeartbeat(t, hbs, "trust expired", func(hb wire.Heartbeat) bool { return hb.TrustExpiredSince != nil })
	since := v1.ExpiresAt()
	if !hb.TrustExpiredSince.Equal(since) || hb.State != wire.StateRunning {
		t.Errorf("trust_expired_since %v, state %s; want %v, running", hb.TrustExpiredSince, hb.State, since)
	}
	if te, err := rollback.ReadTrustExpired(th.root); err != nil || te == nil || te.Line() != wire.TrustExpiredLine(since) {
		t.Errorf("trust-expired.json: %+v, %v", te, err)
	}
	if n := strings.Count(th.logs.String(), wire.TrustExpiredLine(since)); n != 1 {
		t.Errorf("the log says %q %d times, want once", wire.TrustExpiredLine(since), n)
	}

	key := wire.NodeTargetKey("n1")
	rev := putTarget(b, key, signed(t, key, "v1.1.0", 1, time.Now().Add(time.Hour), rel.Private).Marshal())
	hb = meshtest.WaitHeartbeat(t, hbs, "a new target held", refusedAt("target", rev))
	if !strings.Contains(hb.Refused.Error, "v1.1.0 not taken: "+wire.TrustExpiredLine(since)) || hb.Target != "" {
		t.Errorf("refusal %q, target %q", hb.Refused.Error, hb.Target)
	}
	b.Declare("n1", decl("n1", ""))
	meshtest.Eventually(t, "a reconcile of the declaration while trust is expired", func() bool { return th.reconciles().Count("declaration") >= 1 })

	putRoot(b, rootV(t, 2, clk.Now().Add(time.Hour), rel, rel))
	meshtest.WaitHeartbeat(t, hbs, "fresh trust and the held target taken", func(hb wire.Heartbeat) bool {
		return hb.TrustRoot == 2 && hb.TrustExpiredSince == nil && hb.Target == "v1.1.0" && hb.State == wire.StateRunning
	})
	if te, err := rollback.ReadTrustExpired(th.root); err != nil || te != nil {
		t.Errorf("trust-expired.json left after fresh trust: %+v, %v", te, err)
	}
	if (rollback.TrustExpired{Since: since}).Line() != wire.TrustExpiredLine(since) {
		t.Errorf("mesh-launcher status and the heartbeat's readers say it differently")
	}
}
