package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Roots v1…v3 on the real bus and nodes on v3, v2, host.json's keys, and v3 expired: the newest
// root is 3, two nodes are behind, one expired, each counted by root; a fleet without roots
// counts every node under "none", none behind. The root label is bounded as the others are.
func TestExporterCountsTheNodesBehindTheNewestRootAndTheExpired(t *testing.T) {
	expired := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name  string
		roots int
		beats map[string]func(*wire.Heartbeat)
		want  map[string]float64
	}{
		{"roots on the bus", 3, map[string]func(*wire.Heartbeat){
			"a": func(hb *wire.Heartbeat) { hb.TrustRoot = 3 },
			"b": func(hb *wire.Heartbeat) { hb.TrustRoot = 2 },
			"c": nil,
			"d": func(hb *wire.Heartbeat) { hb.TrustRoot, hb.TrustExpiredSince = 3, &expired },
		}, map[string]float64{
			"mesh_trust_root_version": 3, "mesh_fleet_nodes_trust_behind": 2, "mesh_fleet_nodes_trust_expired": 1,
			`mesh_fleet_nodes_by_trust_root{root="3"}`: 2, `mesh_fleet_nodes_by_trust_root{root="2"}`: 1, `mesh_fleet_nodes_by_trust_root{root="none"}`: 1,
			`mesh_fleet_nodes_by_state{state="trust-expired"}`: 1, `mesh_metrics_source_up{source="roots"}`: 1,
			`mesh_node_trust_root{node="b"}`: 2, `mesh_node_trust_expired{node="d"}`: 1, `mesh_node_trust_expired{node="a"}`: 0,
		}},
		{"no roots", 0, map[string]func(*wire.Heartbeat){"a": nil, "b": nil}, map[string]float64{
			"mesh_trust_root_version": 0, "mesh_fleet_nodes_trust_behind": 0, "mesh_fleet_nodes_trust_expired": 0,
			`mesh_fleet_nodes_by_trust_root{root="none"}`: 2, `mesh_fleet_nodes_by_state{state="trust-expired"}`: 0,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			if tc.roots > 0 {
				b.PutRoots(meshtest.RootChain(t, tc.roots, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))...)
			}
			e := New(Config{JS: b.Conn.JS, Names: b.Names, NodeMetrics: true})
			now := time.Now()
			for node, f := range tc.beats {
				e.Update(fleet.Entry{Node: node, Heard: now, Heartbeat: heartbeat(node, f)})
			}
			e.MarkReady()
			s := gather(t, e)
			for name, v := range tc.want {
				if got, ok := s[name]; !ok || got != v {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
				}
			}
		})
	}
}

func TestTheRootLabelIsBounded(t *testing.T) {
	e := New(Config{})
	now := time.Now()
	for i := range MaxRoots + 5 {
		node := fmt.Sprintf("n%02d", i)
		e.Update(fleet.Entry{Node: node, Heard: now, Heartbeat: heartbeat(node, func(hb *wire.Heartbeat) { hb.TrustRoot = uint64(1000 + i) })})
	}
	e.MarkReady()
	values := 0
	for name := range gather(t, e) {
		if len(name) > len("mesh_fleet_nodes_by_trust_root{") && name[:len("mesh_fleet_nodes_by_trust_root{")] == "mesh_fleet_nodes_by_trust_root{" {
			values++
		}
	}
	if values != MaxRoots {
		t.Errorf("%d values of the root label, want %d", values, MaxRoots)
	}
}
