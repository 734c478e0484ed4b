package host

import (
	"testing"

	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/wire"
)

// planAt is a plan of rollout id for version holding in of its batches (the canaries and one
// wave of every node), in state.
func planAt(id, version string, in int, state string) *wire.Plan {
	return &wire.Plan{Rollout: id, Version: version, Salt: wire.PlanSalt(version), Canaries: []string{"canary-1"},
		Waves: []uint32{wire.PlanScale}, In: in, State: state}
}

func TestANodeFollowsItsOwnKeyThenThePlanHoldingItThenWhatIsCarriedThenTheFleetKey(t *testing.T) {
	me := wire.PlanNode{ID: "web-01"}
	own := &link.TargetChanged{Key: wire.NodeTargetKey("web-01")}
	fleet := &link.TargetChanged{Key: wire.FleetTargetKey}
	holding := keptPlan{Plan: planAt("r2", "v1.2.0", 2, wire.PlanRunning)}
	canariesOnly := keptPlan{Plan: planAt("r2", "v1.2.0", 1, wire.PlanRunning)}
	for _, tc := range []struct {
		name string
		lt   *link.TargetChanged
		kp   keptPlan
		want int
	}{
		{"an operator's pin wins over a plan holding the node", own, holding, followKey},
		{"the plan holding the node wins over the fleet key", fleet, holding, followPlan},
		{"the plan holds the node before the link said the keys", nil, holding, followPlan},
		{"a plan not holding the node yet: the fleet key", fleet, canariesOnly, followKey},
		{"a plan not holding the node yet: what an earlier one held it at", fleet, keptPlan{Plan: canariesOnly.Plan, Carry: "v1.1.0"}, followCarried},
		{"a completed plan holds no node", fleet, keptPlan{Plan: planAt("r2", "v1.2.0", 2, wire.PlanCompleted)}, followKey},
		{"a halted plan holds the batches done only", fleet, keptPlan{Plan: planAt("r2", "v1.2.0", 1, wire.PlanHalted)}, followKey},
		{"nothing said yet", nil, keptPlan{}, followNothing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := followed(tc.lt, tc.kp, me); got != tc.want {
				t.Errorf("followed = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestAPlanOfAnotherRolloutCarriesWhatTheReplacedPlanHeldTheNodeAtUntilAPlanCompletes(t *testing.T) {
	me := wire.PlanNode{ID: "web-01"}
	r1 := planAt("r1", "v1.1.0", 2, wire.PlanHalted) // holds every node
	for _, tc := range []struct {
		name      string
		old       keptPlan
		next      *wire.Plan
		wantCarry string
	}{
		{"a plan of another rollout: what the old one held the node at is carried", keptPlan{Plan: r1}, planAt("r2", "v1.2.0", 1, wire.PlanRunning), "v1.1.0"},
		{"the same rollout's next write carries nothing new", keptPlan{Plan: r1}, planAt("r1", "v1.1.0", 1, wire.PlanHalted), ""},
		{"an old plan not holding the node carries nothing", keptPlan{Plan: planAt("r1", "v1.1.0", 1, wire.PlanHalted)}, planAt("r2", "v1.2.0", 1, wire.PlanRunning), ""},
		{"what is carried stays across plans that do not hold the node", keptPlan{Plan: planAt("r2", "v1.2.0", 1, wire.PlanHalted), Carry: "v1.1.0", CarryFrom: "r1"},
			planAt("r3", "v1.3.0", 1, wire.PlanRunning), "v1.1.0"},
		{"a completed plan ends what is carried", keptPlan{Plan: planAt("r2", "v1.2.0", 1, wire.PlanRunning), Carry: "v1.1.0", CarryFrom: "r1"},
			planAt("r2", "v1.2.0", 2, wire.PlanCompleted), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.old.replacedBy(*tc.next, 7, me)
			if got.Carry != tc.wantCarry || got.Plan.Rollout != tc.next.Rollout || got.Revision != 7 {
				t.Errorf("replacedBy = carry %q from %q, plan %s at %d; want carry %q, plan %s at 7", got.Carry, got.CarryFrom, got.Plan.Rollout, got.Revision, tc.wantCarry, tc.next.Rollout)
			}
		})
	}
}
