package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/novox/mesh-host/release/fleet"
)

// The metrics, as docs/metrics.md lists them. Fleet counts are gauges (nodes come and go); the
// releases published and withdrawn only grow, and are counters.
var (
	descSourceUp = prometheus.NewDesc("mesh_metrics_source_up",
		"Whether the last read of a source on the bus worked (heartbeats: followed and caught up).", []string{"source"}, nil)

	descNodes = prometheus.NewDesc("mesh_fleet_nodes",
		"Nodes with a heartbeat in the stream.", nil, nil)
	descNodesState = prometheus.NewDesc("mesh_fleet_nodes_by_state",
		"Nodes by STATE as `mesh-release fleet` judges it (status_kind), silent included.", []string{"state"}, nil)
	descNodesRunning = prometheus.NewDesc("mesh_fleet_nodes_by_running_version",
		"Nodes by the host version their last heartbeat says runs.", []string{"version"}, nil)
	descNodesKnownGood = prometheus.NewDesc("mesh_fleet_nodes_by_known_good_version",
		"Nodes by their known-good host version.", []string{"version"}, nil)
	descNodesLauncher = prometheus.NewDesc("mesh_fleet_nodes_by_launcher_version",
		"Nodes by the version of the launcher running their host.", []string{"version"}, nil)
	descFailing = prometheus.NewDesc("mesh_fleet_nodes_reconcile_failing",
		"Nodes whose last reconcile failed.", nil, nil)
	descDriftedNodes = prometheus.NewDesc("mesh_fleet_nodes_drifted",
		"Nodes whose last heartbeat reports drifted resources.", nil, nil)
	descDriftedResources = prometheus.NewDesc("mesh_fleet_drifted_resources",
		"Drifted resources the nodes' last heartbeats report, summed.", nil, nil)
	descFetchBytes = prometheus.NewDesc("mesh_fleet_fetch_bytes",
		"Bytes fetched so far by the nodes fetching a host version, summed.", nil, nil)
	descFetchSize = prometheus.NewDesc("mesh_fleet_fetch_size_bytes",
		"Size of what the nodes fetching a host version fetch, summed.", nil, nil)
	descAge = prometheus.NewDesc("mesh_fleet_heartbeat_age_seconds",
		"Time since each node's last heartbeat was stored, as of the scrape.", nil, nil)
	descOldestAge = prometheus.NewDesc("mesh_fleet_heartbeat_oldest_age_seconds",
		"Time since the least recently heard node's last heartbeat was stored.", nil, nil)

	descNodeInfo = prometheus.NewDesc("mesh_node_info",
		"One node's versions, STATE and platform (--node-metrics), always 1.", []string{"node", "running", "known_good", "state", "launcher", "platform"}, nil)
	descNodeAge = prometheus.NewDesc("mesh_node_heartbeat_age_seconds",
		"Time since one node's last heartbeat was stored (--node-metrics).", []string{"node"}, nil)
	descNodeFailing = prometheus.NewDesc("mesh_node_reconcile_failing",
		"Whether one node's last reconcile failed (--node-metrics).", []string{"node"}, nil)
	descNodeDrifted = prometheus.NewDesc("mesh_node_drifted_resources",
		"Drifted resources one node reports (--node-metrics).", []string{"node"}, nil)
	descNodeFetchBytes = prometheus.NewDesc("mesh_node_fetch_bytes",
		"Bytes one node has fetched of the host version it fetches or fetched last (--node-metrics).", []string{"node"}, nil)

	descRolloutInfo = prometheus.NewDesc("mesh_rollout_info",
		"The current rollout (the one `mesh-release rollout status` shows), always 1.", []string{"id", "version", "status"}, nil)
	descRolloutBatch = prometheus.NewDesc("mesh_rollout_batch",
		"The current rollout's batch in progress, from 1 (the number of batches once all are done).", nil, nil)
	descRolloutBatches = prometheus.NewDesc("mesh_rollout_batches",
		"The current rollout's batches.", nil, nil)
	descRolloutCreated = prometheus.NewDesc("mesh_rollout_created_timestamp_seconds",
		"When the current rollout started, in seconds since the Unix epoch.", nil, nil)
	descRolloutHalted = prometheus.NewDesc("mesh_rollout_halted",
		"Whether the current rollout halted (1), waiting for a person.", nil, nil)
	descRolloutPaused = prometheus.NewDesc("mesh_rollout_paused",
		"Whether the current rollout runs with no controller driving it (1).", nil, nil)
	descRolloutHaltNodes = prometheus.NewDesc("mesh_rollout_halt_nodes",
		"Nodes the current rollout's halt report gives, by why.", []string{"reason"}, nil)
	descRolloutNodes = prometheus.NewDesc("mesh_rollout_nodes",
		"Nodes the current rollout covers.", nil, nil)
	descRolloutConfirmed = prometheus.NewDesc("mesh_rollout_nodes_confirmed",
		"Nodes of the current rollout's batches begun whose last heartbeat runs its version as known-good.", nil, nil)
	descRolloutSoaked = prometheus.NewDesc("mesh_rollout_nodes_soaked",
		"Nodes of the current rollout's batches begun that are confirmed and soaked.", nil, nil)
	descRolloutLeftOut = prometheus.NewDesc("mesh_rollout_nodes_left_out",
		"Nodes the current rollout left out: silent when their batch began.", nil, nil)
	descBatchNodes = prometheus.NewDesc("mesh_rollout_batch_nodes",
		"Nodes of the current rollout's batch in progress.", nil, nil)
	descBatchConfirmed = prometheus.NewDesc("mesh_rollout_batch_nodes_confirmed",
		"Nodes of the batch in progress that are confirmed.", nil, nil)
	descBatchSoaked = prometheus.NewDesc("mesh_rollout_batch_nodes_soaked",
		"Nodes of the batch in progress that are confirmed and soaked.", nil, nil)

	descPlatformNodes = prometheus.NewDesc("mesh_rollout_platform_nodes",
		"Nodes the current rollout covers, by platform (absent for a rollout whose nodes said no platform).", []string{"platform"}, nil)
	descPlatformConfirmed = prometheus.NewDesc("mesh_rollout_platform_nodes_confirmed",
		"Nodes of the current rollout's batches begun whose last heartbeat runs its version as known-good, by platform.", []string{"platform"}, nil)
	descPlatformSoaked = prometheus.NewDesc("mesh_rollout_platform_nodes_soaked",
		"Nodes of the current rollout's batches begun that are confirmed and soaked, by platform.", []string{"platform"}, nil)
	descPlatformHalt = prometheus.NewDesc("mesh_rollout_platform_halt_nodes",
		"Nodes of the current rollout's halted batch that showed trouble, by platform.", []string{"platform"}, nil)
	descPlatformSkipped = prometheus.NewDesc("mesh_rollout_platform_skipped_nodes",
		"Nodes the current rollout left out by platform (--skip-platform, --skip-old-hosts).", []string{"platform"}, nil)
	descPublished = prometheus.NewDesc("mesh_releases_published_total",
		"Host versions published (manifests in the releases bucket).", nil, nil)
	descWithdrawn = prometheus.NewDesc("mesh_releases_withdrawn_total",
		"Host versions withdrawn (entries in the withdrawal list).", nil, nil)
)

var allDescs = []*prometheus.Desc{
	descSourceUp, descNodes, descNodesState, descNodesRunning, descNodesKnownGood, descNodesLauncher,
	descNodesPlatform,
	descFailing, descDriftedNodes, descDriftedResources, descFetchBytes, descFetchSize, descAge, descOldestAge,
	descNodeInfo, descNodeAge, descNodeFailing, descNodeDrifted, descNodeFetchBytes,
	descRolloutInfo, descRolloutBatch, descRolloutBatches, descRolloutCreated, descRolloutHalted, descRolloutPaused,
	descRolloutHaltNodes, descRolloutNodes, descRolloutConfirmed, descRolloutSoaked, descRolloutLeftOut,
	descBatchNodes, descBatchConfirmed, descBatchSoaked, descPublished, descWithdrawn,
	descPlatformNodes, descPlatformConfirmed, descPlatformSoaked, descPlatformHalt, descPlatformSkipped,
	descTrustRoot, descTrustBehind, descTrustExpired, descNodesTrustRoot, descNodeTrustRoot, descNodeTrustExpired,
}

// allKinds are the values of the state label: every STATE the fleet view gives, each always
// present (0 when no node is in it), so a query never finds a series missing.
var allKinds = []fleet.Kind{
	fleet.KindSilent, fleet.KindUnreadable, fleet.KindStopping, fleet.KindStandingAside, fleet.KindWithdrawn,
	fleet.KindSteppedDown, fleet.KindRolledBack, fleet.KindTrustExpired, fleet.KindRefused, fleet.KindFetching, fleet.KindTargetExpired, fleet.KindRestarted,
	fleet.KindTrying, fleet.KindFailing, fleet.KindOK,
}
