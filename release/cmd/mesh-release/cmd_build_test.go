package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/release/build"
)

// `mesh-release build` packs the launcher it is given and says so; --no-launcher writes schema 1;
// the two together are refused.
func TestBuildCommandCarriesTheLauncherOrNone(t *testing.T) {
	dir := t.TempDir()
	if _, err := build.Keygen(dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, build.KeyFile)
	bins := map[string]string{}
	for name, pkg := range map[string]string{"host": "../../build/testdata/tiny", "launcher": "../../build/testdata/tinylauncher"} {
		bins[name] = filepath.Join(dir, name)
		if err := build.GoBuild(context.Background(), build.GoBuildOptions{Package: pkg, Version: "", Out: bins[name]}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		extra []string
		code  int
		says  string
	}{
		{"with --launcher", []string{"--launcher", bins["launcher"]}, 0, "carries mesh-launcher v0.3.0 ("},
		{"with --no-launcher", []string{"--no-launcher"}, 0, "carries no mesh-launcher; manifest schema 1"},
		{"with both", []string{"--no-launcher", "--launcher", bins["launcher"]}, 1, "--launcher or --no-launcher, not both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"build", "--version", "v1.2.3", "--binary", bins["host"], "--key", key, "-o", out}, c.extra...)
			code, stdout, stderr := runMain(t, nil, args...)
			if code != c.code || !strings.Contains(stdout+stderr, c.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d saying %q", code, stdout, stderr, c.code, c.says)
			}
			if c.code == 0 && c.extra[0] == "--launcher" && !strings.Contains(stdout, "manifest schema 2") {
				t.Fatalf("stdout %q does not name schema 2", stdout)
			}
		})
	}
}
