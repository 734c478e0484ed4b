package host

import (
	"context"
	"encoding/base64"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A target whose version has no build for this node's platform is refused by name and never
// marked bad (the heartbeat saying the node reads manifest schema 4); once the manifest is republished with the platform, the node fetches it under the
// same target (it reads the manifest again each heartbeat interval while it refuses it).
func TestATargetWithoutThisPlatformIsRefusedByNameThenFetchedOnceRepublished(t *testing.T) {
	b, hbs, th := linkedHost(t, func(c *config.Config) {
		c.TrustedKeys = []string{base64.StdEncoding.EncodeToString(meshtest.ReleaseKey.Public)} // delivery on
		c.HeartbeatInterval = config.Duration(200 * time.Millisecond)
	})
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	const v = "v1.1.0"
	publishFakeFor(t, b, v, other)
	key := wire.NodeTargetKey("n1")
	rev := putTarget(b, key, signed(t, key, v, 1, time.Now().Add(time.Hour), meshtest.ReleaseKey.Private).Marshal())
	hb := meshtest.WaitHeartbeat(t, hbs, "the target refused for its platform", refusedAt("target", rev))
	want := v + " has no build for " + runtime.GOOS + "/" + runtime.GOARCH + " (it has " + runtime.GOOS + "/" + other + ")"
	if !strings.Contains(hb.Refused.Error, want) || !strings.Contains(hb.Refused.Error, "(no-platform)") {
		t.Fatalf("refusal %q, want one saying %q", hb.Refused.Error, want)
	}
	if hb.ManifestSchema != wire.ManifestSchemaPlatforms {
		t.Errorf("heartbeat manifest_schema %d, want %d: the newest manifest schema this host reads", hb.ManifestSchema, wire.ManifestSchemaPlatforms)
	}
	if bad, why, err := th.h.records.IsBad(context.Background(), v); bad || err != nil {
		t.Fatalf("%s marked bad (%s, %v) for a platform it lacks", v, why, err)
	}
	// Republished with this platform's build: fetched under the same target. Its binary cannot
	// run, so the node now refuses it for that — proof that it read the new manifest and fetched.
	publishFake(t, b, v)
	hb = meshtest.WaitHeartbeat(t, hbs, "the republished version fetched", func(hb wire.Heartbeat) bool {
		return hb.Refused != nil && hb.Refused.Revision == rev && !strings.Contains(hb.Refused.Error, "no-platform")
	})
	if !strings.Contains(hb.Refused.Error, "(wrong-platform)") {
		t.Fatalf("after republishing, refusal %q; want the fetched fake binary refused", hb.Refused.Error)
	}
}
