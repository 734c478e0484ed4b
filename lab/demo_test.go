package lab

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/emulator"
	"github.com/novox/mesh-host/wire/meshtest"
)

// `make demo` is the README's main command: it must do what it says, end to end, or fail. Its
// narration names each step it checked; the test holds it to the story's milestones. Where this
// machine runs linux/arm64 binaries (under CI it must) the fleet is mixed, and the story is the
// canary on every platform catching a release broken on arm64 alone.
func TestDemoTellsTheStoryAsItHappens(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo (about two minutes)")
	}
	if meshtest.UnderCI() && runtime.GOARCH == "amd64" {
		meshtest.RequireArch(t, DemoForeignArch)
	}
	t.Parallel()
	ctx := meshtest.Context(t, 6*time.Minute)
	var out lockedBuffer
	if err := Demo(ctx, &out, bins.Src); err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, out.String())
	}
	want := []string{
		"✓ every node applied its declaration",
		"drift timer put it back",
		"✓ the canaries",
		"✓ v1.1.0 completed: every node runs it, confirmed",
		"✓ batches went in order",
		"✓ the rollout of v1.2.0 halted in its canary batch",
		"never fetched v1.2.0",
		"watch │ ", // the watch's own lines
		"mesh-launcher status --root",
		"NODE ",
	}
	if planDemo(ctx, runtime.GOARCH, emulator.Runs).brokenOn != "" {
		want = append(want,
			"a mixed fleet: node-1 … node-4 run linux/amd64, node-5 and node-6 linux/arm64",
			"go build ./host/cmd/mesh-host as v1.0.0 for linux/arm64 …", // what it builds, as it builds
			"mesh-release build + publish v1.1.0 (signed; one release for linux/amd64 and linux/arm64)",
			"v1.2.0 — broken on linux/arm64 only",
			"✓ node-5 and node-6 heartbeat machine arch arm64",
			"confirmed (four linux/amd64, two linux/arm64)",
			"because that batch held a linux/arm64 node",
			"rolled back from v1.2.0 by itself",
			"where v1.2.0 runs well, keeps what it runs",
		)
	} else {
		want = append(want, "go build ./lab/fixtures/crashrun as v1.2.0 …", "rolled back from v1.2.0 by themselves")
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("the demo did not say %q:\n%s", w, out.String())
		}
	}
}

// The demo's fleet is mixed where the machine runs arm64 binaries; where it cannot, the demo
// still runs, on the machine's own platform, and says what to install to see the mixed one.
func TestTheDemosFleetIsMixedOnlyWhereTheMachineRunsArm64(t *testing.T) {
	runs := func(context.Context, string) error { return nil }
	cannot := func(_ context.Context, arch string) error {
		return errors.New("linux/" + arch + " binaries: this machine cannot run them: exec format error")
	}
	amd, arm := []string{"amd64"}, []string{"arm64"}
	for _, tc := range []struct {
		name     string
		native   string
		runs     func(context.Context, string) error
		arches   []string
		broken   string
		brokenOn string
		noteSays []string
	}{
		{"amd64 with qemu-user", "amd64", runs, slices.Concat(amd, amd, amd, amd, arm, arm), PkgCrashArm64, "arm64",
			[]string{"a mixed fleet", "node-5 and node-6 linux/arm64", "qemu-user"}},
		{"amd64 without it", "amd64", cannot, slices.Repeat(amd, 6), PkgCrashRun, "",
			[]string{"cannot run linux/arm64 binaries (linux/arm64 binaries: this machine cannot run them: exec format error)",
				"install qemu-user-static binfmt-support", "all six nodes run linux/amd64"}},
		{"arm64", "arm64", runs, slices.Repeat(arm, 6), PkgCrashRun, "", []string{"all six nodes run linux/arm64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planDemo(context.Background(), tc.native, tc.runs)
			if !slices.Equal(p.arches, tc.arches) || p.broken != tc.broken || p.brokenOn != tc.brokenOn {
				t.Errorf("plan: nodes %v, v1.2.0 is %s broken on %q; want %v, %s, %q", p.arches, p.broken, p.brokenOn, tc.arches, tc.broken, tc.brokenOn)
			}
			for _, w := range tc.noteSays {
				if !strings.Contains(p.note, w) {
					t.Errorf("the demo says %q; want it to say %q", p.note, w)
				}
			}
		})
	}
}
