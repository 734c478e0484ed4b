package rollout

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The mixed fleet on a real bus (§2, §3): a version without an arm/v7 build is refused
// while an arm/v7 node would be targeted, and started with --skip-platform linux/arm/v7, which
// the stored state records; the canaries are one amd64 and one arm64 node, and a release that
// rolls back on arm64 only halts in the canary batch, the halt saying which platform failed.
// The arm/v7 node is never targeted.
func TestARollbackOnlyOnArm64HaltsTheCanariesAndSaysWhichPlatformFailed(t *testing.T) {
	b := meshtest.StartBus(t)
	publishPlatforms(t, b, "v1.1.0", "linux/amd64", "linux/arm64")
	var ns []*simNode
	for _, n := range []struct{ id, platform string }{
		{"amd-1", "linux/amd64"}, {"amd-2", "linux/amd64"}, {"amd-3", "linux/amd64"},
		{"arm-1", "linux/arm64"}, {"arm-2", "linux/arm64"}, {"pi-1", "linux/arm/v7"},
	} {
		sn := node(n.id, "v1.0.0")
		if n.platform == "linux/arm64" {
			sn = node(n.id, "v1.0.0", "v1.1.0", rollsBack)
		}
		sn.platform = n.platform
		ns = append(ns, sn)
	}
	s := startSim(t, b, ns...)
	ev := &events{}
	c := newController(t, connect(t, b), ev, "")
	ctx := meshtest.Context(t, time.Minute)
	o := testOptions("v1.1.0")
	if _, err := c.Start(ctx, o); !errors.As(err, new(*PlatformError)) ||
		!strings.Contains(err.Error(), "v1.1.0 has no linux/arm/v7 build; 1 node runs linux/arm/v7") {
		t.Fatalf("start without --skip-platform: %v, want the arm/v7 refusal", err)
	}
	o.SkipPlatforms = []string{"linux/arm/v7"}
	st, err := c.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if want := []SkippedPlatform{{Platform: "linux/arm/v7", Nodes: 1, Why: SkipNoBuild}}; !slices.Equal(st.Skipped, want) || slices.Contains(st.Nodes, "pi-1") {
		t.Fatalf("skipped %+v, nodes %v; want pi-1 left out as %+v", st.Skipped, st.Nodes, want)
	}
	if got := st.Batches[0].Platforms; !slices.Equal(got, []PlatformCount{{Platform: "linux/amd64", Nodes: 1}, {Platform: "linux/arm64", Nodes: 1}}) {
		t.Fatalf("the canaries' platforms %+v, want one amd64 and one arm64", got)
	}
	st, err = c.Run(ctx, st.ID)
	ev.dump(t)
	if err != nil || st.Status != StatusHalted || st.Halt.Batch != 0 {
		t.Fatalf("run = %s, %v, halt %+v; want halted in the canary batch", st.Status, err, st.Halt)
	}
	halted := ev.kinds(EventHalted)
	if len(halted) != 1 || !strings.Contains(halted[0].Message, "HALTED in batch 1/3 (canary): 1 of 1 linux/arm64 canary rolled back; linux/amd64") {
		t.Errorf("halted events %+v; want one saying the arm64 canary rolled back", halted)
	}
	stored, err := Get(ctx, connect(t, b), wire.NamesFor(""), st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p := stored.Halt.Platforms; len(p) != 2 || p[0].Platform != "linux/arm64" || p[0].Troubled != 1 || p[0].Why != WhyRolledBack || p[1].Troubled != 0 {
		t.Errorf("the stored halt by platform %+v", p)
	}
	if got := s.targeted("pi-1"); len(got) != 0 {
		t.Errorf("the skipped arm/v7 node took %v", got)
	}
}

// A rollout started before issue 28 — its state with no platform anywhere, as that controller
// wrote it — is resumed by this one: its batches run as planned, and a halt is still said by
// platform, from the nodes' heartbeats.
func TestARolloutStartedBeforePlatformsResumesAndItsHaltIsSaidByPlatform(t *testing.T) {
	b := meshtest.StartBus(t)
	publishRelease(t, b, "v1.2.0")
	amd, arm := node("amd-1", "v1.1.0"), node("arm-1", "v1.1.0", "v1.2.0", rollsBack)
	amd.platform, arm.platform = "linux/amd64", "linux/arm64"
	startSim(t, b, amd, arm, node("old-1", "v1.1.0"))
	ctx := meshtest.Context(t, time.Minute)
	st := planned("20261202T020000Z-v1.2.0", 3)
	st.Nodes, st.Ran = []string{"amd-1", "arm-1", "old-1"}, []string{"v1.1.0", "v1.1.0", "v1.1.0"}
	st.WindowS, st.SoakS, st.SilentAfterS = 3, 1, 1
	s := testStore(t, b)
	if _, err := s.saveState(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.savePointer(ctx, st.ID, 0); err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	got, err := newController(t, connect(t, b), ev, "").Resume(ctx)
	ev.dump(t)
	if err != nil || got.Status != StatusHalted {
		t.Fatalf("resume = %s, %v; want halted", got.Status, err)
	}
	if h := got.HaltByPlatform(); !strings.Contains(h, "1 of 1 linux/arm64 canary rolled back") {
		t.Errorf("the halt by platform: %q", h)
	}
	if got.Batches[0].Platforms != nil || got.Skipped != nil {
		t.Errorf("a state planned without platforms got some: %+v, %+v", got.Batches[0].Platforms, got.Skipped)
	}
}
