package main

import (
	"context"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire/meshtest"
)

// `mesh-release build` names the launcher it is given, as its own object, and says so;
// --no-launcher names none; the two together are refused.
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
		{"with --launcher", []string{"--launcher", bins["launcher"]}, 0, "/out/mesh-launcher-v0.3.0-linux-" + runtime.GOARCH + ".zst ("},
		{"with --no-launcher", []string{"--no-launcher"}, 0, "carries no mesh-launcher"},
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
			if c.code == 0 && (!strings.Contains(stdout, "built v1.2.3 for 1 platform, signed by ") || !strings.Contains(stdout, "manifest schema 4")) {
				t.Fatalf("stdout %q does not name the platform and schema 4", stdout)
			}
		})
	}
}

// `mesh-release build --delta-from` takes an earlier build's directory, or a version published
// on the bus, and says what it wrote; anything else is a usage error naming it.
func TestBuildCommandWritesADeltaFromADirectoryOrAPublishedVersion(t *testing.T) {
	dir := t.TempDir()
	if _, err := build.Keygen(dir); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, build.KeyFile)
	bin := func(v string) string {
		out := filepath.Join(dir, "host-"+v)
		if err := build.GoBuild(context.Background(), build.GoBuildOptions{Package: "../../build/testdata/tiny", Version: v, Out: out}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	b := meshtest.StartBus(t)
	first := filepath.Join(dir, "v1.0.0")
	if code, stdout, stderr := runMain(t, nil, "build", "--version", "v1.0.0", "--binary", bin("v1.0.0"), "--key", key, "-o", first, "--no-launcher"); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runMain(t, nil, "publish", first, "--nats", b.URL()); code != 0 {
		t.Fatalf("publish: exit %d: %s%s", code, stdout, stderr)
	}
	next := bin("v1.0.1")
	for _, tc := range []struct {
		name string
		from string
		code int
		says string
	}{
		{"an earlier build's directory", first, 0, "delta from v1.0.0: "},
		{"a published version", "v1.0.0", 0, "delta from v1.0.0: "},
		{"a version not published", "v0.9.0", 1, "delta base: v0.9.0 is not published in"},
		{"neither", "no-such-dir", 2, `--delta-from "no-such-dir" is neither a build directory nor a published version`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			code, stdout, stderr := runMain(t, nil, "build", "--version", "v1.0.1", "--binary", next, "--key", key, "-o", out,
				"--no-launcher", "--delta-from", tc.from, "--nats", b.URL())
			if code != tc.code || !strings.Contains(stdout+stderr, tc.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d saying %q", code, stdout, stderr, tc.code, tc.says)
			}
			if code == 0 && !strings.Contains(stdout, "manifest schema 4") {
				t.Fatalf("stdout %q does not name schema 4", stdout)
			}
		})
	}
}

// Platform lists are read before anything is built, and a bad one is refused by name.
func TestBuildCommandRefusesABadPlatformList(t *testing.T) {
	dir := t.TempDir()
	if _, err := build.Keygen(dir); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "host")
	if err := build.GoBuild(context.Background(), build.GoBuildOptions{Package: "../../build/testdata/tiny", Out: bin}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		extra []string
		code  int
		says  string
	}{
		{"arm without a variant", []string{"--platforms", "linux/amd64,linux/arm"}, 2, `platform "linux/arm" names no arm variant; say linux/arm/v7`},
		{"a platform named twice", []string{"--platforms", "linux/amd64,linux/arm64,linux/amd64"}, 2, "platform linux/amd64 is named twice"},
		{"not os/arch", []string{"--platforms", "amd64"}, 2, `platform "amd64" is not os/arch`},
		{"another operating system", []string{"--platforms", "darwin/arm64"}, 1, "platform darwin/arm64: hosts are released for linux only"},
		{"--platforms and --arch", []string{"--platforms", "linux/amd64", "--arch", "arm64"}, 2, "give --platforms or --arch, not both"},
		{"one binary for two platforms", []string{"--platforms", "linux/amd64,linux/arm64", "--binary", bin}, 1, "2 platforms are asked (linux/amd64,linux/arm64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"build", "--version", "v1.2.3", "--key", filepath.Join(dir, build.KeyFile), "-o", out}, tc.extra...)
			code, stdout, stderr := runMain(t, nil, args...)
			if code != tc.code || !strings.Contains(stderr, tc.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d saying %q", code, stdout, stderr, tc.code, tc.says)
			}
		})
	}
}
