package lab

import (
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A newcomer's first mistake: a host binary built without a version stamp placed by hand as
// v1.0.0. It refuses to run, and the launcher stops after three tries; status must say why in
// full — which version the binary is, which it was started as, and how to stamp it — where it
// used to cut the reason off before the versions.
func TestMisplacedBinarySaysWhichVersionItIsAndHowToStampIt(t *testing.T) {
	t.Parallel()
	ctx := meshtest.Context(t, 60*time.Second)
	n := newNode(t)
	if err := n.PlaceVersion("v1.0.0", build(t, PkgHost, "v0.0.0-dev")); err != nil {
		t.Fatal(err)
	}
	start(t, n, "--backoff-min", "100ms")
	if code, err := n.Wait(ctx); err != nil || code != launcher.ExitFailed {
		t.Fatalf("launcher exit %d, %v; want %d", code, err, launcher.ExitFailed)
	}
	out := n.StatusText(ctx)
	for _, want := range []string{"this binary is v0.0.0-dev but was started as v1.0.0", "make build VERSION=v1.0.0"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
}
