package wire

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// The declaration size: 11,000 resources, about 1 MB. The strict key pre-pass costs about
// a third on top of encoding/json.
func BenchmarkParseDeclarationOfElevenThousandResources(b *testing.B) {
	res := make([]string, 11000)
	for i := range res {
		res[i] = fmt.Sprintf(`{"type":"file","id":"/srv/app/data/file-%05d.conf","spec":{"content":"x","mode":"0644"}}`, i)
	}
	doc := []byte(`{"version":1,"node":"n1","resources":[` + strings.Join(res, ",") + `]}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDeclaration(doc, "n1"); err != nil {
			b.Fatal(err)
		}
	}
}

// A heartbeat as the rollout controller reads one per message (release/fleet's entryOf calls
// ParseHeartbeat): "simulated" is what lab/sim's nodes send in the 10,000-node rollout
// benchmark, "host" a real host's with its profile, inventory, drift and a rollback. Before
// the strict decoder cached each type's keys per process, every message rebuilt them.
func BenchmarkDecodeHeartbeat(b *testing.B) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	simulated := Heartbeat{Node: "sim-04711", State: StateRunning, Running: "v1.4.0", KnownGood: "v1.4.0", Target: "v1.4.0",
		UptimeS: 3600, SentAt: at, LastReconcile: &LastReconcile{At: at, Trigger: TriggerTimer, OK: true, DurationMS: 1}}
	host := machineHeartbeat()
	host.KnownGood, host.Target, host.UptimeS = "v1.4.0", "v1.4.0", 86400
	host.LastReconcile = &LastReconcile{At: at, Trigger: TriggerTimer, OK: true, DurationMS: 12}
	host.Rollbacks = []Rollback{{From: "v1.3.9", To: "v1.3.8", At: at, Reason: "exited 1 within 10s of starting", Output: "panic: no config"}}
	host.Launcher = &Launcher{Version: "v0.3.0", Floor: "v0.2.0", State: LauncherConfirmed}
	for _, c := range []struct {
		name string
		hb   Heartbeat
	}{{"simulated", simulated}, {"host", host}} {
		doc := c.hb.Marshal()
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseHeartbeat(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
