package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/wire/meshtest"
)

// BenchmarkReleasePlatforms is issue 28's figures for the release side, measured with the
// commands an operator runs, from the repository root, on the real tree: for two platforms (the
// default) and for three (linux/arm/v7 added), the time of `mesh-release build`, of `publish` of
// that first (full) release, of the build of a point release (v1.0.1: the host changed, the
// launcher did not) and of its `publish --key` (which makes the host deltas against v1.0.0);
// and, for each platform, the bytes publish sent — the full release's, the launcher's share of
// them, and the point release's, whose launcher share must be 0 — and the point release's host
// delta, what a node of v1.0.0 fetches. The Go build cache is warmed
// first by one untimed build of the three platforms, so a build's time is the link, the strip
// and the packing, not the compile of the tree.
//
//	go test -run '^$' -bench ReleasePlatforms -benchtime 1x ./release/cmd/mesh-release/
func BenchmarkReleasePlatforms(b *testing.B) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		b.Fatal(err)
	}
	b.Chdir(root)
	keyDir := b.TempDir()
	if _, err := build.Keygen(keyDir); err != nil {
		b.Fatal(err)
	}
	key := filepath.Join(keyDir, build.KeyFile)
	three := "linux/amd64,linux/arm64,linux/arm/v7"
	cli := func(args ...string) string {
		var out, errOut bytes.Buffer
		s := &stdio{in: strings.NewReader(""), out: &out, err: &errOut, getenv: func(string) string { return "" }}
		if code := run(context.Background(), s, args); code != 0 {
			b.Fatalf("mesh-release %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
		}
		return out.String()
	}
	timed := func(args ...string) (string, time.Duration) {
		start := time.Now()
		out := cli(args...)
		return out, time.Since(start)
	}
	cli("build", "--version", "v0.0.1", "--key", key, "-o", filepath.Join(b.TempDir(), "warm"), "--platforms", three)
	for b.Loop() {
		for _, tc := range []struct {
			name  string
			extra []string
		}{
			{"2", nil}, // the default platforms
			{"3", []string{"--platforms", three}},
		} {
			bus := meshtest.StartBus(b)
			dir := b.TempDir()
			full, point := filepath.Join(dir, "v1.0.0"), filepath.Join(dir, "v1.0.1")
			_, buildFull := timed(append([]string{"build", "--version", "v1.0.0", "--key", key, "-o", full}, tc.extra...)...)
			sentFull, publishFull := timed("publish", full, "--nats", bus.URL(), "--key", key)
			_, buildPoint := timed(append([]string{"build", "--version", "v1.0.1", "--key", key, "-o", point}, tc.extra...)...)
			sentPoint, publishPoint := timed("publish", point, "--nats", bus.URL(), "--key", key)
			b.ReportMetric(buildFull.Seconds(), "build-"+tc.name+"-platforms-s")
			b.ReportMetric(publishFull.Seconds(), "publish-"+tc.name+"-platforms-full-s")
			b.ReportMetric(buildPoint.Seconds(), "build-"+tc.name+"-platforms-point-s")
			b.ReportMetric(publishPoint.Seconds(), "publish-"+tc.name+"-platforms-point-with-deltas-s")
			if tc.name != "3" {
				continue
			}
			for _, p := range sent(b, sentFull) {
				b.ReportMetric(float64(p.total), p.slug+"-full-sent-bytes")
				b.ReportMetric(float64(p.launcher), p.slug+"-full-launcher-bytes")
			}
			for _, m := range deltaLine.FindAllStringSubmatch(sentPoint, -1) {
				n, _ := strconv.ParseFloat(m[2], 64)
				b.ReportMetric(n, m[1]+"-point-delta-bytes") // what a node on v1.0.0 fetches
			}
			for _, p := range sent(b, sentPoint) {
				b.ReportMetric(float64(p.total), p.slug+"-point-sent-bytes")
				b.ReportMetric(float64(p.launcher), p.slug+"-point-launcher-bytes")
				if p.launcher != 0 {
					b.Errorf("%s: the point release sent %d launcher bytes; its launcher is unchanged", p.slug, p.launcher)
				}
			}
		}
	}
}

var deltaLine = regexp.MustCompile(`(?m)^delta from v1\.0\.0: mesh-host-v1\.0\.1-linux-(\S+)\.delta-from-v1\.0\.0\.zst \((\d+) bytes\)`)

var sentLine = regexp.MustCompile(`(?m)^linux/(\S+): sent (\d+) bytes \(launcher (\d+)\)`)

type platformSent struct {
	slug            string
	total, launcher int64
}

// sent reads what `mesh-release publish` printed it sent, platform by platform.
func sent(b *testing.B, out string) []platformSent {
	var got []platformSent
	for _, m := range sentLine.FindAllStringSubmatch(out, -1) {
		total, _ := strconv.ParseInt(m[2], 10, 64)
		launcher, _ := strconv.ParseInt(m[3], 10, 64)
		got = append(got, platformSent{strings.ReplaceAll(m[1], "/", "-"), total, launcher})
	}
	if len(got) == 0 {
		b.Fatalf("publish printed no bytes sent:\n%s", out)
	}
	return got
}
