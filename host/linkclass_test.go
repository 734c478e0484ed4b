package host

import (
	"testing"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A node that declares its link metered says so in every heartbeat; one that declares nothing
// says nothing.
func TestTheHeartbeatCarriesTheLinkClass(t *testing.T) {
	for _, class := range []string{wire.LinkMetered, ""} {
		t.Run("link_class "+class, func(t *testing.T) {
			_, hbs, _ := linkedHost(t, func(c *config.Config) { c.LinkClass = class })
			hb := meshtest.WaitHeartbeat(t, hbs, "a heartbeat", func(wire.Heartbeat) bool { return true })
			if hb.LinkClass != class {
				t.Errorf("link_class %q, want %q", hb.LinkClass, class)
			}
		})
	}
}
