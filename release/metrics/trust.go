package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novox/mesh-host/release/fleet"
)

// The fleet's trust (decision 0045): the newest root on the bus, and the nodes behind it or
// whose trust expired.
var (
	descTrustRoot = prometheus.NewDesc("mesh_trust_root_version",
		"The newest root on the bus a node would accept (the chain of roots walked from root.1), 0 when it holds none.", nil, nil)
	descTrustBehind = prometheus.NewDesc("mesh_fleet_nodes_trust_behind",
		"Nodes whose newest root (trust_root) is older than the newest root on the bus: they take nothing a rotated key signs until they catch up.", nil, nil)
	descTrustExpired = prometheus.NewDesc("mesh_fleet_nodes_trust_expired",
		"Nodes whose trust expired (trust_expired_since): they keep running what they have and take no new target.", nil, nil)
	descNodesTrustRoot = prometheus.NewDesc("mesh_fleet_nodes_by_trust_root",
		`Nodes by the newest root they hold ("none": host.json's keys only, or a host older than roots).`, []string{"root"}, nil)
	descNodeTrustRoot = prometheus.NewDesc("mesh_node_trust_root",
		"The newest root one node holds, 0 for none (--node-metrics).", []string{"node"}, nil)
	descNodeTrustExpired = prometheus.NewDesc("mesh_node_trust_expired",
		"Whether one node's trust expired (--node-metrics).", []string{"node"}, nil)
)

// MaxRoots bounds the values the root label takes in one scrape: the roots with the most nodes
// keep their own series, the rest are summed under "other" (a heartbeat says any number).
const MaxRoots = 16

// rootLabel is a node's trust_root as a label value: its version, or none.
func rootLabel(v uint64) string {
	if v == 0 {
		return "none"
	}
	return strconv.FormatUint(v, 10)
}

// collectTrust counts rows' trust: the nodes behind busRoot, the expired, and by root.
func collectTrust(ch chan<- prometheus.Metric, rows []fleet.Row, perNode bool) {
	behind, expired := 0, 0
	byRoot := map[string]int{}
	for _, r := range rows {
		if r.Heartbeat == nil {
			continue
		}
		if r.TrustBehind {
			behind++
		}
		if r.TrustExpiredSince != nil {
			expired++
		}
		byRoot[rootLabel(r.TrustRoot)]++
		if perNode {
			node := nodeLabel(r.Node)
			ch <- gauge(descNodeTrustRoot, float64(r.TrustRoot), node)
			ch <- gauge(descNodeTrustExpired, b2f(r.TrustExpiredSince != nil), node)
		}
	}
	ch <- gauge(descTrustBehind, float64(behind))
	ch <- gauge(descTrustExpired, float64(expired))
	for v, n := range boundCounts(byRoot, MaxRoots) {
		ch <- gauge(descNodesTrustRoot, float64(n), v)
	}
}
