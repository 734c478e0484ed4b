// Package rollout stages a host release across the fleet and halts by itself when it looks broken.
//
// It goes canaries first, then growing batches, each batch's nodes targeted one key at a time (KV
// node.<id>) and watched on their heartbeats until every one runs the version confirmed and stays
// so for a soak; only then the next batch, and after the last the fleet key. A node of the current
// batch that goes silent, rolls back, restarts during its soak, refuses the version or does not
// confirm within the window halts the rollout: no further batch, the batch's targets set back, the
// fleet key untouched, and a report naming each node and why.
//
// The state of every rollout lives in KV <prefix>_rollouts (key rollout.<id>, plus "current"
// naming the newest), and every write is a compare-and-set on the revision last read, so two
// controllers can never both act: the one that holds a rollout renews a lease on it, and a
// controller killed at any point is resumed from what the bucket says (docs/decisions/0006).
//
// A controller is long-lived: a bus operation that fails because the server is away is retried,
// and its watches are established again, so a server restart (JetStream on disk) pauses a
// rollout but never halts it — silence is judged only on heartbeats the server stored, and only
// once nodes have had time to be heard again.
package rollout
