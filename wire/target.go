package wire

import (
	"encoding/json"
	"fmt"
)

// Target is the value under KV mesh_host_targets keys "node.<id>" and "fleet": the host
// version a node should run.
type Target struct {
	Version string `json:"version"`
}

// ParseTarget decodes a target strictly and checks that it names a version by the same rule as
// a manifest (ValidVersion): a target that delivery would refuse is refused where it is read.
func ParseTarget(b []byte) (Target, error) {
	var t Target
	if err := decodeStrict(b, &t); err != nil {
		return Target{}, fmt.Errorf("target: %w", err)
	}
	if !ValidVersion(t.Version) {
		return Target{}, fmt.Errorf("target: version %q is not %s", t.Version, VersionRule)
	}
	return t, nil
}

// Marshal returns the target's JSON.
func (t Target) Marshal() []byte { b, _ := json.Marshal(t); return b }
