package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire/meshtest"
)

// `publish --manifest-schema 3` announces the build's one platform as the manifest today's hosts
// read, and says which schema it announced; a bad --platform is a usage error naming it.
func TestPublishCommandManifestSchema3(t *testing.T) {
	dir := t.TempDir()
	if _, err := build.Keygen(dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, build.KeyFile)
	bin := filepath.Join(dir, "host")
	if err := build.GoBuild(context.Background(), build.GoBuildOptions{Package: "../../build/testdata/tiny", Out: bin}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "v1.0.0")
	if code, stdout, stderr := runMain(t, nil, "build", "--version", "v1.0.0", "--binary", bin, "--key", key, "-o", out, "--no-launcher"); code != 0 {
		t.Fatalf("build: exit %d: %s%s", code, stdout, stderr)
	}
	b := meshtest.StartBus(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"an arm platform without its variant", []string{"--manifest-schema", "3", "--platform", "linux/arm", "--key", key}, 2, `--platform: platform "linux/arm" names no arm variant`},
		{"without the key", []string{"--manifest-schema", "3"}, 1, "--manifest-schema 3 signs a manifest of its own: pass --key"},
		{"the build's one platform", []string{"--manifest-schema", "3", "--key", key}, 0, "published v1.0.0 (manifest schema 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, nil, append([]string{"publish", out, "--nats", b.URL()}, tc.args...)...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d saying %q", code, stdout, stderr, tc.code, tc.says)
			}
		})
	}
}
