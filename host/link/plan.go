package link

import "github.com/novox/mesh-host/wire"

// The rollout plan (decision 0047): the link follows the rollouts bucket's key wire.PlanKey like
// its others and reports each value as PlanArrived; the host verifies the plan and evaluates it
// for itself (host/plan.go).

// PlanArrived: the rollout plan key has a value, at the start of each session and at each new
// revision. Value is raw, unparsed and unverified (wire.ParsePlan). Deleted means the key was
// deleted or purged on the bus.
type PlanArrived struct {
	Value    []byte
	Revision uint64
	Deleted  bool
}

func (PlanArrived) event() {}

// planUserVersion is the first version of a node user's permissions that may follow the plan
// key (wire.NodeUserVersion 5).
const planUserVersion = 5

// FollowsPlan reports whether this link's user may follow the rollout plan: no user JWT (an
// nkey seed, no credentials), or one of version 5 or later. A user of an older version is asked
// for renewed (askRenewal); until then the host says no plans in its heartbeat, and a rollout
// gives it a target of its own.
func (l *Link) FollowsPlan() bool {
	return !l.legacy.Load() && (l.user == nil || l.version.Load() >= planUserVersion)
}

// planWatch follows the plan key, reporting its value once per session and each new revision
// after.
func (l *Link) planWatch() watchedKeys {
	return l.revisionWatcher(l.opts.Names.Rollouts(), wire.PlanKey, &revSeen{}, func(e *keyEntry) Event {
		return PlanArrived{Value: e.Value, Revision: e.Revision, Deleted: e.Deleted}
	})
}
