package host

import (
	"testing"
	"time"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Every heartbeat says how often the host heartbeats while idle (interval_s): a reader waiting
// for its next word (a rollout's soak) cannot tell it from the gaps, which events shorten.
func TestTheHeartbeatCarriesItsInterval(t *testing.T) {
	for _, tc := range []struct {
		name  string
		every time.Duration
		want  float64
	}{
		{"an interval of minutes", 2 * time.Minute, 120},
		{"an interval under a second", 500 * time.Millisecond, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, hbs, _ := linkedHost(t, func(c *config.Config) { c.HeartbeatInterval = config.Duration(tc.every) })
			hb := meshtest.WaitHeartbeat(t, hbs, "a heartbeat", func(wire.Heartbeat) bool { return true })
			if hb.IntervalS != tc.want {
				t.Errorf("interval_s %v, want %v", hb.IntervalS, tc.want)
			}
		})
	}
}
