package lab

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// beforePlatforms is the last commit of main before issue 28 (one version for every platform):
// its host reads manifest schemas 1 to 3 only, as every deployed host does (decision 0042).
const beforePlatforms = "ed4729392c6e9c6ce7e6e42dc354c25a673e239f"

// The bridge of decision 0042, with a launcher and a host built from the commit before issue 28:
// a schema 4 release is refused by name (its manifest's "platforms" key) and not marked bad; the
// first host that reads schema 4, published with `publish --manifest-schema 3`, is taken as any
// release was; and the host it became takes the schema 4 release the old one refused.
func TestAHostBeforeSchema4CrossesTheBridgeToTheReleaseItRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("builds mesh-launcher and mesh-host from the commit before issue 28")
	}
	t.Parallel()
	oldLauncher := buildAt(t, beforePlatforms, PkgLauncher, ToolVersion)
	oldHost := buildAt(t, beforePlatforms, PkgHost, "v1.0.0")
	launcherBin := build(t, PkgLauncher, ToolVersion)
	ctx := meshtest.Context(t, 4*time.Minute)

	b := meshtest.StartBus(t)
	rel := newRelease(t, b)
	pub, err := rel.Keygen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hbs := b.Heartbeats("lab")
	n := newNode(t, "MESH_HOST_NATS_URL="+b.URL(), "MESH_HOST_TRUSTED_KEYS="+pub, "MESH_HOST_HEARTBEAT_INTERVAL=500ms")
	n.Launcher = oldLauncher
	if err := n.PlaceVersion("v1.0.0", oldHost); err != nil {
		t.Fatal(err)
	}
	start(t, n)
	meshtest.WaitHeartbeat(t, hbs, "the host from before issue 28 confirmed", func(hb wire.Heartbeat) bool { return hb.KnownGood == "v1.0.0" })

	// buildRelease is `mesh-release build` of this tree's host as version, for this machine's
	// platform, with the launcher the lab builds: a schema 4 manifest.
	buildRelease := func(version string) string {
		t.Helper()
		dir := filepath.Join(rel.Out, version)
		if _, err := rel.Run(ctx, "build", "--version", version, "--binary", build(t, PkgHost, version), "--launcher", launcherBin,
			"--key", rel.KeyPath(), "-o", dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	target := func(version string) {
		t.Helper()
		if err := rel.Target(ctx, version, "lab"); err != nil {
			t.Fatal(err)
		}
	}

	// v1.2.0, schema 4: refused by name, and not marked bad.
	if _, err := rel.Run(ctx, "publish", buildRelease("v1.2.0"), "--nats", b.URL()); err != nil {
		t.Fatal(err)
	}
	target("v1.2.0")
	refused := meshtest.WaitHeartbeat(t, hbs, "the schema 4 release refused", func(hb wire.Heartbeat) bool {
		return hb.Refused != nil && hb.Refused.What == "target" && strings.Contains(hb.Refused.Error, "v1.2.0")
	})
	if e := refused.Refused.Error; !strings.Contains(e, "(bad-manifest)") || !strings.Contains(e, "platforms: unknown field") {
		t.Errorf("the host from before refused v1.2.0 saying %q; want a bad-manifest refusal naming the key it does not read, platforms", e)
	}
	if refused.Running != "v1.0.0" {
		t.Errorf("after refusing v1.2.0 the node runs %q, want v1.0.0", refused.Running)
	}
	rep, _, err := n.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := Version(rep, "v1.2.0"); ok {
		t.Errorf("the refused release is in the node's records: %+v; a release a host cannot read is never marked bad", v)
	}

	// v1.1.0, the first host that reads schema 4, over the bridge: the single-platform manifest.
	out, err := rel.Run(ctx, "publish", buildRelease("v1.1.0"), "--nats", b.URL(), "--manifest-schema", "3", "--key", rel.KeyPath())
	if err != nil {
		t.Fatal(err)
	}
	target("v1.1.0")
	hb := meshtest.WaitHeartbeat(t, hbs, "v1.1.0 confirmed, delivered by the host from before", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.1.0" && hb.KnownGood == "v1.1.0"
	})
	if hb.ManifestSchema != wire.ManifestSchemaPlatforms {
		t.Errorf("v1.1.0 heartbeats manifest_schema %d, want %d\npublish said:\n%s", hb.ManifestSchema, wire.ManifestSchemaPlatforms, out)
	}

	// The host it became takes the schema 4 release the old one refused.
	target("v1.2.0")
	meshtest.WaitHeartbeat(t, hbs, "v1.2.0 (schema 4) confirmed", func(hb wire.Heartbeat) bool {
		return hb.Running == "v1.2.0" && hb.KnownGood == "v1.2.0"
	})
}
