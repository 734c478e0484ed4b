package wire

import "strings"

// DefaultPrefix is the prefix every bus name is derived from unless configured otherwise.
const DefaultPrefix = "mesh"

// Names are the bus names under one prefix. With the default prefix "mesh": KV
// mesh_declarations, mesh_host_targets, mesh_host_releases, mesh_host_withdrawals,
// mesh_rollouts, mesh_enrolment, mesh_nodes, object store mesh_host_archives, stream
// MESH_HEARTBEATS on subjects mesh.node.*.heartbeat, the enrolment service on mesh.enrol.*.
type Names struct{ Prefix string }

// NamesFor returns the names under prefix, or under DefaultPrefix when it is empty.
func NamesFor(prefix string) Names {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return Names{Prefix: prefix}
}

func (n Names) Declarations() string { return n.Prefix + "_declarations" }
func (n Names) Targets() string      { return n.Prefix + "_host_targets" }
func (n Names) Releases() string     { return n.Prefix + "_host_releases" }
func (n Names) Rollouts() string     { return n.Prefix + "_rollouts" }
func (n Names) Archives() string     { return n.Prefix + "_host_archives" }

// Blobs is the object store holding what file, archive and package resources name by digest
// (object name = the digest, "sha256:<hex>").
func (n Names) Blobs() string       { return n.Prefix + "_blobs" }
func (n Names) Withdrawals() string { return n.Prefix + "_host_withdrawals" }
func (n Names) Enrolment() string   { return n.Prefix + "_enrolment" }
func (n Names) Nodes() string       { return n.Prefix + "_nodes" }

// EnrolSubject is the enrolment service's subject for a node's request; RevokeSubject its
// subject for revoking a node (admin only).
func (n Names) EnrolSubject() string  { return n.Prefix + ".enrol.node" }
func (n Names) RevokeSubject() string { return n.Prefix + ".enrol.revoke" }

// RenewSubject is where node asks the enrolment service for its user signed again with today's
// permissions (a request, no body; the reply is the JWT alone). Only node's own user may publish
// it: the subject says who asks. RenewWildcard matches every node's.
func (n Names) RenewSubject(node string) string { return n.Prefix + ".enrol.renew." + node }
func (n Names) RenewWildcard() string           { return n.Prefix + ".enrol.renew.*" }

// NodeInboxPrefix is the inbox prefix a node's connection uses, the only subjects its user may
// subscribe to (below it). It cannot collide with a default inbox, _INBOX.<nuid>.
func NodeInboxPrefix(node string) string { return "_INBOX.node." + node }

// NodeCredentialsSubject is where the enrolment service sends a node its renewed user JWT (the
// JWT alone, no seed: useless without the node's own key), below the node's inbox prefix, the
// only place its user may receive. A node whose user was issued with the permissions from
// before decision 0022 asks for one by putting RenewCredentialsHeader on its heartbeats
// (decision 0024).
func NodeCredentialsSubject(node string) string { return NodeInboxPrefix(node) + ".credentials" }

// RenewCredentialsHeader on a heartbeat asks the enrolment service for the node's user JWT
// issued again with today's permissions, for the key the node enrolled with; its value is
// RenewCredentialsLegacy. MaxCredentialsBytes bounds the JWT a node accepts.
//
// NodeUserVersion is the version of the permissions a node user is signed with today, in its
// JWT's tag NodeUserTagPrefix+version: a host whose user is of an older version asks for it on
// RenewSubject. 1 is the permissions from before decision 0022 (no tag); 2 follows keys by
// subscription and direct get and may ask RenewSubject (decision 0024); 3 may also read its
// maintenance window and the fleet's (decision 0029); 4 may also subscribe to the notices of the
// roots and of the bus configuration, the releases bucket's keys root.<n> and BusKey (decisions
// 0045, 0046); 5 may also follow the rollout plan, the rollouts bucket's key PlanKey (decision
// 0047).
const (
	NodeUserVersion   = 5
	NodeUserTagPrefix = "mesh-node-user:"
)

const (
	RenewCredentialsHeader = "Mesh-Renew-Credentials"
	RenewCredentialsLegacy = "legacy"
	MaxCredentialsBytes    = 16 << 10
)

func (n Names) HeartbeatStream() string {
	return strings.ToUpper(n.Prefix) + "_HEARTBEATS"
}

// Heartbeat is the subject a node heartbeats on.
func (n Names) Heartbeat(node string) string { return n.Prefix + ".node." + node + ".heartbeat" }

// HeartbeatWildcard matches every node's heartbeat subject.
func (n Names) HeartbeatWildcard() string { return n.Prefix + ".node.*.heartbeat" }

// NodeTargetKey is the targets key for one node; FleetTargetKey is the fallback for all.
func NodeTargetKey(node string) string { return "node." + node }

// FleetTargetKey is the targets key every node falls back to.
const FleetTargetKey = "fleet"

// WithdrawalsKey is the one key of the withdrawals bucket: the signed list.
const WithdrawalsKey = "list"
