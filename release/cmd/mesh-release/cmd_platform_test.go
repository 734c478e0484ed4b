package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// heartbeatOn publishes a heartbeat of node running v1.0.0 on platform p, from a host that
// reads manifest schema reads.
func heartbeatOn(t *testing.T, c *bus.Conn, node, p string, reads int) {
	t.Helper()
	pp, err := wire.ParsePlatform(p)
	if err != nil {
		t.Fatal(err)
	}
	hb := wire.Heartbeat{Node: node, State: wire.StateRunning, Running: "v1.0.0", KnownGood: "v1.0.0", SentAt: time.Now().UTC(),
		ManifestSchema: reads, Profile: &wire.Profile{OS: pp.OS, Arch: pp.Arch, Platform: p}}
	if _, err := c.JS.Publish(context.Background(), wire.NamesFor("").Heartbeat(node), hb.Marshal()); err != nil {
		t.Fatal(err)
	}
}

// announcePlatforms publishes version with an unsigned schema 4 manifest holding a build for
// each platform (sorted), as the commands read it.
func announcePlatforms(t *testing.T, c *bus.Conn, version string, platforms ...string) {
	t.Helper()
	m := wire.Manifest{Schema: wire.ManifestSchemaPlatforms, Version: version, Created: time.Now().UTC().Format(time.RFC3339)}
	for _, s := range platforms {
		p, _ := wire.ParsePlatform(s)
		m.Platforms = append(m.Platforms, wire.PlatformBuild{Platform: s, Object: wire.PlatformObjectName(version, p), Size: 1,
			Digest: digest.FromString(s), BinaryDigest: digest.FromString(s + " binary")})
	}
	if _, err := wire.ParseManifest(m.Marshal()); err != nil {
		t.Fatal(err)
	}
	kv, err := c.JS.KeyValue(context.Background(), wire.NamesFor("").Releases())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), version, m.Marshal()); err != nil {
		t.Fatal(err)
	}
}

// The issue (§2, §3) at the command line: `target --fleet` refuses a version with no build for
// a node's platform, naming it and its nodes, and sets nothing; --skip-platform leaves those
// nodes out and says so; a bad platform is a usage error; `rollout start --canary 1` on a fleet
// of two platforms is refused with the number needed; a schema 4 version is refused for a host
// that cannot read it, with the remedy.
func TestTheCommandsRefuseWhatTheFleetsPlatformsCannotTake(t *testing.T) {
	url, c := startServeConnected(t)
	announce(t, c, "v1.1.0")                                         // schema 1, linux/amd64 only
	announcePlatforms(t, c, "v1.2.0", "linux/amd64", "linux/arm/v7") // schema 4
	heartbeatOn(t, c, "amd-1", "linux/amd64", wire.ManifestSchemaPlatforms)
	heartbeatOn(t, c, "pi-1", "linux/arm/v7", wire.ManifestSchemaPlatforms)
	heartbeatOn(t, c, "old-1", "linux/amd64", 0) // a host from before schema 4
	env := map[string]string{envNATSURL: url}
	key := keyFile(t)
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"a platform the version lacks", []string{"target", "--fleet", "v1.1.0", "--key", key}, 1, "",
			"mesh-release target: no target was set: v1.1.0 has no linux/arm/v7 build; 1 node runs linux/arm/v7. Publish a version with that build (v1.1.0 has linux/amd64), or leave its nodes out with --skip-platform linux/arm/v7\n"},
		{"a bad platform", []string{"target", "--fleet", "v1.1.0", "--key", key, "--skip-platform", "linux"}, 2, "",
			`invalid value "linux" for flag -skip-platform: platform "linux" is not os/arch`},
		{"a skip for named nodes", []string{"target", "amd-1", "v1.1.0", "--key", key, "--skip-platform", "linux/arm/v7"}, 2, "",
			"--skip-platform and --skip-old-hosts leave nodes out of the --fleet target"},
		{"a schema 4 version and a host that cannot read it", []string{"rollout", "start", "v1.2.0", "--key", key}, 1, "",
			"v1.2.0's manifest is schema 4, which the hosts of 1 node cannot read (linux/amd64: 1): their heartbeats say no manifest_schema of 4 or more. Publish it for them as schema 3 with `mesh-release publish --manifest-schema 3`, or leave them out with --skip-old-hosts\n"},
		{"--canary below the platforms", []string{"rollout", "start", "v1.2.0", "--key", key, "--canary", "1", "--skip-old-hosts"}, 1, "",
			"mesh-release rollout start: --canary 1: this rollout targets 2 platforms (linux/amd64, linux/arm/v7) and puts a canary on each: give --canary 2 or more\n"},
		{"skipped", []string{"target", "--fleet", "v1.1.0", "--key", key, "--skip-platform", "linux/arm/v7"}, 0,
			"left out by platform: linux/arm/v7 (1 node, no build); they keep what they run, their hosts refusing the fleet target by name\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMain(t, env, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) || !strings.Contains(errOut, tc.err) {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant %d, %q, %q", code, out, errOut, tc.code, tc.out, tc.err)
			}
		})
	}
}
