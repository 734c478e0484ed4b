package link

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func window(t *testing.T, key string, nodes []string, spec string) []byte {
	t.Helper()
	s, err := wire.ParseWindowSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wire.NewWindow(key, nodes, s, 0, time.Now(), time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	return w.Marshal()
}

// The window in force is the node's own while it has one, else the fleet's; a change of the
// fleet's while the node has its own is not reported; another node's is never seen.
func TestLinkWindowNodeKeyWinsAndFallsBackToFleet(t *testing.T) {
	b := meshtest.StartBus(t)
	l := openLink(t, b.URL(), "n1")
	none := waitFor[WindowChanged](t, l, "the initial window", nil)
	if none.Key != "" || none.Window != nil {
		t.Fatalf("initial window = %+v, want none", none)
	}
	b.Put(names.Targets(), wire.FleetWindowKey, window(t, wire.FleetWindowKey, nil, "daily 02:00-04:00 UTC"))
	got := waitFor[WindowChanged](t, l, "the fleet window", nil)
	if got.Key != wire.FleetWindowKey || got.Window == nil || got.Window.Start != "02:00" {
		t.Fatalf("window = %+v", got)
	}
	b.Put(names.Targets(), wire.NodeWindowKey("n2"), window(t, wire.NodeWindowKey("n2"), []string{"n2"}, "mon 05:00-06:00 UTC"))
	b.Put(names.Targets(), wire.NodeWindowKey("n1"), window(t, wire.NodeWindowKey("n1"), []string{"n1"}, "mon 03:00-04:00 UTC"))
	got = waitFor[WindowChanged](t, l, "the node window", nil)
	if got.Key != wire.NodeWindowKey("n1") || got.Window.Start != "03:00" {
		t.Fatalf("window = %+v, want window.node.n1 at 03:00", got)
	}
	b.Put(names.Targets(), wire.FleetWindowKey, window(t, wire.FleetWindowKey, nil, "daily 07:00-08:00 UTC"))
	b.Put(names.Targets(), wire.NodeWindowKey("n1"), window(t, wire.NodeWindowKey("n1"), []string{"n1"}, "mon 09:00-10:00 UTC"))
	got = waitFor[WindowChanged](t, l, "the node window again", nil)
	if got.Key != wire.NodeWindowKey("n1") || got.Window.Start != "09:00" {
		t.Fatalf("a fleet change while the node key is present was reported: %+v", got)
	}
	b.Delete(names.Targets(), wire.NodeWindowKey("n1"))
	got = waitFor[WindowChanged](t, l, "the fallback to the fleet", nil)
	if got.Key != wire.FleetWindowKey || got.Window.Start != "07:00" {
		t.Fatalf("window = %+v, want the fleet's at 07:00", got)
	}
	b.Put(names.Targets(), wire.NodeWindowKey("n1"), []byte(`{"days":["someday"]}`))
	got = waitFor[WindowChanged](t, l, "the invalid window", nil)
	if got.Err == nil || got.Window != nil || !strings.Contains(got.Err.Error(), "window.node.n1 revision") {
		t.Fatalf("window = %+v, want an error naming the key", got)
	}
}

// A node enrolled before windows (decision 0029) has no permission for the two window keys: its
// link still follows its target, and reports no window rather than stalling.
func TestALinkWithoutTheWindowPermissionsStillFollowsItsTarget(t *testing.T) {
	pub, sub := nodePermissions("n1")
	var oldPub, oldSub []string
	for _, s := range pub {
		if !strings.Contains(s, ".window.") {
			oldPub = append(oldPub, s)
		}
	}
	for _, s := range sub {
		if !strings.Contains(s, ".window.") {
			oldSub = append(oldSub, s)
		}
	}
	if len(oldPub) != len(pub)-2 || len(oldSub) != len(sub)-2 {
		t.Fatalf("the window keys are not two gets and two subscriptions: %q %q", pub, sub)
	}
	b := meshtest.StartNodeUserBus(t, names, oldPub, oldSub)
	withdrawalsBucket(t, b.Admin)
	l := openLink(t, b.NodeURL(), "n1")
	waitFor[TargetChanged](t, l, "the initial target", nil)
	kv, err := b.Admin.KeyValue(meshtest.Context(t, 10*time.Second), names.Targets())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(meshtest.Context(t, 10*time.Second), wire.NodeTargetKey("n1"), target(t, wire.NodeTargetKey("n1"), "v1.2.0")); err != nil {
		t.Fatal(err)
	}
	got := waitFor[TargetChanged](t, l, "the node target", nil)
	if got.Target == nil || got.Target.Version != "v1.2.0" {
		t.Fatalf("target %+v, want v1.2.0", got)
	}
}
