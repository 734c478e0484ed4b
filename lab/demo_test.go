package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire/meshtest"
)

// `make demo` is the README's main command: it must do what it says, end to end, or fail. Its
// narration names each step it checked; the test holds it to the story's milestones.
func TestDemoTellsTheStoryAsItHappens(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole demo (about a minute)")
	}
	t.Parallel()
	ctx := meshtest.Context(t, 4*time.Minute)
	var out lockedBuffer
	if err := Demo(ctx, &out, bins.Src); err != nil {
		t.Fatalf("the demo failed: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"✓ every node applied its declaration",
		"drift timer put it back",
		"✓ the canaries",
		"✓ v1.1.0 completed: every node runs it, confirmed",
		"✓ batches went in order",
		"✓ the rollout of v1.2.0 halted in its canary batch",
		"rolled back from v1.2.0 by themselves",
		"never fetched v1.2.0",
		"go build ./lab/fixtures/crashrun as v1.2.0 …", // what it builds, as it builds
		"watch │ ", // the watch's own lines
		"mesh-launcher status --root",
		"NODE ",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo did not say %q:\n%s", want, out.String())
		}
	}
}
